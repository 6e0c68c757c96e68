"""Prediction records and segment files for the warehouse's tests."""

from __future__ import annotations

import time
from pathlib import Path

from mlpipe.config import Settings
from mlpipe.predlog import ENCODER, PredictionRecord


def records(
    n: int,
    prefix: str = "r",
    *,
    tenant: str = "t",
    model: str = "fraud",
    arm: str = "champion",
    start: float | None = None,
) -> list[PredictionRecord]:
    """``n`` records ``{prefix}0``.., a second apart back from ``start`` (a minute ago)."""
    now = start if start is not None else time.time() - 60
    return [
        PredictionRecord(
            request_id=f"{prefix}{i}",
            ts=now - i,
            tenant=tenant,
            model=model,
            version="1",
            arm=arm,
            generation=1,
            entity_key=f"customer_id={i}",
            entity={"customer_id": i},
            features={"amount": float(i)},
            score=0.5,
            label=i % 2,
            latency_ms=3.0,
        )
        for i in range(n)
    ]


def write_segment(
    settings: Settings, name: str, logged: list[PredictionRecord], tail: bytes = b""
) -> Path:
    """A segment ``name`` under the prediction log: one line per record, then ``tail``."""
    path = settings.predlog_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in logged) + tail)
    return path
