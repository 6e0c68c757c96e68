"""Rows the warehouse cannot store are quarantined, not let block later syncs (issue 23, item 3).

Before the fix, a NUL byte in a logged ``request_id`` made every ``warehouse
sync`` on PostgreSQL fail ("text fields cannot contain NUL", exit 3), and a
``generation`` outside the column's range failed every sync on both backends
(``OverflowError`` / ``ArrowInvalid``, exit 1): the chunk never loaded, nor did
anything after it. Each test runs on a DuckDB file and on a real PostgreSQL.
"""

from __future__ import annotations

import time

import msgspec
import pytest

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.predlog import PredictionRecord, SegmentWriter
from tests.conftest import run_cli
from tests.integration.prod_services import either_warehouse  # noqa: F401 - `settings`

pytestmark = pytest.mark.integration


def _record(request_id: str, **changes: object) -> PredictionRecord:
    record = PredictionRecord(
        request_id=request_id,
        ts=time.time() - 60,
        tenant="acme",
        model="fraud",
        version="1",
        arm="champion",
        generation=1,
        entity_key="customer_id=7",
        entity={"customer_id": 7},
        features={"amount": 1.0},
        score=0.5,
        label=1,
        latency_ms=2.0,
    )
    return msgspec.structs.replace(record, **changes)


def _log(settings: Settings, worker: str, records: list[PredictionRecord], close: bool) -> None:
    """Append ``records`` through the prediction-log writer; close the segment or leave it open."""
    writer = SegmentWriter(settings.predlog_path / worker, worker, fsync_interval_s=0)
    writer.append(records)
    if close:
        writer.close()
    else:
        writer.flush()
        writer._stop.set()  # the worker "dies": its segment stays .jsonl.open


def _bad_rows() -> list[PredictionRecord]:
    return [
        _record("g1"),
        _record("bad\x00id"),
        _record("g2", generation=2**63),  # outside int64, let alone the INTEGER column
        _record("g3", entity={"customer_id": 2**63}),  # a big entity value is JSON text: stored
        _record("g4", label=2**31),
    ]


def _count(settings: Settings, sql: str) -> int:
    return int(warehouse.query(settings, sql).rows[0][0])


def test_unstorable_rows_are_quarantined_and_the_rest_loads(settings: Settings) -> None:
    _log(settings, "w1", _bad_rows(), close=True)
    _log(settings, "w2", [_record(f"later{i}") for i in range(5)], close=True)
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.rows_total) == (7, 7)
    assert (result.skipped_counts, result.quarantined) == ({"cannot be stored": 3}, 3)
    reasons = sorted(s.reason for s in result.skipped)
    assert reasons == [
        "generation 9223372036854775808 is outside the warehouse's INTEGER range",
        "label 2147483648 is outside the warehouse's INTEGER range",
        "request_id holds a NUL byte",
    ]
    assert [s.line for s in result.skipped] == [2, 3, 5]
    quarantined = warehouse.query(
        settings, "SELECT line, kind, reason, record FROM quarantine ORDER BY line"
    ).rows
    assert [(line, kind) for line, kind, _, _ in quarantined] == [
        (2, "cannot be stored"),
        (3, "cannot be stored"),
        (5, "cannot be stored"),
    ]
    assert '"request_id":"bad\\u0000id"' in quarantined[0][3]  # the line as logged
    stored = warehouse.query(settings, "SELECT request_id FROM predictions ORDER BY 1").rows
    assert [r[0] for r in stored] == ["g1", "g3", *(f"later{i}" for i in range(5))]
    # a second sync is idempotent: nothing re-read, nothing added, the quarantine unchanged
    again = warehouse.sync(settings)
    assert (again.rows_loaded, again.rows_total, again.skipped) == (0, 7, [])
    assert again.segments_unchanged == 2
    assert _count(settings, "SELECT count(*) FROM quarantine") == 3


def test_a_line_of_raw_nul_and_non_utf8_bytes_is_quarantined_escaped(settings: Settings) -> None:
    _log(settings, "w1", [_record("g1")], close=True)
    (segment,) = (settings.predlog_path / "w1").iterdir()
    with segment.open("ab") as f:
        f.write(b'{"request_id": "a\x00b\xff"}\n')
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.skipped_counts, result.quarantined) == (
        1,
        {"not a record": 1},
        1,
    )
    rows = warehouse.query(settings, "SELECT line, kind, record FROM quarantine").rows
    assert rows == [(2, "not a record", '{"request_id": "a\\x00b\\xff"}')]


def test_an_unstorable_row_in_an_open_segment_is_reported_not_quarantined(
    settings: Settings,
) -> None:
    _log(settings, "w1", _bad_rows(), close=False)
    result = warehouse.sync(settings)
    assert result.rows_loaded == 2
    assert (result.skipped_counts, result.quarantined) == ({"cannot be stored": 3}, 0)
    # the worker may still append: the file is only quarantined once it is closed
    assert _count(settings, "SELECT count(*) FROM quarantine") == 0
    assert warehouse.sync(settings).rows_total == 2


@pytest.mark.parametrize(
    "settings", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_sync_cli_exits_0_and_counts_what_it_skipped(settings: Settings) -> None:
    _log(settings, "w1", _bad_rows(), close=True)
    env = {"MLPIPE_HOME": str(settings.home), "MLPIPE_WAREHOUSE_URL": settings.warehouse}
    done = run_cli("warehouse", "sync", env=env)
    assert done.returncode == 0, done.stderr
    assert "2 new" in done.stderr
    assert "skipped 3 line(s): 3 cannot be stored; 3 kept in the quarantine table\n" in done.stderr
    assert "w1/" in done.stderr and "request_id holds a NUL byte" in done.stderr
    again = run_cli("warehouse", "sync", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert '"rows_loaded": 0' in again.stdout and '"skipped_counts": {}' in again.stdout
