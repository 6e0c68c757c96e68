"""The bench's pure parts: percentiles, the result-row schema, the markdown table.

No timing is asserted anywhere: the bench is a benchmark, not a test.
"""

from __future__ import annotations

import json
import math

import pytest

from bench.ab import paired_table
from bench.run import parse, targets, variant_env
from bench.summary import (
    ROW_KEYS,
    Sample,
    best_closed,
    check_row,
    markdown_table,
    percentile,
    summarize,
)
from bench.workload import Cases, mlpipe_bodies


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 0) == 1.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_summarize_closed_row_follows_the_schema() -> None:
    sample = Sample(
        [0.001 * i for i in range(1, 101)], errors=3, elapsed_s=2.0, statuses={200: 100, 503: 3}
    )
    row = summarize("mlpipe", "closed", sample, concurrency=32)
    check_row(row)
    assert set(ROW_KEYS) <= set(row)
    assert row["rps"] == 50.0  # successful answers only
    assert row["requests"] == 103 and row["errors"] == 3
    assert row["p50_ms"] == 50.0 and row["p99_ms"] == 99.0 and row["max_ms"] == 100.0
    assert row["concurrency"] == 32 and row["rate"] is None
    assert row["statuses"] == {"200": 100, "503": 3}
    json.dumps(row)  # serializable as is


def test_summarize_open_row_and_no_successes() -> None:
    row = summarize("floor", "open", Sample([], errors=5, elapsed_s=1.0), rate=400)
    check_row(row)
    assert row["rate"] == 400.0 and row["concurrency"] is None
    assert row["p99_ms"] is None and row["rps"] == 0.0 and row["requests"] == 5


def test_summarize_refuses_rows_without_their_load() -> None:
    with pytest.raises(ValueError):
        summarize("mlpipe", "closed", Sample([], 0, 1.0))
    with pytest.raises(ValueError):
        summarize("mlpipe", "open", Sample([], 0, 1.0))
    with pytest.raises(ValueError):
        summarize("mlpipe", "sideways", Sample([], 0, 1.0), concurrency=1)


def test_check_row_names_what_is_wrong() -> None:
    row = summarize("bentoml", "closed", Sample([0.01], 0, 1.0), concurrency=8)
    del row["p95_ms"]
    with pytest.raises(ValueError, match="p95_ms"):
        check_row(row)


def test_table_and_best_closed() -> None:
    rows = [
        summarize("mlpipe", "closed", Sample([0.01] * 10, 0, 1.0), concurrency=8),
        summarize("mlpipe", "closed", Sample([0.02] * 30, 1, 1.0), concurrency=32),
        summarize(
            "mlpipe", "closed", Sample([0.02] * 90, 0, 1.0), concurrency=32, label="unbatched"
        ),
        summarize("mlpipe", "open", Sample([0.01] * 20, 0, 1.0), rate=24),
    ]
    table = markdown_table(rows)
    lines = table.strip().splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[3].startswith("| mlpipe | closed | 32 | 30 |")
    assert "mlpipe (unbatched)" in lines[4] and "24/s" in lines[5]
    assert best_closed(rows, "mlpipe") == 30.0  # labelled variants are not the system
    assert best_closed(rows, "mlflow") == 0.0


def test_request_stream_is_deterministic_and_never_repeats_a_vector() -> None:
    a, b = mlpipe_bodies(Cases()), mlpipe_bodies(Cases())
    assert a(17) == b(17)
    body = json.loads(a(17))
    assert body["model"] == "fraud" and set(body) == {"model", "entity", "features"}
    cases = Cases(size=4)
    seen = {cases.case(i) for i in range(40)}
    assert len(seen) == 40


def test_error_latencies_show_how_fast_shedding_answers() -> None:
    sample = Sample([0.05] * 10, errors=4, elapsed_s=1.0, error_latencies_s=[0.001] * 4)
    row = summarize("mlpipe", "open", sample, rate=14)
    check_row(row)
    assert row["error_p50_ms"] == 1.0 and row["error_p99_ms"] == 1.0
    assert "error_p99_ms" not in summarize("mlpipe", "open", Sample([0.01], 0, 1.0), rate=1)


def test_variant_env_names_a_section_and_defaults_to_serving() -> None:
    assert variant_env("log-off") == {"MLPIPE_PREDLOG__SINK": "none"}
    assert variant_env("workers=1") == {"MLPIPE_SERVING__WORKERS": "1"}
    assert variant_env("reliability.max_inflight=16+max_latency_ms=100") == {
        "MLPIPE_RELIABILITY__MAX_INFLIGHT": "16",
        "MLPIPE_SERVING__MAX_LATENCY_MS": "100",
    }
    for bad in ("unbatched", "nosuch.key=1", "workers=", "=3"):
        with pytest.raises(ValueError, match="unknown variant"):
            variant_env(bad)
    with pytest.raises(SystemExit):
        parse(["--variants", "log-off,nosuch.key=1"])
    assert parse(["--variants", "log-off,reliability.max_inflight=8"]).variants == [
        "log-off",
        "reliability.max_inflight=8",
    ]


def test_targets_report_the_log_cost_and_variant_shedding() -> None:
    rows = [
        summarize("mlpipe", "closed", Sample([0.010] * 95, 0, 1.0), concurrency=32),
        summarize(
            "mlpipe", "closed", Sample([0.009] * 100, 0, 1.0), concurrency=32, label="log-off"
        ),
        summarize(
            "mlpipe",
            "open",
            Sample([0.02] * 50, 3, 1.0, {200: 50, 503: 3}, [0.002] * 3),
            rate=53,
            label="reliability.max_inflight=16",
        ),
    ]
    lines = targets(rows)
    log = next(line for line in lines if "prediction log on / off" in line)
    assert "0.95" in log and "+5.0% throughput cost" in log and "+1.00 ms" in log
    shed = next(line for line in lines if "max_inflight=16" in line)
    assert "3 × 503, errors answered in p99 2.0 ms" in shed


def test_a_floor_point_under_its_own_other_points_is_flagged_not_read_alone() -> None:
    """The floor's c=32 figure is bimodal (decision 042): a low one read as mlpipe at twice
    its share of the floor."""

    def closed(system: str, concurrency: int, n: int) -> dict[str, object]:
        return summarize(system, "closed", Sample([0.001] * n, 0, 1.0), concurrency=concurrency)

    mlpipe = closed("mlpipe", 32, 8_700)
    low = [mlpipe, closed("floor", 8, 24_000), closed("floor", 32, 16_700)]
    low.append(closed("floor", 128, 31_800))
    line = next(x for x in targets(low) if "mlpipe / floor" in x)
    assert line.startswith("  mlpipe / floor at c=32: 0.52 (fraction of the floor); its c=32")
    assert "under 0.8 × its c=128 point (16700 against 31800 req/s)" in line
    usual = [mlpipe, closed("floor", 8, 24_000), closed("floor", 32, 28_000)]
    line = next(x for x in targets(usual) if "mlpipe / floor" in x)
    assert line == "  mlpipe / floor at c=32: 0.31 (fraction of the floor)"
    quick = [mlpipe, closed("floor", 32, 16_700)]  # one point: nothing to compare
    assert next(x for x in targets(quick) if "mlpipe / floor" in x).endswith("floor)")


def test_a_point_where_a_worker_idled_is_flagged_not_read_alone() -> None:
    """The floor's low mode is all 32 connections on one of its two workers (decision 045);
    quick runs measure c=32 only, so the check reads the workers' CPU, not other points."""

    def closed(system: str, n: int, cpu: list[int]) -> dict[str, object]:
        row = summarize(system, "closed", Sample([0.001] * n, 0, 1.0), concurrency=32)
        return {**row, "server_cpu_ms": cpu}

    mlpipe = closed("mlpipe", 9_500, [4070, 3920, 12])
    low = [mlpipe, closed("floor", 19_700, [4480, 0, 0])]
    line = next(x for x in targets(low, workers=2) if "mlpipe / floor" in x)
    assert line == (
        "  mlpipe / floor at c=32: 0.48 (fraction of the floor); only 1 of its 2 workers "
        "served its c=32 point (its processes' CPU ms: 4480, 0, 0): the figure moved, "
        "do not read this fraction alone"
    )
    uneven = [mlpipe, closed("floor", 26_000, [3930, 2430, 0])]  # uneven, but both served
    assert next(x for x in targets(uneven, workers=2) if "mlpipe / floor" in x).endswith("floor)")
    assert next(x for x in targets(low) if "mlpipe / floor" in x).endswith("floor)")  # unknown
    alone = [closed("mlpipe", 5_000, [4100, 90, 3]), closed("bentoml-tuned", 1_000, [900, 880])]
    lines = targets(alone, workers=2)
    assert "only 1 of its 2 workers served" in next(x for x in lines if x.startswith("mlpipe c="))
    assert next(x for x in lines if "bentoml-tuned" in x).endswith("(target ≥ 1.0)")


def test_ab_pairs_each_round_with_the_baseline_of_the_same_round() -> None:
    def closed(label: str, rnd: int, n: int, p99_s: float) -> dict[str, object]:
        row = summarize(
            "mlpipe", "closed", Sample([p99_s] * n, 0, 1.0), concurrency=32, label=label
        )
        return {**row, "round": rnd}

    # the machine slows down in round 1; the paired ratio stays 0.9 in both rounds
    rows = [
        closed("default", 0, 100, 0.010),
        closed("log-off", 0, 90, 0.011),
        closed("default", 1, 50, 0.020),
        closed("log-off", 1, 45, 0.022),
    ]
    table = paired_table(rows, ["default", "log-off"])
    line = next(x for x in table.splitlines() if x.startswith("| log-off"))
    assert "| c=32 | 2 |" in line and "0.900 (0.90–0.90)" in line and "+1.5" in line


def test_targets_name_what_else_took_the_cpu_during_an_open_loop_point() -> None:
    def point(rate: int, other_ms: int, steal_ms: int, top: str) -> dict[str, object]:
        row = summarize("mlpipe", "open", Sample([0.02] * 10, 0, 1.0), rate=rate)
        return {**row, "other_cpu_ms": other_ms, "steal_ms": steal_ms, "other_top": top}

    lines = targets([point(10, 260, 3, "beam.smp 250, kdamond.0 10"), point(11, 140, 20, "x 140")])
    noisy = next(line for line in lines if "open 10/s" in line)
    assert "other processes used 260 ms of CPU (beam.smp 250, kdamond.0 10), steal 3 ms" in noisy
    quiet = next(line for line in lines if "open 11/s" in line)
    assert "meanwhile" not in quiet
