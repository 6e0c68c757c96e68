"""Synthetic request traffic for a running scoring service (the demo's client).

Requests come from the generated transaction stream, so entities and amounts
look like what the model was trained on; ``amount_factor`` shifts the
request-time amount for drift demos.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlpipe.errors import StoreUnavailable


@dataclass
class TrafficResult:
    """What a burst of requests saw, from the client's side."""

    sent: int = 0
    ok: int = 0
    errors: Counter[int] = field(default_factory=Counter)
    by_arm: Counter[str] = field(default_factory=Counter)
    by_version: Counter[str] = field(default_factory=Counter)
    generations: set[int] = field(default_factory=set)
    latencies_ms: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def fraud_requests(
    transactions: Path, n: int, *, seed: int = 0, amount_factor: float = 1.0
) -> list[dict[str, Any]]:
    """``n`` /predict bodies for model ``fraud`` drawn from a transactions parquet file."""
    import pandas as pd

    frame = pd.read_parquet(transactions, columns=["customer_id", "amount"])
    sample = frame.sample(n=n, replace=True, random_state=seed)
    return [
        {
            "model": "fraud",
            "entity": {"customer_id": int(cid)},
            "features": {"amount": round(float(amount) * amount_factor, 2)},
        }
        for cid, amount in zip(sample["customer_id"], sample["amount"], strict=True)
    ]


def send(url: str, bodies: list[dict[str, Any]], *, concurrency: int = 16) -> TrafficResult:
    """POST every body to ``{url}/predict`` with at most ``concurrency`` in flight."""
    return asyncio.run(_send(url, bodies, concurrency))


async def _send(url: str, bodies: list[dict[str, Any]], concurrency: int) -> TrafficResult:
    import httpx

    result = TrafficResult()
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                start = time.perf_counter()
                try:
                    response = await client.post("/predict", json=body)
                except httpx.HTTPError:
                    result.errors[0] += 1
                    return
                finally:
                    result.sent += 1
                if response.status_code != 200:
                    result.errors[response.status_code] += 1
                    return
                result.latencies_ms.append((time.perf_counter() - start) * 1000)
                data = response.json()
                result.ok += 1
                result.by_arm[data["arm"]] += 1
                result.by_version[data["version"]] += 1
                result.generations.add(int(data["generation"]))

        await asyncio.gather(*(one(b) for b in bodies))
    return result


def wait_for_generation(
    url: str, body: dict[str, Any], generation: int, timeout_s: float = 30
) -> None:
    """Poll until the service answers from ``generation`` or later (hot reload is ~1 s)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.post(f"{url}/predict", json=body, timeout=10)
        if response.status_code == 200 and response.json()["generation"] >= generation:
            return
        time.sleep(0.2)
    raise StoreUnavailable(f"the service did not reach generation {generation} in {timeout_s}s")
