"""A prediction record factory for the prediction-log tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from mlpipe.predlog import PredictionRecord


def _record(i: int) -> PredictionRecord:
    return PredictionRecord(
        request_id=f"r{i}",
        ts=time.time(),
        tenant="default",
        model="fraud",
        version="1",
        arm="champion",
        generation=1,
        entity_key=f"customer_id={i}",
        entity={"customer_id": i},
        features={"amount": float(i)},
        score=0.5,
        label=1,
        latency_ms=1.0,
    )


@pytest.fixture
def make_record() -> Callable[[int], PredictionRecord]:
    """``make_record(i)``: a champion row of model ``fraud`` with request id ``r{i}``."""
    return _record
