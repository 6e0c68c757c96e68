"""False-alarm rate and power of calibrated drift thresholds, beside Evidently's defaults.

Synthetic traffic with entity structure: customers with static profile columns
and per-request columns (see tests/unit/monitoring/test_drift_verdicts.py).
For each window size: ``--windows`` clean windows of the whole population and
as many sticky 20 % arms (a fixed subset of customers) -> share of *reports*
with any alarm (mlpipe: significant and >= the effect size; Evidently's
default for a reference over 1,000 rows: any column at distance >= 0.1), then
windows with ``amount`` shifted by 0.2 / 0.5 / 1 sd -> share that alarm on
``amount``. The statistics are Evidently's (normed Wasserstein, Jensen-Shannon;
``_calibration.distance`` is checked against Evidently by the unit tests), so
the loop needs no Evidently run per window. Last: the cost of calibrating 20
columns against a 100k-row reference (seconds, peak memory).

    .venv/bin/python -m bench.drift_calibration --windows 200
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from mlpipe import monitoring as cal
from mlpipe.monitoring import screen

CUSTOMERS = 2000
NUMERIC = ["account_age_days", "amount", "hour"]
FEATURES = [*NUMERIC, "country_risk"]


def population(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "customer": np.arange(CUSTOMERS),
            "account_age_days": rng.gamma(2.0, 300.0, CUSTOMERS).round(),
            "country_risk": rng.choice(["low", "mid", "high"], CUSTOMERS, p=[0.7, 0.2, 0.1]),
        }
    )


POP = population()
WEIGHTS = np.random.default_rng(1).gamma(0.7, 1.0, CUSTOMERS)


def requests(n: int, rng: np.random.Generator, pool: np.ndarray | None = None) -> pd.DataFrame:
    pool = np.arange(CUSTOMERS) if pool is None else pool
    w = WEIGHTS[pool]
    frame = POP.iloc[rng.choice(pool, n, p=w / w.sum())].reset_index(drop=True)
    frame["amount"] = rng.lognormal(3.5, 1.0, n)
    frame["hour"] = rng.integers(0, 24, n).astype(float)
    return frame


def judge(ref: pd.DataFrame, win: pd.DataFrame, cache: cal.NullCache) -> tuple[set, set]:
    """(columns mlpipe alarms on, columns Evidently's default 0.1 threshold flags)."""
    screened = screen(ref[FEATURES], win[FEATURES], FEATURES, 30)
    entities = "c" + win["customer"].astype(str)
    plan = cal.calibrate(screened, entities, cache, cal.FALSE_ALARM_RATE)
    ours, theirs = set(), set()
    for col in FEATURES:
        kind = "numerical" if col in NUMERIC else "categorical"
        d = cal.drift_distance(kind, ref[col].to_numpy(), win[col].to_numpy())
        if d >= 0.1:
            theirs.add(col)
        thr = plan.thresholds.get(col)
        if thr is not None and d > thr and d >= cal.MIN_EFFECT:
            ours.add(col)
    return ours, theirs


def run(windows: int, sizes: list[int]) -> dict:
    rng = np.random.default_rng(7)
    ref = requests(5000, rng)
    sd = float(ref["amount"].std())
    out: dict = {"windows_per_size": windows, "sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        cache = cal.NullCache(Path(tmp), "bench", "1", ref[FEATURES])
        sticky = np.arange(0, CUSTOMERS, 5)
        for n in sizes:
            row: dict = {}
            for name, pool in (("clean", None), ("sticky_20pct", sticky)):
                alarms = [judge(ref, requests(n, rng, pool), cache) for _ in range(windows)]
                row[f"false_alarm_{name}"] = np.mean([bool(a) for a, _ in alarms])
                row[f"evidently_default_false_alarm_{name}"] = np.mean([bool(b) for _, b in alarms])
            for shift in (0.2, 0.5, 1.0):
                hits = []
                for _ in range(windows // 2):
                    win = requests(n, rng)
                    win["amount"] += shift * sd
                    hits.append(judge(ref, win, cache))
                row[f"power_{shift}sd"] = np.mean(["amount" in a for a, _ in hits])
                row[f"evidently_default_power_{shift}sd"] = np.mean(
                    ["amount" in b for _, b in hits]
                )
            out["sizes"][str(n)] = row
            print(n, json.dumps(row), flush=True)
    out["calibration_cost_100k_x_20"] = calibration_cost()
    return out


def calibration_cost() -> dict:
    """Null fits of 20 numeric columns at one window size, against a 100k-row reference."""
    rng = np.random.default_rng(3)
    ref = pd.DataFrame({f"x{i}": rng.lognormal(0, 1, 100_000) for i in range(20)})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cache = cal.NullCache(Path(tmp), "bench", "1", ref)
        for col in ref.columns:
            cache.fit(col, "numerical", ref[col].to_numpy(), cal.size_bucket(1000))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak / 1024, 1),
        "rss_growth_mb": round((peak - before) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--sizes", default="100,300,1000,10000")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = run(args.windows, [int(s) for s in args.sizes.split(",")])
    text = json.dumps(result, indent=2, default=float)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
