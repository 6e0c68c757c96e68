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
columns against a 100k-row reference per window size (seconds, peak memory),
and ``monitoring.drift`` (what ``monitor drift`` runs, on a logged window in
DuckDB) against Evidently's DataDriftPreset alone on the same window.

    .venv/bin/python -m bench.drift_calibration --windows 200
    .venv/bin/python -m bench.drift_calibration --skip rates   # cost and overhead only
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from mlpipe import monitoring as cal
from mlpipe.config import Settings
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
        kind: Literal["numerical", "categorical"] = "numerical" if col in NUMERIC else "categorical"
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
    return out


def calibration_cost(sizes: list[int]) -> dict:
    """Null fits of 20 numeric columns per window size, against a 100k-row reference.

    One size bucket per size (what a report of that size computes once per
    version and caches); ``peak_rss_mb`` is the process's peak so far.
    """
    rng = np.random.default_rng(3)
    ref = pd.DataFrame({f"x{i}": rng.lognormal(0, 1, 100_000) for i in range(20)})
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = cal.NullCache(Path(tmp), "bench", "1", ref)
        for n in sizes:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            start = time.perf_counter()
            for col in ref.columns:
                cache.fit(col, "numerical", ref[col].to_numpy(), cal.size_bucket(n))
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            out[str(n)] = {
                "seconds": round(time.perf_counter() - start, 2),
                "peak_rss_mb": round(peak / 1024, 1),
                "rss_growth_mb": round((peak - before) / 1024, 1),
            }
            print("calibration", n, json.dumps(out[str(n)]), flush=True)
    return out


def _log_window(settings: Settings, frame: pd.DataFrame, scores: np.ndarray) -> None:
    """``frame``'s rows as one prediction-log segment of model ``bench`` (champion arm)."""
    from mlpipe.predlog import ENCODER, PredictionRecord

    now = time.time() - 60
    values = frame[FEATURES].to_dict("records")
    records = [
        PredictionRecord(
            request_id=f"r{i}", ts=now - i * 0.001, tenant="t", model="bench", version="1",
            arm="champion", generation=1, entity_key=f"customer={int(frame['customer'].iloc[i])}",
            entity={"customer": int(frame["customer"].iloc[i])}, features=values[i],
            score=float(scores[i]), label=int(scores[i] >= 0.5), latency_ms=1.0,
        )
        for i in range(len(frame))
    ]  # fmt: skip
    settings.predlog_path.mkdir(parents=True, exist_ok=True)
    (settings.predlog_path / "bench.jsonl").write_bytes(
        b"".join(ENCODER.encode(r) + b"\n" for r in records)
    )


def _score(frame: pd.DataFrame) -> np.ndarray:
    return np.asarray(1 / (1 + np.exp(4.0 - np.log(frame["amount"]))), dtype=float)


def _clock() -> np.ndarray:
    """(wall, CPU) seconds: CPU time is the steadier figure on a shared machine."""
    return np.array([time.perf_counter(), time.process_time()])


def _evidently_alone(ref: pd.DataFrame, cur: pd.DataFrame, out: Path) -> np.ndarray:
    """Evidently's DataDriftPreset with its defaults on the same columns, saved as HTML + JSON."""
    from evidently import DataDefinition, Dataset, Report
    from evidently.presets import DataDriftPreset

    num, cat = [*NUMERIC, "prediction"], ["country_risk"]
    definition = DataDefinition(numerical_columns=num, categorical_columns=cat)
    start = _clock()
    snapshot = Report([DataDriftPreset()], include_tests=True).run(
        Dataset.from_pandas(cur[num + cat], data_definition=definition),
        Dataset.from_pandas(ref[num + cat], data_definition=definition),
    )
    snapshot.save_html(str(out / "alone.html"))
    snapshot.save_json(str(out / "alone.json"))
    return _clock() - start


def _time_drift(settings: Settings, reference: pd.DataFrame) -> np.ndarray:
    from mlpipe import monitoring

    start = _clock()
    monitoring.drift(settings, "bench", "1h", reference_frame=reference, sync_first=False)
    return _clock() - start


def drift_overhead(sizes: list[int], repeats: int = 5) -> dict:
    """``monitoring.drift`` (what ``monitor drift`` runs) vs Evidently alone, same window.

    The window is logged traffic (a prediction-log segment, synced into DuckDB
    once before timing); the reference is a 5,000-row frame with scores.
    Evidently runs once untimed first (imports, set-up), so ``cold`` is the
    first ``drift`` call's extra work, fitting the null distributions; the
    medians are over ``repeats`` warm calls, as a scheduled report runs.
    """
    from mlpipe import warehouse
    from mlpipe.config import load_settings

    rng = np.random.default_rng(11)
    ref = requests(5000, rng)
    ref["prediction"] = _score(ref)
    given = ref.drop(columns="customer").rename(columns={"prediction": "score"})
    given["label"] = (given["score"] >= 0.5).astype(int)
    out: dict = {}
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            settings = load_settings(home=Path(tmp))
            cur = requests(n, rng)
            cur["prediction"] = _score(cur)
            _log_window(settings, cur, cur["prediction"].to_numpy())
            warehouse.sync(settings)
            _evidently_alone(ref, cur, Path(tmp))  # imports and first-run set-up: not timed
            cold = _time_drift(settings, given)
            warm = np.median([_time_drift(settings, given) for _ in range(repeats)], axis=0)
            alone = np.median(
                [_evidently_alone(ref, cur, Path(tmp)) for _ in range(repeats)], axis=0
            )
        out[str(n)] = {
            "monitor_drift_cold_s": round(float(cold[0]), 2),
            "monitor_drift_s": round(float(warm[0]), 2),
            "evidently_alone_s": round(float(alone[0]), 2),
            "ratio": round(float(warm[0] / alone[0]), 2),
            "monitor_drift_cpu_s": round(float(warm[1]), 2),
            "evidently_alone_cpu_s": round(float(alone[1]), 2),
            "cpu_ratio": round(float(warm[1] / alone[1]), 2),
        }
        print("overhead", n, json.dumps(out[str(n)]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--sizes", default="100,300,1000,10000")
    parser.add_argument("--skip", default="", help="comma-separated: rates,cost,overhead")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per overhead size")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    result: dict = {}
    if "rates" not in skip:
        result.update(run(args.windows, sizes))
    if "cost" not in skip:
        result["calibration_cost_100k_x_20"] = calibration_cost(sizes)
    if "overhead" not in skip:
        result["monitor_drift_vs_evidently"] = drift_overhead(sizes, args.repeats)
    text = json.dumps(result, indent=2, default=float)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
