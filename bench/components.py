"""``python -m bench.components``: the pieces of the request path, measured in-process.

Scoring batched vs batch size 1, feature read (cache hit vs Feast online
store miss), prediction-log append per row, router decision, the whole
pipeline per batch size, and ``mlpipe --help`` wall time. Writes
``bench/results/components.json`` and prints a table. Needs the bench home
(``python -m bench.run`` builds it). Not covered yet: ``warehouse sync``
rows/s and ``monitor drift`` against Evidently alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.summary import percentile
from bench.workload import Cases, ensure_home

RESULTS = Path(__file__).resolve().parent / "results"


def timed(fn: Callable[[], Any], *, min_s: float = 1.0, max_n: int = 100_000) -> list[float]:
    """Per-call seconds of ``fn`` over at least ``min_s`` (bounded by ``max_n`` calls)."""
    fn()
    out: list[float] = []
    end = time.perf_counter() + min_s
    while time.perf_counter() < end and len(out) < max_n:
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return sorted(out)


def row(name: str, per_call: list[float], per: int = 1, unit: str = "row") -> dict[str, Any]:
    p50, p99 = percentile(per_call, 50), percentile(per_call, 99)
    return {
        "component": name,
        "calls": len(per_call),
        "p50_us": round(p50 * 1e6, 1),
        "p99_us": round(p99 * 1e6, 1),
        f"{unit}s_per_s": round(per / p50) if p50 > 0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.components")
    p.add_argument("--home", type=Path, default=RESULTS / "home")
    p.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    home = ensure_home(a.home)
    from mlpipe import registry
    from mlpipe.config import load_settings
    from mlpipe.features import OnlineFeatures
    from mlpipe.predlog import PredictionRecord
    from mlpipe.predlog.segments import SegmentWriter
    from mlpipe.routing import Router
    from mlpipe.serving import PredictRequest, ServingRuntime

    settings = load_settings(home=home)
    s = a.seconds
    rows: list[dict[str, Any]] = []
    model = registry.load_verified(settings, "fraud", "1")
    rng = np.random.default_rng(1)
    for n in (1, 64):
        x = rng.random((n, len(model.features)))
        rows.append(
            row(f"score booster batch {n}", timed(lambda x=x: model.predict_scores(x), min_s=s), n)
        )
    x1 = rng.random((1, len(model.features)))
    rows.append(
        row(
            "score sklearn predict_proba batch 1",
            timed(lambda: model.model.predict_proba(x1), min_s=s),
        )
    )

    online = OnlineFeatures(settings, "fraud_v1", cache_ttl_s=300, cache_size=100_000)
    online.get({"customer_id": 1})
    rows.append(
        row("features cache hit (1 entity)", timed(lambda: online.get({"customer_id": 1}), min_s=s))
    )
    cold = OnlineFeatures(settings, "fraud_v1", cache_size=0)
    rows.append(
        row(
            "features Feast online miss (1 entity)",
            timed(lambda: cold.get({"customer_id": 2}), min_s=s),
        )
    )
    ents = [{"customer_id": i} for i in range(1, 65)]
    rows.append(
        row(
            "features Feast online miss (64 entities)",
            timed(lambda: cold.get_many(ents), min_s=s),
            64,
        )
    )

    router = Router(model="fraud", champion="1", canary="2", canary_weight=10.0)
    rows.append(row("router decision", timed(lambda: router.route("customer_id=42"), min_s=s)))

    record = PredictionRecord(
        request_id="r",
        ts=time.time(),
        tenant="default",
        model="fraud",
        version="1",
        arm="champion",
        generation=1,
        entity_key="customer_id=42",
        entity={"customer_id": 42},
        features=dict.fromkeys(model.features, 1.0),
        score=0.1,
        label=0,
        latency_ms=1.0,
        feature_cache_hit=True,
        prediction_cache_hit=False,
        features_missing=[],
    )
    with tempfile.TemporaryDirectory() as tmp:
        sink = SegmentWriter(Path(tmp), "bench", fsync_interval_s=0.2)
        batch = [record] * 64
        rows.append(
            row("predlog append (batch of 64)", timed(lambda: sink.append(batch), min_s=s), 64)
        )
        rows.append(row("predlog append (1 row)", timed(lambda: sink.append([record]), min_s=s)))
        sink.close()

    rt = ServingRuntime(settings).start()
    try:
        deadline = time.monotonic() + 60
        while not rt.ready and time.monotonic() < deadline:
            time.sleep(0.1)
        cases, counter = Cases(), iter(range(10**9))

        def requests(n: int) -> list[Any]:
            out = []
            for _ in range(n):
                cid, amount = cases.case(next(counter))
                out.append(
                    PredictRequest(
                        model="fraud",
                        entity={"customer_id": cid},
                        features={"amount": amount},
                        request_id="r",
                    )
                )
            return out

        for n in (1, 8, 64):
            rows.append(
                row(
                    f"pipeline predict_batch {n} (w/ request build)",
                    timed(lambda n=n: rt.pipeline.predict_batch(requests(n)), min_s=s),
                    n,
                )
            )
    finally:
        rt.close()

    mlpipe = Path(sys.executable).parent / "mlpipe"
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([str(mlpipe), "--help"], capture_output=True, check=True, timeout=60)
        walls.append(time.perf_counter() - t0)
    rows.append(row("mlpipe --help (wall)", sorted(walls), unit="call"))

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "components.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("| component | calls | p50 µs | p99 µs | per s |\n|---|---|---|---|---|")
    for r in rows:
        rate = next(v for k, v in r.items() if k.endswith("_per_s"))
        print(f"| {r['component']} | {r['calls']} | {r['p50_us']} | {r['p99_us']} | {rate} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
