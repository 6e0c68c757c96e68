"""The offline path of ``bench.components``: ``warehouse sync`` rows/s and ``monitor drift``.

Both run in a temporary home of their own (never the serving bench home):
prediction-log rows are written as real segment files with
:class:`mlpipe.predlog.SegmentWriter`, then ``mlpipe.warehouse.sync`` loads
them into a fresh DuckDB warehouse. Half the rows are a reference hour, half
the hour after it; ``monitor drift`` compares the two, next to the same
Evidently call (``_drift._run_evidently``: ``DataDriftPreset`` with mlpipe's
drift share, ``include_tests=True``) on the same two frames held in pandas.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

FEATURES = [f"f{i:02d}" for i in range(20)]
SHIFTED = FEATURES[:5]  # the current hour moves these, so the report has drift to find
MODEL = "bench-drift"
HOUR = timedelta(hours=1)


def frames(rows: int, seed: int = 11) -> tuple[Any, Any]:
    """(reference, current): ``rows`` × 20 float features plus ``prediction`` (0/1) each."""
    import pandas as pd

    rng = np.random.default_rng(seed)

    def one(shift: float) -> pd.DataFrame:
        x = rng.normal(0.0, 1.0, (rows, len(FEATURES)))
        x[:, : len(SHIFTED)] += shift
        frame = pd.DataFrame(x, columns=FEATURES)
        frame["prediction"] = (x[:, 0] + rng.normal(0, 1, rows) > 1.5).astype(float)
        return frame

    return one(0.0), one(0.3)


def write_segments(settings: Any, frame: Any, start: datetime, prefix: str) -> None:
    """Log ``frame``'s rows (spread over the hour after ``start``, naive UTC) as segment files."""
    from mlpipe.predlog import PredictionRecord, SegmentWriter

    n = len(frame)
    base = start.replace(tzinfo=UTC).timestamp()
    ts = base + np.sort(np.random.default_rng(3).uniform(0, HOUR.total_seconds() - 1, n))
    values = frame[FEATURES].to_numpy().tolist()
    labels = frame["prediction"].astype(int).tolist()
    sink = SegmentWriter(settings.predlog_path, f"bench-{prefix}", fsync_interval_s=1.0)
    try:
        for lo in range(0, n, 10_000):
            sink.append(
                [
                    PredictionRecord(
                        request_id=f"{prefix}-{i}",
                        ts=float(ts[i]),
                        tenant="default",
                        model=MODEL,
                        version="1",
                        arm="champion",
                        generation=1,
                        entity_key=f"customer_id={i % 5000}",
                        entity={"customer_id": i % 5000},
                        features=dict(zip(FEATURES, values[i], strict=True)),
                        score=0.9 if labels[i] else 0.1,
                        label=labels[i],
                        latency_ms=2.5,
                    )
                    for i in range(lo, min(lo + 10_000, n))
                ]
            )
    finally:
        sink.close()  # closed segments (.jsonl): the loader's bulk path


def run_evidently(cur: Any, ref: Any, drift_share: float) -> Any:
    """The Evidently call mlpipe makes (``_drift._run_evidently``), on two pandas frames."""
    import warnings

    from evidently import DataDefinition, Dataset, Report
    from evidently.presets import DataDriftPreset

    cols = list(cur.columns)
    definition = DataDefinition(numerical_columns=cols, categorical_columns=[])
    report = Report([DataDriftPreset(columns=cols, drift_share=drift_share)], include_tests=True)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return report.run(
            Dataset.from_pandas(cur, data_definition=definition),
            Dataset.from_pandas(ref, data_definition=definition),
        )


def measure(sync_rows: int, drift_rows: int, repeats: int = 2) -> list[dict[str, Any]]:
    """Component rows: sync (fresh warehouse each repeat), then drift vs Evidently, interleaved.

    ``sync_rows`` rows are logged (half reference hour, half current hour);
    drift compares ``drift_rows`` rows a side, sampled in the warehouse when
    fewer than what was logged, ``drift_rows`` of them in the Evidently run too.
    """
    from mlpipe import monitoring, warehouse
    from mlpipe.config import load_settings

    out: list[dict[str, Any]] = []
    half = max(sync_rows, 2 * drift_rows) // 2
    ref, cur = frames(half)
    end = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    with tempfile.TemporaryDirectory(prefix="mlpipe-bench-") as tmp:
        settings = load_settings(home=Path(tmp))
        write_segments(settings, ref, end - 2 * HOUR, "ref")
        write_segments(settings, cur, end - HOUR, "cur")
        logged = 2 * half
        db = settings.state_path / "warehouse.duckdb"
        # warm-up, untimed: imports (duckdb, pyarrow, evidently) and first-call costs
        warehouse.sync(load_settings(home=Path(tmp) / "empty"))
        run_evidently(cur.iloc[:1000], ref.iloc[:1000], 0.5)
        secs = []
        for _ in range(repeats):
            db.unlink(missing_ok=True)
            db.with_name(db.name + ".wal").unlink(missing_ok=True)
            t0 = time.perf_counter()
            result = warehouse.sync(settings)
            secs.append(time.perf_counter() - t0)
            if result.rows_loaded != logged:
                raise RuntimeError(f"sync loaded {result.rows_loaded} of {logged} rows")
        out.append(_seconds_row(f"warehouse sync ({logged:,} rows, new)", secs, logged))
        t0 = time.perf_counter()
        again = warehouse.sync(settings)
        out.append(
            _seconds_row(
                f"warehouse sync (nothing new, {again.segments_unchanged} segments)",
                [time.perf_counter() - t0],
            )
        )

        share = settings.monitor.drift_share_threshold
        tuned = settings.model_copy(
            update={
                "monitor": settings.monitor.model_copy(update={"drift_sample_rows": drift_rows})
            }
        )
        ref_n, cur_n = ref.iloc[:drift_rows], cur.iloc[:drift_rows]
        evid, html, mine, reads = [], [], [], []
        verdict = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            for start in (end - 2 * HOUR, end - HOUR):  # what drift reads before Evidently runs
                warehouse.prediction_window(
                    tuned, MODEL, start, start + HOUR, sample_rows=drift_rows, seed=7
                )
            reads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            snapshot = run_evidently(cur_n, ref_n, share)
            evid.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            snapshot.save_html(str(Path(tmp) / "alone.html"))
            snapshot.save_json(str(Path(tmp) / "alone.json"))
            html.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            verdict = monitoring.drift(
                tuned, MODEL, window="1h", reference="window:1h", end=end, sync_first=False
            )
            mine.append(time.perf_counter() - t0)
        assert verdict is not None
        arm = verdict.arms[0]
        if arm.rows_tested != drift_rows or arm.reference_rows != drift_rows:
            raise RuntimeError(
                f"mlpipe drift tested {arm.rows_tested} vs {arm.reference_rows} rows, "
                f"not {drift_rows} a side"
            )
        size = f"{drift_rows // 1000}k rows × 20 features + prediction"
        out.append(_seconds_row(f"Evidently alone: report.run ({size})", evid))
        out.append(_seconds_row("Evidently alone: save_html + save_json", html))
        out.append(_seconds_row("mlpipe drift's warehouse reads (both windows)", reads))
        out.append(
            _seconds_row(
                f"mlpipe monitor drift ({size}; verdict {verdict.verdict}, "
                f"{len(arm.drifted_features)} drifted)",
                mine,
            )
        )
    return out


def _rate(value: float) -> float:
    return round(value) if value >= 100 else round(value, 2)


def _seconds_row(name: str, secs: list[float], rows: int | None = None) -> dict[str, Any]:
    med = statistics.median(secs)
    return {
        "component": name,
        "calls": len(secs),
        "p50_us": round(med * 1e6, 1),
        "p99_us": round(max(secs) * 1e6, 1),
        "min_us": round(min(secs) * 1e6, 1),
        "runs_s": [round(x, 3) for x in secs],
        "rows_per_s" if rows else "calls_per_s": _rate((rows or 1) / med) if med > 0 else None,
    }
