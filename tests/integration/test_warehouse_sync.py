"""Warehouse on a real DuckDB file: idempotent sync, torn segments, outcomes, SQL, locks."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from mlpipe import warehouse
from mlpipe.config import load_settings
from mlpipe.errors import InvalidInput, NotFound, StoreUnavailable
from mlpipe.predlog import ENCODER, PredictionRecord
from mlpipe.warehouse import _schema, _segments, _sync

pytestmark = pytest.mark.integration


def _records(n: int, prefix: str = "r", arm: str = "champion", start: float | None = None):
    now = start or time.time() - 60
    return [
        PredictionRecord(
            request_id=f"{prefix}{i}",
            ts=now - i,
            tenant="t",
            model="fraud",
            version="1",
            arm=arm,
            generation=1,
            entity_key=f"customer_id={i}",
            entity={"customer_id": i},
            features={"amount": float(i), "age": None},
            score=0.5,
            label=i % 2,
            latency_ms=3.0,
        )
        for i in range(n)
    ]


def _write(path: Path, records, tail: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records) + tail)


@pytest.fixture
def settings(tmp_path):
    return load_settings(home=tmp_path)


def test_sync_twice_same_count_and_replayed_segment_adds_nothing(settings):
    _write(settings.predlog_path / "w1" / "seg-1.jsonl", _records(300))
    first = warehouse.sync(settings)
    assert (first.rows_loaded, first.rows_total) == (300, 300)
    again = warehouse.sync(settings)
    assert (again.rows_loaded, again.rows_total, again.segments_unchanged) == (0, 300, 1)
    # the same rows replayed in another worker's folder, and a shadow answer for one request
    _write(settings.predlog_path / "w2" / "replay.jsonl", _records(300))
    _write(settings.predlog_path / "w2" / "shadow.jsonl", _records(1, arm="shadow"))
    third = warehouse.sync(settings)
    assert (third.rows_loaded, third.rows_total) == (1, 301)


def test_truncated_and_open_segments(settings):
    good = _records(10, "a")
    torn = ENCODER.encode(_records(1, "torn")[0])[:40]
    _write(settings.predlog_path / "seg-1.jsonl", good, tail=torn)
    _write(settings.predlog_path / "seg-2.jsonl.open", _records(5, "b"), tail=torn)
    bad_middle = settings.predlog_path / "seg-3.jsonl"
    bad_middle.write_bytes(
        ENCODER.encode(_records(1, "c")[0]) + b"\n{not json}\n" + b'{"request_id": 5}\n'
    )
    result = warehouse.sync(settings)
    assert result.rows_total == 16
    reasons = {(s.segment, s.line): s.reason for s in result.skipped}
    assert reasons[("seg-1.jsonl", 11)].startswith("half-written last line")
    assert ("seg-2.jsonl.open", 6) in reasons
    assert {("seg-3.jsonl", 2), ("seg-3.jsonl", 3)} <= set(reasons)
    # the worker finishes the open segment: the rest of its rows arrive, nothing doubles
    (settings.predlog_path / "seg-2.jsonl.open").rename(settings.predlog_path / "seg-2.jsonl")
    _write(settings.predlog_path / "seg-2.jsonl", _records(7, "b"))
    assert warehouse.sync(settings).rows_total == 18


def test_query_is_read_only_and_errors_are_input_errors(settings):
    _write(settings.predlog_path / "s.jsonl", _records(20))
    warehouse.sync(settings)
    result = warehouse.query(settings, "SELECT arm, count(*) AS n FROM predictions GROUP BY arm")
    assert result.rows == [("champion", 20)]
    with pytest.raises(InvalidInput, match="query failed"):
        warehouse.query(settings, "DELETE FROM predictions")
    with pytest.raises(InvalidInput):
        warehouse.query(settings, "COPY predictions TO 'out.csv'")
    with pytest.raises(InvalidInput):
        warehouse.query(settings, "SELECT * FROM no_such_table")
    assert warehouse.query(settings, "SELECT count(*) FROM predictions").rows == [(20,)]
    assert warehouse.query(settings, "SELECT * FROM predictions", limit=5).truncated


def test_outcomes_by_request_id_and_by_entity(settings, tmp_path):
    start = time.time() - 60
    _write(settings.predlog_path / "s.jsonl", _records(50, start=start))
    warehouse.sync(settings)
    by_id = tmp_path / "labels.csv"
    by_id.write_text("request_id,label\n" + "".join(f"r{i},{i % 2}\n" for i in range(30)))
    first = warehouse.load_outcomes(settings, by_id)
    assert (first.inserted, first.replaced) == (30, 0)
    again = warehouse.load_outcomes(settings, by_id)  # loading twice changes nothing
    assert (again.inserted, again.replaced, again.unchanged) == (0, 0, 30)
    import pandas as pd

    late = pd.DataFrame(
        {
            "entity_key": ["customer_id=40", "customer_id=41"],
            # the event time of the label: a little after the prediction (label delay)
            "timestamp": pd.to_datetime([start - 40 + 5, start - 41 + 5], unit="s", utc=True),
            "label": [1, 0],
        }
    )
    late.to_parquet(tmp_path / "late.parquet")
    assert warehouse.load_outcomes(settings, tmp_path / "late.parquet").inserted == 2
    count = warehouse.query(settings, "SELECT count(*) FROM outcomes").rows[0][0]
    assert count == 32


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("request_id,label,extra\nr1,1,x\n", "unknown column"),
        ("request_id,label\nnope,1\n", "not in the warehouse"),
        ("request_id,label\nr0,1\nr1,\n", "label on data row 2 is missing"),
        ("request_id,label\nr1,inf\n", "'inf', not a finite number"),
        ("label\n1\n", "request_id"),
        ("entity_key,timestamp,label\ncustomer_id=999,2020-01-01,1\n", "match no prediction"),
    ],
)
def test_bad_outcomes_change_nothing(settings, tmp_path, content, match):
    _write(settings.predlog_path / "s.jsonl", _records(5))
    warehouse.sync(settings)
    path = tmp_path / "o.csv"
    path.write_text(content)
    with pytest.raises(InvalidInput, match=match):
        warehouse.load_outcomes(settings, path)
    assert warehouse.query(settings, "SELECT count(*) FROM outcomes").rows == [(0,)]
    with pytest.raises(NotFound):
        warehouse.load_outcomes(settings, tmp_path / "missing.csv")


_HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def test_a_second_process_waits_for_the_lock_and_says_so(settings, monkeypatch):
    _write(settings.predlog_path / "s.jsonl", _records(10))
    warehouse.sync(settings)
    _write(settings.predlog_path / "t.jsonl", _records(10, "x"))
    db = settings.warehouse.removeprefix("duckdb:///")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, db, "2"], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        said: list[str] = []
        result = warehouse.sync(settings, notify=said.append)
        assert result.rows_total == 20
        assert said and "waiting" in said[0]
    finally:
        holder.wait(timeout=30)
    # and a bounded wait: give up with a clear StoreUnavailable, not DuckDB's lock error
    monkeypatch.setattr(settings, "warehouse_lock_timeout_s", 0.5)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, db, "3"], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with pytest.raises(StoreUnavailable, match="locked by another process"):
            warehouse.query(settings, "SELECT 1")
    finally:
        holder.wait(timeout=30)


def test_segments_read_in_chunks_load_every_row_once(settings, monkeypatch):
    # Several chunks: each is read on the reader thread while the one before is inserted.
    monkeypatch.setattr(_segments, "CHUNK_BYTES", 4096)
    for k in range(4):
        _write(settings.predlog_path / f"seg-{k}.jsonl", _records(50, f"k{k}-"))
    bad = settings.predlog_path / "seg-4.jsonl"
    bad.write_bytes(ENCODER.encode(_records(1, "z")[0]) + b"\n{not json}\n")
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.rows_total) == (201, 201)
    assert [(s.segment, s.line) for s in result.skipped] == [("seg-4.jsonl", 2)]
    again = warehouse.sync(settings)
    assert (again.rows_loaded, again.segments_unchanged) == (0, 5)


def test_a_warehouse_from_migration_2_keeps_its_rows_uncompressed_and_unindexed(settings):
    import duckdb

    _write(settings.predlog_path / "seg-1.jsonl", _records(30))
    warehouse.sync(settings)
    before = warehouse.query(settings, "SELECT * FROM predictions ORDER BY request_id").rows
    path = settings.state_path / "warehouse.duckdb"
    with duckdb.connect(str(path)) as con:  # put predictions back to what migration 1 created
        con.execute("CREATE TABLE old AS SELECT * FROM predictions")
        con.execute("DROP TABLE predictions")
        ddl = str(sa.schema.CreateTable(_schema.predictions).compile(dialect=sqlite.dialect()))
        assert "PRIMARY KEY (request_id, tenant, model, arm)" in ddl
        con.execute(ddl)
        con.execute("INSERT INTO predictions SELECT * FROM old")
        con.execute("DROP TABLE old")
        con.execute("DELETE FROM schema_migrations WHERE version >= 3")
    _write(settings.predlog_path / "seg-2.jsonl", _records(5, "n"))
    _write(settings.predlog_path / "replay.jsonl", _records(30))
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.rows_total) == (5, 35)
    after = warehouse.query(settings, "SELECT * FROM predictions ORDER BY request_id").rows
    assert [r for r in after if not r[0].startswith("n")] == before
    with duckdb.connect(str(path), read_only=True) as con:
        kinds = con.execute(
            "SELECT DISTINCT compression FROM pragma_storage_info('predictions') "
            "WHERE column_name = 'features' AND segment_type = 'VARCHAR'"
        ).fetchall()
        keys = con.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'predictions' "
            "AND constraint_type = 'PRIMARY KEY'"
        ).fetchone()
        versions = con.execute("SELECT max(version) FROM schema_migrations").fetchone()
    assert kinds == [("Uncompressed",)]
    assert keys == (0,)  # migration 4: the loader keeps the key (see the tests below)
    assert versions == (_schema.HEAD,)


def test_predictions_keeps_its_primary_key_outside_duckdb():
    from sqlalchemy.dialects import postgresql

    create = sa.schema.CreateTable(_schema.predictions)
    ddl = str(create.compile(dialect=postgresql.dialect()))
    assert "PRIMARY KEY (request_id, tenant, model, arm)" in ddl


def test_timed_out_requests_load_with_their_status(settings):
    import msgspec

    rows = _records(3, "t")
    rows[1] = msgspec.structs.replace(rows[1], status="timeout")
    _write(settings.predlog_path / "seg-1.jsonl", rows)
    assert warehouse.sync(settings).rows_loaded == 3
    found = warehouse.query(settings, "SELECT request_id, status FROM predictions ORDER BY 1")
    assert found.rows == [("t0", "ok"), ("t1", "timeout"), ("t2", "ok")]


def _no_row_checks(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a clean chunk went through the row-checking path")

    monkeypatch.setattr(_sync, "read_chunk", refuse)


def test_clean_segments_load_in_one_statement_with_exact_counts(settings, monkeypatch):
    _no_row_checks(monkeypatch)
    _write(settings.predlog_path / "w1" / "seg-1.jsonl", _records(40, "a"))
    b_rows = _records(25, "b")
    _write(settings.predlog_path / "w2" / "seg-1.jsonl", b_rows)
    _write(settings.predlog_path / "w2" / "empty.jsonl", [])
    first = warehouse.sync(settings)
    assert (first.rows_read, first.rows_loaded, first.rows_total) == (65, 65, 65)
    # a replay of loaded rows is still clean: read, not loaded
    _write(settings.predlog_path / "w3" / "replay.jsonl", _records(40, "a") + _records(2, "c"))
    again = warehouse.sync(settings)
    assert (again.rows_read, again.rows_loaded, again.duplicates) == (42, 2, 40)
    booked = warehouse.query(settings, "SELECT path, rows FROM segments ORDER BY path").rows
    assert booked == [
        ("w1/seg-1.jsonl", 40),
        ("w2/empty.jsonl", 0),
        ("w2/seg-1.jsonl", 25),
        ("w3/replay.jsonl", 42),
    ]
    stored = warehouse.query(
        settings, "SELECT request_id, ts, features, segment FROM predictions WHERE request_id='b3'"
    ).rows
    assert stored[0][0] == "b3" and stored[0][3] == "w2/seg-1.jsonl"
    assert stored[0][1].replace(tzinfo=UTC).timestamp() == pytest.approx(b_rows[3].ts, abs=1e-5)
    assert stored[0][2] == '{"amount":3.0,"age":null}'


def _with(**raw: str) -> bytes:
    """A whole record line with some fields replaced by raw JSON text."""
    import json

    record = json.loads(ENCODER.encode(_records(1, "bad")[0]))
    for key in raw:
        del record[key]
    fields = [json.dumps(record)[1:-1], *(f'"{k}": {v}' for k, v in raw.items())]
    return ("{" + ", ".join(fields) + "}\n").encode()


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"\n", "a blank line"),
        (b'{"request_id": "x1", "arm": "blue"}\n', "a row that is not a record"),
        (_with(features='"{not an object}"'), "features a JSON string"),
        (_with(entity="[1, 2]"), "entity a list"),
        (_with(probabilities='[0.5, "x"]'), "probabilities not numbers"),
    ],
)
def test_a_chunk_the_one_statement_refuses_loads_by_rows_and_nothing_doubles(
    settings, content, why
):
    good = b"".join(ENCODER.encode(r) + b"\n" for r in _records(30, "g"))
    (settings.predlog_path).mkdir(parents=True)
    (settings.predlog_path / "a.jsonl").write_bytes(good)
    (settings.predlog_path / "b.jsonl").write_bytes(
        ENCODER.encode(_records(1, "h")[0]) + b"\n" + content
    )
    result = warehouse.sync(settings)
    assert (result.rows_read, result.rows_loaded, result.rows_total) == (31, 31, 31), why
    skipped = [(s.segment, s.line) for s in result.skipped]
    assert skipped == ([] if content == b"\n" else [("b.jsonl", 2)]), why


def test_the_same_new_rows_in_two_segments_of_one_sync_load_once(settings):
    _write(settings.predlog_path / "w1" / "seg.jsonl", _records(20, "d"))
    _write(settings.predlog_path / "w2" / "seg.jsonl", _records(20, "d"))
    result = warehouse.sync(settings)
    assert (result.rows_read, result.rows_loaded, result.duplicates) == (40, 20, 20)
    assert warehouse.sync(settings).segments_unchanged == 2


def test_a_request_logged_twice_in_one_segment_loads_once(settings):
    rows = _records(20, "d")
    _write(settings.predlog_path / "seg.jsonl", [*rows, rows[7]])
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.rows_total) == (20, 20)
    twice = warehouse.query(
        settings,
        "SELECT count(*) FROM (SELECT request_id, arm FROM predictions "
        "GROUP BY ALL HAVING count(*) > 1)",
    ).rows
    assert twice == [(0,)]
    assert warehouse.sync(settings).segments_unchanged == 1


@pytest.mark.parametrize("scan", [3, 7, 1 << 20])  # line starts on, before and after a boundary
def test_record_lines_counts_line_starts_across_scan_chunks(tmp_path, monkeypatch, scan):
    monkeypatch.setattr(_segments, "_SCAN_BYTES", scan)
    path = tmp_path / "seg.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":22}\n{"c":3}')  # the last line has no newline
    assert _segments.record_lines(path) == 3
    path.write_bytes(b'{"a":1}\n{"b":22}\n')
    assert _segments.record_lines(path) == 2
    path.write_bytes(b"")
    assert _segments.record_lines(path) == 0
    for bad in (b'{"a":1}\n\n{"b":2}\n', b' {"a":1}\n', b'{"a":1}\n[1]\n'):
        path.write_bytes(bad)
        with pytest.raises(_segments.NotWhole, match="does not start a JSON object"):
            _segments.record_lines(path)


def test_sync_in_a_loop_while_a_server_rotates_segments_never_fails(settings):
    """An open segment renamed between listing and reading is left to the next sync."""
    import threading

    from mlpipe.predlog import SegmentWriter

    writer = SegmentWriter(settings.predlog_path / "w1", "w1", fsync_interval_s=0.2)
    stop, written = threading.Event(), []

    def serve() -> None:  # a worker appending and closing a segment every 20-120 ms
        batch = 0
        while not stop.is_set():
            records = _records(20, prefix=f"b{batch}-", start=time.time() - 60)
            writer.append(records)
            written.extend(r.request_id for r in records)
            batch += 1
            time.sleep(0.01 + 0.1 * (batch % 3 == 0))
            if batch % 2 == 0:
                writer.roll()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    syncs, deadline = 0, time.monotonic() + 8
    try:
        while time.monotonic() < deadline:
            warehouse.sync(settings)
            syncs += 1
    finally:
        stop.set()
        server.join(timeout=10)
        writer.close()
    final = warehouse.sync(settings)
    counted = warehouse.query(
        settings, "SELECT count(*), count(DISTINCT request_id) FROM predictions"
    )
    assert syncs > 10 and len(written) > 500 and len(set(written)) == len(written)
    assert final.rows_total == len(written) and counted.rows == [(len(written), len(written))]
