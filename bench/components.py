"""``python -m bench.components``: the pieces of the request path, measured in-process.

Scoring batched vs batch size 1, feature read (cache hit vs Feast online
store miss), prediction-log append per row, router decision, the whole
pipeline per batch size, ``warehouse sync`` rows/s and ``monitor drift``
next to Evidently alone (``bench/offline.py``), and ``mlpipe --help`` /
``mlpipe status`` wall time. Writes ``bench/results/components.json`` and
prints a table and the issue's targets. Needs the bench home (built here when
missing, as ``python -m bench.run`` does). ``--quick`` runs small.
"""

from __future__ import annotations

import argparse
import json
import os
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
        f"{unit}s_per_s": _rate(per / p50) if p50 > 0 else None,
    }


def _rate(value: float) -> float:
    return round(value) if value >= 100 else round(value, 2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.components")
    p.add_argument("--home", type=Path, default=RESULTS / "home")
    p.add_argument("--seconds", type=float, default=None, help="per measurement (1; quick 0.3)")
    p.add_argument("--quick", action="store_true", help="small sizes, short measurements")
    p.add_argument(
        "--sync-rows", type=int, default=None, help="rows logged for sync (200k; quick 20k)"
    )
    p.add_argument(
        "--drift-rows", type=int, default=None, help="rows a side for drift (100k; quick 10k)"
    )
    p.add_argument("--repeats", type=int, default=None, help="sync/drift repeats (3; quick 1)")
    a = p.parse_args(argv)
    a.seconds = a.seconds or (0.3 if a.quick else 1.0)
    a.sync_rows = a.sync_rows or (20_000 if a.quick else 200_000)
    a.drift_rows = a.drift_rows or (10_000 if a.quick else 100_000)
    a.repeats = a.repeats or (1 if a.quick else 3)
    warnings.filterwarnings("ignore")
    home = ensure_home(a.home)
    from mlpipe import registry
    from mlpipe.config import load_settings
    from mlpipe.features import OnlineFeatures
    from mlpipe.predlog import PredictionRecord, SegmentWriter
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

    from bench import offline

    print("bench: warehouse sync and monitor drift ...", file=sys.stderr, flush=True)
    rows += offline.measure(a.sync_rows, a.drift_rows, a.repeats)

    mlpipe = Path(sys.executable).parent / "mlpipe"
    env = {**os.environ, "MLPIPE_HOME": str(home)}
    for args in (["--help"], ["status", "fraud"]):
        walls = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run(
                [str(mlpipe), *args], capture_output=True, check=True, timeout=120, env=env
            )
            walls.append(time.perf_counter() - t0)
        rows.append(row(f"mlpipe {' '.join(args)} (wall)", sorted(walls), unit="call"))

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "components.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    print("\n".join(f"- {line}" for line in targets(rows)))
    return 0


def _duration(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.1f} µs"


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as markdown: median and p99 (the slowest of a few repeats for the long ones)."""
    out = ["| component | calls | p50 | p99 (max) | per s |", "|---|---|---|---|---|"]
    for r in rows:
        rate = next(v for k, v in r.items() if k.endswith("_per_s"))
        unit = next(k for k in r if k.endswith("_per_s")).removesuffix("s_per_s")
        cells = [_duration(r["p50_us"]), _duration(r["p99_us"]), f"{rate:,} {unit}s"]
        out.append(f"| {r['component']} | {r['calls']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def targets(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's component targets as lines of text (information, never asserted)."""

    def get(prefix: str) -> dict[str, Any] | None:
        return next((r for r in rows if r["component"].startswith(prefix)), None)

    out: list[str] = []
    b1, b64 = get("score booster batch 1"), get("score booster batch 64")
    if b1 and b64:
        out.append(
            f"scoring rows/s batch 64 / batch 1: {b64['rows_per_s'] / b1['rows_per_s']:.1f} "
            "(target ≥ 20)"
        )
    for prefix, label, limit in (
        ("features cache hit", "feature cache hit", 50),
        ("features Feast online miss (1", "Feast online miss", 2000),
        ("router decision", "router decision", 20),
    ):
        r = get(prefix)
        if r:
            out.append(
                f"{label}: p50 {_duration(r['p50_us'])}, p99 {_duration(r['p99_us'])} "
                f"(target ≤ {_duration(limit)})"
            )
    sync = get("warehouse sync (")
    if sync:
        out.append(f"warehouse sync: {sync['rows_per_s']:,} rows/s (target ≥ 200,000)")
    alone, mine = get("Evidently alone: report.run"), get("mlpipe monitor drift")
    if alone and mine:
        paired = sorted(m / e for m, e in zip(mine["runs_s"], alone["runs_s"], strict=True))
        out.append(
            f"monitor drift: mlpipe {_duration(mine['p50_us'])} vs Evidently alone "
            f"{_duration(alone['p50_us'])} (medians): {mine['p50_us'] / alone['p50_us']:.2f} ×, "
            f"fastest runs {mine['min_us'] / alone['min_us']:.2f} ×, each pair "
            f"{', '.join(f'{x:.2f}' for x in paired)} (target ≤ 1.5)"
        )
    for prefix, limit_s in (("mlpipe --help", 0.5), ("mlpipe status", None)):
        r = get(prefix)
        if r:
            goal = f" (target < {limit_s} s)" if limit_s else ""
            out.append(f"{prefix}: {_duration(r['p50_us'])}{goal}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
