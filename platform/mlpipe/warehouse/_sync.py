"""Loading prediction-log segments into ``predictions``: idempotent, bulk, tolerant of torn tails.

Rows are keyed by (request_id, tenant, model, arm): a replayed or renamed
segment adds nothing, and a row that reuses a loaded key for another request
(another time) is counted in ``SyncResult.reused_ids``, never dropped unsaid.
Closed segments go in a chunk at a time (:mod:`._segments`), each chunk
in its own transaction, never row by row. On DuckDB one statement reads a chunk
with DuckDB's JSON reader and inserts it (:func:`_load_whole`); a chunk that
statement refuses (a line that is not a record) or whose rows repeat a key is
read again into Arrow, line by line where it must, so the bad lines are named
(:func:`read_chunk`). A record the warehouse cannot store (a NUL byte in a text
field, a number outside its column) is skipped like a line that is not a
record, and the skipped lines of a closed segment are kept in ``quarantine``:
one bad row never holds back the rows after it. A sync also mirrors the
deployment history it is handed (:mod:`._mirror`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mlpipe.warehouse import _engine, _lifecycle, _mirror, _partitions, _schema
from mlpipe.warehouse._kafka import PartitionLag, load_topic
from mlpipe.warehouse._segments import (
    COLUMNS,
    Batch,
    NotWhole,
    Segment,
    SkippedLine,
    chunks,
    read_chunk,
    read_open_segment,
    record_lines,
    segment_files,
    segment_size,
    segments_sql,
)

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    from sqlalchemy import Connection

    from mlpipe.config import Settings


@dataclass
class SyncResult:
    """What one sync did. ``rows_total`` is the table's row count after the sync."""

    segments_read: int = 0
    segments_unchanged: int = 0
    rows_read: int = 0
    rows_loaded: int = 0
    rows_total: int = 0
    deployments_loaded: int = 0  # control-plane history rows newly mirrored
    skipped: list[SkippedLine] = field(default_factory=list)
    quarantined: int = 0  # skipped lines of closed segments written to ``quarantine``
    kafka_records: int = 0  # records read from the Kafka topic (predlog.sink = "kafka")
    kafka_lag: list[PartitionLag] = field(default_factory=list)  # per partition, after the sync
    # rows not loaded because their key was taken by another request (another ``ts``): the
    # first row loaded keeps the key. Part of ``duplicates``, which also counts replays.
    reused_ids: int = 0
    # closed segments loaded whole, deleted or archived (predlog.keep_loaded_hours), and bytes
    segments_released: int = 0
    bytes_released: int = 0
    rows_pruned: int = 0  # past their retention (warehouse_retention_days, per tenant)
    seconds: float = 0.0

    @property
    def duplicates(self) -> int:
        return self.rows_read - self.rows_loaded

    @property
    def skipped_counts(self) -> dict[str, int]:
        """Lines skipped by kind (half-written, not a record, cannot be stored)."""
        return dict(Counter(s.kind for s in self.skipped))


# The row's key (request_id, tenant, model, arm) is in the table: the anti-join that keeps it out.
_SAME_KEY = (
    "p.request_id = i.request_id AND p.tenant = i.tenant AND p.model = i.model AND p.arm = i.arm"
)
_KNOWN = f"SELECT 1 FROM predictions p WHERE {_SAME_KEY}"
_KEY_COLUMNS = "request_id, tenant, model, arm"
_KEY = f"({_KEY_COLUMNS})"
# A row whose key the table holds for a request logged at another time (more than 1 ms
# apart: a replayed row read by the other loader may differ by a microsecond of rounding).
_REUSED_US = 1000
_REUSED = (
    f"SELECT count(*) FROM {{source}} AS i WHERE EXISTS (SELECT 1 FROM predictions p "
    f"WHERE {_SAME_KEY} AND abs(epoch_us(p.ts) - epoch_us(i.ts)) > {_REUSED_US})"
)


def _insert_duckdb(conn: Connection, table: pa.Table) -> int:
    raw = _engine.duckdb_connection(conn)
    raw.register("_mlpipe_incoming", table)
    try:
        cols = ", ".join(COLUMNS)
        # A batch almost never repeats a key: count first, and pay for DISTINCT ON only if it does.
        unique = raw.execute(
            f"SELECT count(*) = count(DISTINCT {_KEY}) FROM _mlpipe_incoming"
        ).fetchone()
        source = (
            "_mlpipe_incoming"
            if unique and unique[0]
            else f"(SELECT DISTINCT ON {_KEY} * FROM _mlpipe_incoming)"
        )
        # Keep only keys the table lacks: one set-based insert, which returns its row count.
        inserted = raw.execute(
            f"""
            INSERT INTO predictions ({cols})
            SELECT {cols} FROM {source} AS i
            WHERE NOT EXISTS ({_KNOWN})
            """
        ).fetchall()  # all: a result left open refuses the next register() on this connection
    finally:
        raw.unregister("_mlpipe_incoming")
    return int(inserted[0][0]) if inserted else 0


def _insert_generic(conn: Connection, table: pa.Table) -> int:
    # Portable path: filter known keys, then executemany in chunks (PostgreSQL: COPY).
    if conn.dialect.name == "postgresql":
        return _insert_postgres(conn, table)
    rows: dict[tuple[str, ...], dict[str, object]] = {}
    for r in table.to_pylist():
        rows.setdefault(_key_of(r), r)  # the first row of a key, as on DuckDB
    for key, _ in _loaded_keys(conn, list(rows)):
        rows.pop(key, None)
    fresh = list(rows.values())
    for start in range(0, len(fresh), 5000):
        conn.execute(_schema.predictions.insert(), fresh[start : start + 5000])
    return len(fresh)


def _insert_postgres(conn: Connection, table: pa.Table) -> int:
    """COPY the rows (as CSV, written by Arrow) into a temporary table, create the day
    partitions they need, then store the rows whose key is new in one statement: ~20 ×
    executemany's rate (``bench.kafka``). Returns the rows inserted.

    ``predictions`` is partitioned by day, so its own key holds ``ts`` and cannot
    see a request id stored on another day: each row first claims its key in
    ``prediction_keys`` (``ON CONFLICT DO NOTHING``: a key already stored, or
    claimed by a loader running at the same time, is not), and only the rows
    whose key holds their own ``ts`` are stored. Of a key the batch repeats, the
    first row counts, as on DuckDB.
    """
    raw = _copy_to_temporary(
        conn,
        table,
        COLUMNS,
        "CREATE TEMPORARY TABLE _mlpipe_incoming (LIKE predictions INCLUDING DEFAULTS, "
        "_n BIGINT GENERATED ALWAYS AS IDENTITY) ON COMMIT DROP",
        "_mlpipe_incoming",
    )
    _partitions.ensure_days(conn, _partitions.days_of(conn, "_mlpipe_incoming"))
    with raw.cursor() as cur:
        cur.execute(_CLAIM)
        # Every key new (the usual batch): every row goes in, no lookup per row (~1.5 × as
        # fast as joining the keys claimed back to the rows).
        cur.execute(_INSERT_ALL if cur.rowcount == table.num_rows else _INSERT_CLAIMED)
        inserted = cur.rowcount
        cur.execute("DROP TABLE _mlpipe_incoming")
    return max(0, inserted)


# Each row's key claimed in ``prediction_keys`` where it lacks it: of a key the batch holds
# twice, the first row's (a temporary table is scanned in the order it was written, and
# ``ORDER BY _n`` says so).
_CLAIM = f"""
INSERT INTO prediction_keys ({_KEY_COLUMNS}, ts)
SELECT {_KEY_COLUMNS}, ts FROM _mlpipe_incoming ORDER BY _n ON CONFLICT DO NOTHING
"""
_ROWS = f"""
INSERT INTO predictions ({", ".join(COLUMNS)}) SELECT {", ".join(COLUMNS)} FROM _mlpipe_incoming
"""
# ``ON CONFLICT``: never an error for a row ``predictions`` holds already (its key gone
# missing: a drop of its day that did not get its lock deletes the day's keys first).
_INSERT_ALL = f"{_ROWS} ON CONFLICT DO NOTHING"
# When not every row claimed its key: the rows whose key holds their own ``ts`` (a row
# loaded before, a replay, conflicts and adds nothing; nor a repeat in the batch).
_INSERT_CLAIMED = f"""{_ROWS}
WHERE EXISTS (SELECT 1 FROM prediction_keys k WHERE k.request_id = _mlpipe_incoming.request_id
    AND k.tenant = _mlpipe_incoming.tenant AND k.model = _mlpipe_incoming.model
    AND k.arm = _mlpipe_incoming.arm AND k.ts = _mlpipe_incoming.ts)
ON CONFLICT DO NOTHING
"""


def _key_of(row: dict[str, object]) -> tuple[str, ...]:
    return tuple(str(row[c]) for c in _schema.PREDICTION_KEY)


def _loaded_keys(
    conn: Connection, keys: list[tuple[str, ...]]
) -> Iterator[tuple[tuple[str, ...], datetime]]:
    """The keys of ``keys`` that ``predictions`` holds, each with its row's ``ts``."""
    p = _schema.predictions
    key_columns = [p.c[c] for c in _schema.PREDICTION_KEY]
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        query = sa.select(*key_columns, p.c.ts).where(sa.tuple_(*key_columns).in_(chunk))
        for *key, ts in conn.execute(query):
            yield tuple(key), ts


def _reused_ids(conn: Connection, table: pa.Table) -> int:
    """How many rows of ``table``, just loaded, the table does not hold because another
    request (another ``ts``) holds their key: a client's request id used twice.

    Call it after the insert, and only when it inserted fewer rows than ``table``
    has (a replay, or a reused id): then every row's key is in the table.
    """
    if conn.dialect.name == "duckdb":
        raw = _engine.duckdb_connection(conn)
        raw.register("_mlpipe_reused", table)
        try:
            found = raw.execute(_REUSED.format(source="_mlpipe_reused")).fetchall()
        finally:
            raw.unregister("_mlpipe_reused")
        return int(found[0][0])
    if conn.dialect.name == "postgresql":
        return _reused_postgres(conn, table)
    incoming = [(_key_of(r), r["ts"]) for r in table.to_pylist()]
    held = dict(_loaded_keys(conn, list({key for key, _ in incoming})))
    return sum(
        1
        for key, ts in incoming
        if key in held and abs((held[key] - ts).total_seconds()) * 1e6 > _REUSED_US
    )


def _copy_to_temporary(
    conn: Connection, table: pa.Table, columns: Sequence[str], create: str, name: str
) -> Any:
    """Create the temporary table ``name`` (``create``) and COPY ``table``'s ``columns``
    into it as CSV written by Arrow; returns the driver's (psycopg) connection."""
    import io

    import pyarrow.csv as pacsv

    data = io.BytesIO()
    pacsv.write_csv(table.select(list(columns)), data, pacsv.WriteOptions(include_header=False))
    raw = conn.connection.driver_connection
    assert raw is not None, "the connection is closed"
    with raw.cursor() as cur:
        cur.execute(create)
        with cur.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN (FORMAT csv)") as copy:
            copy.write(data.getvalue())
    return raw


def _reused_postgres(conn: Connection, table: pa.Table) -> int:
    """:func:`_reused_ids` on PostgreSQL: the rows' keys COPYed into a temporary table and
    counted against ``prediction_keys`` in one statement (a replayed segment of 100k rows:
    ~28 s looked up a thousand keys at a time, under a second so)."""
    raw = _copy_to_temporary(
        conn,
        table,
        [*_schema.PREDICTION_KEY, "ts"],
        "CREATE TEMPORARY TABLE _mlpipe_reused ON COMMIT DROP AS "
        f"SELECT {_KEY_COLUMNS}, ts FROM prediction_keys WITH NO DATA",
        "_mlpipe_reused",
    )
    with raw.cursor() as cur:
        cur.execute(
            f"SELECT count(*) FROM _mlpipe_reused i JOIN prediction_keys p USING {_KEY} "
            f"WHERE abs(extract(epoch FROM p.ts - i.ts)) * 1e6 > {_REUSED_US}"
        )
        found = cur.fetchone()
        cur.execute("DROP TABLE _mlpipe_reused")
    return int(found[0]) if found else 0


def _keys_unique(raw: duckdb.DuckDBPyConnection, segments: list[str], now: datetime) -> bool:
    """Whether the rows this chunk just added hold each (request_id, tenant, model, arm) once.

    ``predictions`` has no key index on DuckDB (``_schema._drop_predictions_key``):
    the statement's anti-join keeps out keys already loaded, and this keeps out
    a key that two lines of the chunk share. ``loaded_at`` first, so DuckDB's
    zone maps skip the row groups of earlier syncs (~0.02 s for 200k rows).
    """
    same = raw.execute(
        """
        SELECT count(*) = count(DISTINCT (request_id, tenant, model, arm)) FROM predictions
        WHERE loaded_at = CAST($now AS TIMESTAMP) AND list_contains($segments, segment)
        """,
        {"now": now, "segments": segments},
    ).fetchone()
    return bool(same and same[0])


def _load_whole(
    conn: Connection, chunk: list[Segment], root: Path, now: datetime
) -> tuple[int, int, int, list[tuple[str, int, int, int]]]:
    """Load a chunk of closed segments with one DuckDB statement: (rows read, inserted,
    rows left out for a reused id, finished).

    DuckDB reads the files and inserts the rows the table lacks in one
    pipeline, on every core, without handing them to Python (1.2-1.3 × as fast
    as reading into Arrow first, paired; decision 015).
    Any row that is not a valid record stops the statement (``error()``), and
    a key repeated within the chunk fails :func:`_keys_unique`; the caller then
    rolls back and takes :func:`read_chunk`, which names each bad line and
    keeps one row a key.
    """
    lines = {rel: record_lines(path) for rel, path, _ in chunk}
    files = [path.as_posix() for _, path, _ in chunk]
    cols = ", ".join(COLUMNS)
    raw = _engine.duckdb_connection(conn)
    inserted = raw.execute(
        f"""
        INSERT INTO predictions ({cols})
        SELECT {cols} FROM ({segments_sql(root)}) AS i
        WHERE CASE WHEN ok THEN true ELSE error('not a prediction record: ' || segment) END
          AND NOT EXISTS ({_KNOWN})
        """,
        {"files": files, "now": now},
    ).fetchone()
    loaded = int(inserted[0]) if inserted else 0
    read = sum(lines.values())
    if loaded > read:  # cannot happen if the count above holds; never book a wrong count
        raise NotWhole(f"{loaded} rows inserted from {read} lines")
    if not _keys_unique(raw, [rel for rel, _, _ in chunk], now):
        raise NotWhole("a key twice in the chunk")
    reused = 0
    if loaded < read:  # a replay, or ids reused: read the chunk again to tell them apart
        source = f"({segments_sql(root)})"
        found = raw.execute(_REUSED.format(source=source), {"files": files, "now": now}).fetchall()
        reused = int(found[0][0])
    return read, loaded, reused, [(rel, size, lines[rel], 0) for rel, _, size in chunk]


def _book(
    conn: Connection,
    finished: list[tuple[str, int, int, int]],
    now: datetime,
    quarantine: Sequence[tuple[SkippedLine, bytes]] = (),
) -> int:
    """Record segments loaded whole, so that an unchanged one is not read again, and keep
    their skipped lines in ``quarantine`` (a segment read again replaces its own).
    Returns how many lines it quarantined."""
    seg, q = _schema.segments, _schema.quarantine
    for rel, size, n_rows, n_skipped in finished:
        conn.execute(seg.delete().where(seg.c.path == rel))
        conn.execute(q.delete().where(q.c.segment == rel))
        conn.execute(
            seg.insert().values(
                path=rel, size=size, rows=n_rows, skipped_lines=n_skipped, loaded_at=now
            )
        )
    rows = quarantine_rows(quarantine, now)
    if rows:
        conn.execute(q.insert(), rows)
    return len(rows)


_QUARANTINE_BYTES = 64 * 1024  # of a quarantined line, kept


def quarantine_rows(
    lines: Sequence[tuple[SkippedLine, bytes]], now: datetime
) -> list[dict[str, object]]:
    """``quarantine`` rows for skipped lines (or Kafka records) and their bytes."""
    return [
        {
            "segment": line.segment,
            "line": line.line,
            "kind": line.kind,
            "reason": line.reason,
            "record": _storable_text(raw),
            "loaded_at": now,
        }
        for line, raw in lines
    ]


def _storable_text(raw: bytes) -> str:
    """A line as text any warehouse stores: bytes that are not UTF-8 and NUL bytes escaped."""
    text = raw[:_QUARANTINE_BYTES].decode("utf-8", errors="backslashreplace")
    return text.replace("\x00", "\\x00")


def _load_batch(
    conn: Connection, batch: Batch, result: SyncResult, now: datetime, on_duckdb: bool
) -> None:
    insert = _insert_duckdb if on_duckdb else _insert_generic
    result.skipped.extend(batch.skipped)
    for table in batch.tables:
        result.rows_read += table.num_rows
        if table.num_rows:
            loaded = insert(conn, table)
            result.rows_loaded += loaded
            if loaded < table.num_rows:
                result.reused_ids += _reused_ids(conn, table)
    result.quarantined += _book(conn, batch.finished, now, batch.quarantine)


def _load_closed(
    conn: Connection,
    chunk: list[Segment],
    root: Path,
    result: SyncResult,
    now: datetime,
    on_duckdb: bool,
) -> None:
    """One chunk of closed segments in its own transaction: one statement, or row checks."""
    import duckdb

    if on_duckdb:
        try:
            with conn.begin():
                read, loaded, reused, finished = _load_whole(conn, chunk, root, now)
                _book(conn, finished, now)
            result.rows_read += read
            result.rows_loaded += loaded
            result.reused_ids += reused
            return
        except (duckdb.Error, NotWhole):
            pass  # rolled back: nothing of this chunk landed
    with conn.begin():
        _load_batch(conn, read_chunk(chunk, root, now), result, now, on_duckdb)


def _changed(
    root: Path, seen: dict[str, int], result: SyncResult
) -> tuple[list[Segment], list[Segment]]:
    """Segments not loaded whole at their current size: (closed ones, open ones).

    A segment gone since it was listed (an open one closed, so renamed) is left
    out: its closed successor is in this listing or the next sync's.
    """
    closed: list[Segment] = []
    open_: list[Segment] = []
    for path in segment_files(root):
        size = segment_size(path)
        if size is None:
            continue
        rel = path.relative_to(root).as_posix()
        if seen.get(rel) == size:
            result.segments_unchanged += 1
            continue
        result.segments_read += 1
        # a segment still open is read line by line by the contract decoder
        (closed if path.name.endswith(".jsonl") else open_).append((rel, path, size))
    return closed, open_


def sync(
    settings: Settings,
    notify: _engine.Notify | None = None,
    *,
    history: _mirror.HistorySource | None = None,
) -> SyncResult:
    """Load every prediction-log segment under ``settings.predlog_path`` into ``predictions``.

    With ``history`` (the control plane's, :func:`mlpipe.deployments.history_feed`)
    it also mirrors the deployment changes the warehouse lacks into
    ``deployments``. Idempotent: running it again (or replaying a segment) adds
    no rows. Closed segments already loaded whole are not re-read. Lines that
    are not whole records are skipped and listed in the result. Raises
    :class:`StoreUnavailable` when the warehouse stays locked past the lock
    timeout, and what ``history`` raises (the control plane unavailable).

    One write connection does it all, so the warehouse is opened once. Each
    chunk of closed segments commits on its own: an interrupted sync keeps the
    chunks it finished, and the next one skips them (rows are keyed, so a chunk
    loaded again adds nothing either).
    """
    import time

    started = time.perf_counter()
    root = settings.predlog_path
    result = SyncResult()
    now = datetime.now(UTC).replace(tzinfo=None)
    on_duckdb = _engine.is_duckdb(settings.warehouse)
    seg = _schema.segments
    with _engine.writer(settings, notify) as conn:
        with conn.begin():
            seen = {row.path: row.size for row in conn.execute(sa.select(seg.c.path, seg.c.size))}
            changes = []
            if history is not None:
                changes = _mirror.pending_rows(history, _mirror.mirrored_generations(conn))
        closed, open_ = _changed(root, seen, result)
        for chunk in chunks(closed):
            _load_closed(conn, chunk, root, result, now, on_duckdb)
        with conn.begin():
            for rel, path, _ in open_:
                data = read_open_segment(path)
                if data is None:  # closed since it was listed: loaded as a closed one
                    continue
                batch = Batch()
                batch.add_parsed(rel, data, now)
                _load_batch(conn, batch, result, now, on_duckdb)
            result.deployments_loaded = _mirror.insert_missing(conn, changes)
            result.rows_total = conn.execute(
                sa.select(sa.func.count()).select_from(_schema.predictions)
            ).scalar_one()
        _lifecycle.after_sync(conn, settings, now, result)
    if settings.predlog.sink == "kafka":
        load_topic(settings, result, notify)
        with _engine.read(settings, notify) as conn:
            result.rows_total = conn.execute(
                sa.select(sa.func.count()).select_from(_schema.predictions)
            ).scalar_one()
    result.seconds = time.perf_counter() - started
    return result
