"""Loading prediction-log segments into ``predictions``: idempotent, bulk, tolerant of torn tails.

Closed segments end in ``.jsonl``; the one a worker is writing ends in
``.jsonl.open``, and a killed worker leaves its ``.open`` file behind, so both
are read. Rows are keyed by (request_id, arm): a replayed or renamed segment
adds nothing. A line that does not decode as a :class:`PredictionRecord` (a
half-written last line, most often) is skipped and reported, never loaded.
Closed segments go in up to ``_CHUNK_BYTES`` at a time, each chunk in its own
transaction, never row by row. On DuckDB one statement reads a chunk with
DuckDB's JSON reader and inserts it (:func:`_load_whole`); a chunk that
statement refuses (a line that is not a record) or whose rows repeat a key is
read again into Arrow, line by line where it must, so the bad lines are named
(:func:`_read_chunk`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pyarrow.compute  # noqa: F401  (pa.compute below)
import sqlalchemy as sa

from mlpipe.predlog.record import DECODER, PredictionRecord
from mlpipe.warehouse import _engine, _mirror, _schema

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    from sqlalchemy import Connection

    from mlpipe.config import Settings

_LIST_DECODER = msgspec.json.Decoder(list[PredictionRecord])
_ENCODE = msgspec.json.encode


@dataclass(frozen=True)
class SkippedLine:
    """A line that was not loaded: which file, which line (1-based), and why."""

    segment: str
    line: int
    reason: str


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
    seconds: float = 0.0

    @property
    def duplicates(self) -> int:
        return self.rows_read - self.rows_loaded


@dataclass
class _Parsed:
    records: list[PredictionRecord]
    skipped: list[SkippedLine]


_CHUNK_BYTES = 256 * 1024 * 1024  # closed segments loaded in one statement and transaction


@dataclass
class _Batch:
    """Rows to insert, segments loaded whole (path, size, rows, skipped lines), lines skipped."""

    tables: list[pa.Table]
    finished: list[tuple[str, int, int, int]]
    skipped: list[SkippedLine]

    def add_parsed(self, rel: str, data: bytes, now: datetime) -> None:
        parsed = parse_segment(data, rel)
        self.skipped.extend(parsed.skipped)
        self.tables.append(_to_arrow(parsed.records, [rel] * len(parsed.records), now))
        if not rel.endswith(".open"):
            self.finished.append((rel, len(data), len(parsed.records), len(parsed.skipped)))


def _segment_files(root: Path) -> list[Path]:
    if not root.exists():
        return []
    files = [
        p for p in root.rglob("*") if p.is_file() and p.name.endswith((".jsonl", ".jsonl.open"))
    ]
    return sorted(files)


def parse_segment(data: bytes, name: str) -> _Parsed:
    """Decode one segment's bytes; skip (and report) every line that is not a whole record."""
    lines = data.split(b"\n")
    # Everything before the last newline is complete; what follows it is a tail that may be torn.
    complete, tail = lines[:-1], lines[-1]
    numbered = [(i + 1, line) for i, line in enumerate(complete) if line.strip()]
    skipped: list[SkippedLine] = []
    try:
        records = _LIST_DECODER.decode(b"[" + b",".join(line for _, line in numbered) + b"]")
    except msgspec.DecodeError:
        records = []
        for number, line in numbered:
            try:
                records.append(DECODER.decode(line))
            except msgspec.DecodeError as exc:
                skipped.append(SkippedLine(name, number, f"not a prediction record: {exc}"))
    if tail.strip():
        try:
            records.append(DECODER.decode(tail))
        except msgspec.DecodeError:
            skipped.append(SkippedLine(name, len(lines), "half-written last line (no newline)"))
    return _Parsed(records, skipped)


def _to_arrow(records: list[PredictionRecord], segment_of: list[str], now: datetime) -> pa.Table:
    import pyarrow as pa

    n = len(records)
    return pa.table(
        {
            "request_id": pa.array([r.request_id for r in records], pa.string()),
            "arm": pa.array([r.arm for r in records], pa.string()),
            "ts": pa.array([int(r.ts * 1_000_000) for r in records], pa.int64()).cast(
                pa.timestamp("us")
            ),
            "tenant": pa.array([r.tenant for r in records], pa.string()),
            "model": pa.array([r.model for r in records], pa.string()),
            "version": pa.array([r.version for r in records], pa.string()),
            "generation": pa.array([r.generation for r in records], pa.int32()),
            "entity_key": pa.array([r.entity_key for r in records], pa.string()),
            "entity": pa.array([_ENCODE(r.entity).decode() for r in records], pa.string()),
            "features": pa.array([_ENCODE(r.features).decode() for r in records], pa.string()),
            "score": pa.array([r.score for r in records], pa.float64()),
            "label": pa.array([r.label for r in records], pa.int32()),
            "latency_ms": pa.array([r.latency_ms for r in records], pa.float64()),
            "feature_cache_hit": pa.array([r.feature_cache_hit for r in records], pa.bool_()),
            "prediction_cache_hit": pa.array([r.prediction_cache_hit for r in records], pa.bool_()),
            "features_missing": pa.array(
                [_ENCODE(r.features_missing).decode() for r in records], pa.string()
            ),
            "status": pa.array([r.status for r in records], pa.string()),
            "segment": pa.array(segment_of, pa.string()),
            "loaded_at": pa.array([now] * n, pa.timestamp("us")),
        }
    )


_COLUMNS = [c.name for c in _schema.predictions.columns]


def _insert_duckdb(conn: Connection, table: pa.Table) -> int:
    raw = conn.connection.driver_connection
    raw.register("_mlpipe_incoming", table)
    try:
        cols = ", ".join(_COLUMNS)
        # A batch almost never repeats a key: count first, and pay for DISTINCT ON only if it does.
        unique = raw.execute(
            "SELECT count(*) = count(DISTINCT (request_id, arm)) FROM _mlpipe_incoming"
        ).fetchone()
        source = (
            "_mlpipe_incoming"
            if unique and unique[0]
            else "(SELECT DISTINCT ON (request_id, arm) * FROM _mlpipe_incoming)"
        )
        # Keep only keys the table lacks: one set-based insert, which returns its row count.
        inserted = raw.execute(
            f"""
            INSERT INTO predictions ({cols})
            SELECT {cols} FROM {source} AS i
            WHERE NOT EXISTS (
                SELECT 1 FROM predictions p WHERE p.request_id = i.request_id AND p.arm = i.arm
            )
            """
        ).fetchone()
    finally:
        raw.unregister("_mlpipe_incoming")
    return int(inserted[0]) if inserted else 0


def _insert_generic(conn: Connection, table: pa.Table) -> int:
    # Portable path (PostgreSQL): filter known keys, then executemany in chunks.
    rows = {(r["request_id"], r["arm"]): r for r in table.to_pylist()}
    p = _schema.predictions
    keys = list(rows)
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        existing = conn.execute(
            sa.select(p.c.request_id, p.c.arm).where(sa.tuple_(p.c.request_id, p.c.arm).in_(chunk))
        ).all()
        for key in existing:
            rows.pop(tuple(key), None)
    fresh = list(rows.values())
    for start in range(0, len(fresh), 5000):
        conn.execute(p.insert(), fresh[start : start + 5000])
    return len(fresh)


_JSON_COLUMNS = (
    "{request_id: 'VARCHAR', ts: 'DOUBLE', tenant: 'VARCHAR', model: 'VARCHAR', "
    "version: 'VARCHAR', arm: 'VARCHAR', generation: 'INTEGER', entity_key: 'VARCHAR', "
    "entity: 'JSON', features: 'JSON', score: 'DOUBLE', label: 'INTEGER', latency_ms: 'DOUBLE', "
    "feature_cache_hit: 'BOOLEAN', prediction_cache_hit: 'BOOLEAN', features_missing: 'JSON', "
    "status: 'VARCHAR'}"
)
_REQUIRED = (
    "request_id",
    "ts",
    "tenant",
    "model",
    "version",
    "arm",
    "generation",
    "entity_key",
    "entity",
    "features",
    "score",
    "label",
    "latency_ms",
)


def _segments_sql(root: Path) -> str:
    """Rows of the segments ``$files`` as ``predictions`` columns, plus ``ok``: a valid record.

    DuckDB's reader runs strict: a line that is not JSON, or holds a value of
    the wrong type, raises ``duckdb.Error``. A line that parses but misses a
    field or holds an impossible value is a row whose ``ok`` is false.
    """
    prefix = len(root.as_posix()) + 2  # 1-based substr after "<root>/"
    valid = " AND ".join(f"{c} IS NOT NULL" for c in _REQUIRED)
    # A JSON value's text starts with "{" exactly when it is an object (a string
    # starts with a quote): checked without parsing it again, as json_type would.
    return f"""
        SELECT request_id, arm, make_timestamp(CAST(ts * 1000000 AS BIGINT)) AS ts, tenant,
               model, version, generation, entity_key, CAST(entity AS VARCHAR) AS entity,
               CAST(features AS VARCHAR) AS features, score, label, latency_ms,
               coalesce(feature_cache_hit, false) AS feature_cache_hit,
               coalesce(prediction_cache_hit, false) AS prediction_cache_hit,
               coalesce(CAST(features_missing AS VARCHAR), '[]') AS features_missing,
               coalesce(status, 'ok') AS status,
               substr(filename, {prefix}) AS segment,
               CAST($now AS TIMESTAMP) AS loaded_at,
               coalesce({valid} AND arm IN ('champion', 'canary', 'shadow')
                 AND coalesce(status, 'ok') IN ('ok', 'error', 'timeout')
                 AND starts_with(CAST(features AS VARCHAR), '{{')
                 AND starts_with(CAST(entity AS VARCHAR), '{{'),
                 false) AS ok
        FROM read_json($files, format = 'newline_delimited', columns = {_JSON_COLUMNS},
                       filename = true)
    """


def _read_closed(
    paths: list[Path], root: Path, now: datetime
) -> tuple[pa.Table, dict[str, tuple[int, int]]]:
    """Read closed segments with DuckDB's JSON reader: the valid rows, and per file (lines, valid).

    A line DuckDB cannot read raises ``duckdb.Error`` and the caller reads the
    files with msgspec, which names the line; a file with a line that is not a
    valid row (see :func:`_segments_sql`) is re-read with msgspec too.
    """
    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    try:
        table = con.sql(
            _segments_sql(root), params={"files": [p.as_posix() for p in paths], "now": now}
        ).to_arrow_table()
    finally:
        con.close()
    per_file = table.group_by("segment").aggregate([("ok", "count"), ("ok", "sum")]).to_pylist()
    counts = {r["segment"]: (r["ok_count"], r["ok_sum"] or 0) for r in per_file}
    ok = table.column("ok")
    if not pa.compute.all(ok).as_py():
        table = table.filter(ok)
    return table.select(_COLUMNS), counts


# A changed segment: its path relative to the predlog root, its path, its size when listed.
_Segment = tuple[str, Path, int]


def _chunks(segments: list[_Segment]) -> list[list[_Segment]]:
    """Closed segments grouped into chunks of about ``_CHUNK_BYTES`` (a big one goes alone)."""
    chunks: list[list[_Segment]] = []
    total = _CHUNK_BYTES
    for segment in segments:
        if total >= _CHUNK_BYTES:
            chunks.append([])
            total = 0
        chunks[-1].append(segment)
        total += segment[2]
    return chunks


def _read_chunk(chunk: list[_Segment], root: Path, now: datetime) -> _Batch:
    """One chunk of closed segments: DuckDB's reader, msgspec for any segment it lost lines of."""
    import duckdb
    import pyarrow as pa

    batch = _Batch([], [], [])
    try:
        table, counts = _read_closed([path for _, path, _ in chunk], root, now)
    except duckdb.Error:  # a line DuckDB cannot read: msgspec reads the chunk and names it
        for rel, path, _ in chunk:
            batch.add_parsed(rel, path.read_bytes(), now)
        return batch
    lines = {rel: counts.get(rel, (0, 0)) for rel, _, _ in chunk}
    lost = {rel for rel, (n_lines, n_valid) in lines.items() if n_lines != n_valid}
    if lost:
        keep = pa.compute.invert(pa.compute.is_in(table.column("segment"), pa.array(sorted(lost))))
        table = table.filter(keep)
    batch.tables.append(table)
    batch.finished.extend(
        (rel, size, lines[rel][1], 0) for rel, _, size in chunk if rel not in lost
    )
    for rel, path, _ in chunk:
        if rel in lost:
            batch.add_parsed(rel, path.read_bytes(), now)
    return batch


class _NotWhole(Exception):
    """A chunk the one-statement load does not take: it goes through :func:`_read_chunk`."""


_SCAN_BYTES = 1 << 20  # a segment is scanned for line starts this much at a time


def _record_lines(path: Path) -> int:
    """How many records ``path`` holds if every line starts a JSON object; else :class:`_NotWhole`.

    Counted with numpy over a memory map, a megabyte at a time into one reused
    mask (~0.07 s for 160 MB; a mask of the whole file, allocated afresh, took
    0.10-0.36 s): DuckDB's reader skips blank lines and refuses a line with two
    documents, so once it has read a file whose every line starts with ``{``,
    it read one row a line.
    """
    import mmap

    import numpy as np

    size = path.stat().st_size
    if size == 0:
        return 0
    lines = 1  # the first line starts at 0
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        data = np.frombuffer(mm, np.uint8)
        mask = np.empty(_SCAN_BYTES, np.bool_)
        whole = bool(data[0] == ord("{"))
        for lo in range(0, size, _SCAN_BYTES):
            part = data[lo : lo + _SCAN_BYTES]
            newline = mask[: part.size]
            np.equal(part, ord("\n"), out=newline)
            starts = np.flatnonzero(newline) + (lo + 1)
            starts = starts[starts < size]
            whole = whole and bool((data[starts] == ord("{")).all())
            lines += int(starts.size)
        del data, part  # the memory map closes only once no array views it
    if not whole:
        raise _NotWhole(f"{path}: a line that does not start a JSON object")
    return lines


def _keys_unique(raw: duckdb.DuckDBPyConnection, segments: list[str], now: datetime) -> bool:
    """Whether the rows this chunk just added hold each (request_id, arm) once.

    ``predictions`` has no key index on DuckDB (``_schema._drop_predictions_key``):
    the statement's anti-join keeps out keys already loaded, and this keeps out
    a key that two lines of the chunk share. ``loaded_at`` first, so DuckDB's
    zone maps skip the row groups of earlier syncs (~0.02 s for 200k rows).
    """
    same = raw.execute(
        """
        SELECT count(*) = count(DISTINCT (request_id, arm)) FROM predictions
        WHERE loaded_at = CAST($now AS TIMESTAMP) AND list_contains($segments, segment)
        """,
        {"now": now, "segments": segments},
    ).fetchone()
    return bool(same and same[0])


def _load_whole(
    conn: Connection, chunk: list[_Segment], root: Path, now: datetime
) -> tuple[int, int, list[tuple[str, int, int, int]]]:
    """Load a chunk of closed segments with one DuckDB statement: (rows read, inserted, finished).

    DuckDB reads the files and inserts the rows the table lacks in one
    pipeline, on every core, without handing them to Python (1.2-1.3 × as fast
    as reading into Arrow first, paired; bench/README.md, "warehouse sync").
    Any row that is not a valid record stops the statement (``error()``), and
    a key repeated within the chunk fails :func:`_keys_unique`; the caller then
    rolls back and takes :func:`_read_chunk`, which names each bad line and
    keeps one row a key.
    """
    lines = {rel: _record_lines(path) for rel, path, _ in chunk}
    cols = ", ".join(_COLUMNS)
    raw = conn.connection.driver_connection
    inserted = raw.execute(
        f"""
        INSERT INTO predictions ({cols})
        SELECT {cols} FROM ({_segments_sql(root)}) AS i
        WHERE CASE WHEN ok THEN true ELSE error('not a prediction record: ' || segment) END
          AND NOT EXISTS (
            SELECT 1 FROM predictions p WHERE p.request_id = i.request_id AND p.arm = i.arm
          )
        """,
        {"files": [path.as_posix() for _, path, _ in chunk], "now": now},
    ).fetchone()
    loaded = int(inserted[0]) if inserted else 0
    read = sum(lines.values())
    if loaded > read:  # cannot happen if the count above holds; never book a wrong count
        raise _NotWhole(f"{loaded} rows inserted from {read} lines")
    if not _keys_unique(raw, [rel for rel, _, _ in chunk], now):
        raise _NotWhole("a key twice in the chunk")
    return read, loaded, [(rel, size, lines[rel], 0) for rel, _, size in chunk]


def _book(conn: Connection, finished: list[tuple[str, int, int, int]], now: datetime) -> None:
    """Record segments loaded whole, so that an unchanged one is not read again."""
    seg = _schema.segments
    for rel, size, n_rows, n_skipped in finished:
        conn.execute(seg.delete().where(seg.c.path == rel))
        conn.execute(
            seg.insert().values(
                path=rel, size=size, rows=n_rows, skipped_lines=n_skipped, loaded_at=now
            )
        )


def _load_batch(
    conn: Connection, batch: _Batch, result: SyncResult, now: datetime, on_duckdb: bool
) -> None:
    insert = _insert_duckdb if on_duckdb else _insert_generic
    result.skipped.extend(batch.skipped)
    for table in batch.tables:
        result.rows_read += table.num_rows
        if table.num_rows:
            result.rows_loaded += insert(conn, table)
    _book(conn, batch.finished, now)


def _load_closed(
    conn: Connection,
    chunk: list[_Segment],
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
                read, loaded, finished = _load_whole(conn, chunk, root, now)
                _book(conn, finished, now)
            result.rows_read += read
            result.rows_loaded += loaded
            return
        except (duckdb.Error, _NotWhole):
            pass  # rolled back: nothing of this chunk landed
    with conn.begin():
        _load_batch(conn, _read_chunk(chunk, root, now), result, now, on_duckdb)


def sync(settings: Settings, notify: _engine.Notify | None = None) -> SyncResult:
    """Load every prediction-log segment under ``settings.predlog_path`` into ``predictions``.

    Also mirrors the control plane's deployment history into ``deployments``.
    Idempotent: running it again (or replaying a segment) adds no rows. Closed
    segments already loaded whole are not re-read. Lines that are not whole
    records are skipped and listed in the result. Raises :class:`StoreUnavailable`
    when the warehouse stays locked past the lock timeout, or the control plane
    is unavailable.

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
            history = _mirror.pending_history(settings, _mirror.mirrored_generations(conn))
        closed: list[_Segment] = []
        open_: list[_Segment] = []
        for path in _segment_files(root):
            rel, size = path.relative_to(root).as_posix(), path.stat().st_size
            if seen.get(rel) == size:
                result.segments_unchanged += 1
                continue
            result.segments_read += 1
            # a segment still open is read line by line by the contract decoder
            (closed if path.name.endswith(".jsonl") else open_).append((rel, path, size))
        for chunk in _chunks(closed):
            _load_closed(conn, chunk, root, result, now, on_duckdb)
        with conn.begin():
            for rel, path, _ in open_:
                batch = _Batch([], [], [])
                batch.add_parsed(rel, path.read_bytes(), now)
                _load_batch(conn, batch, result, now, on_duckdb)
            result.deployments_loaded = _mirror.insert_missing(conn, history)
            result.rows_total = conn.execute(
                sa.select(sa.func.count()).select_from(_schema.predictions)
            ).scalar_one()
    result.seconds = time.perf_counter() - started
    return result
