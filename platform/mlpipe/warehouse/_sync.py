"""Loading prediction-log segments into ``predictions``: idempotent, bulk, tolerant of torn tails.

Closed segments end in ``.jsonl``; the one a worker is writing ends in
``.jsonl.open``, and a killed worker leaves its ``.open`` file behind, so both
are read. Rows are keyed by (request_id, arm): a replayed or renamed segment
adds nothing. A line that does not decode as a :class:`PredictionRecord` (a
half-written last line, most often) is skipped and reported, never loaded.
Rows go in as one Arrow table per sync (DuckDB) rather than row by row.
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
    before = conn.execute(sa.select(sa.func.count()).select_from(_schema.predictions)).scalar_one()
    raw.register("_mlpipe_incoming", table)
    try:
        cols = ", ".join(_COLUMNS)
        # Dedupe inside the batch, then keep only keys the table lacks: one set-based insert.
        raw.execute(
            f"""
            INSERT INTO predictions ({cols})
            SELECT {cols} FROM (
                SELECT DISTINCT ON (request_id, arm) * FROM _mlpipe_incoming
            ) AS i
            WHERE NOT EXISTS (
                SELECT 1 FROM predictions p WHERE p.request_id = i.request_id AND p.arm = i.arm
            )
            """
        )
    finally:
        raw.unregister("_mlpipe_incoming")
    after = conn.execute(sa.select(sa.func.count()).select_from(_schema.predictions)).scalar_one()
    return int(after - before)


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


def _read_closed(paths: list[Path], root: Path, now: datetime) -> tuple[pa.Table, dict[str, int]]:
    """Read closed segments with DuckDB's JSON reader; returns the rows and the count per file.

    Rows that miss a field or hold an impossible value are dropped here; the caller
    compares counts with the files' line counts and re-reads any file that lost a
    line with msgspec, which names the line.
    """
    import duckdb

    prefix = len(root.as_posix()) + 2  # 1-based substr after "<root>/"
    valid = " AND ".join(f"{c} IS NOT NULL" for c in _REQUIRED)
    con = duckdb.connect()
    try:
        table = con.sql(
            f"""
            SELECT request_id, arm, make_timestamp(CAST(ts * 1000000 AS BIGINT)) AS ts, tenant,
                   model, version, generation, entity_key, CAST(entity AS VARCHAR) AS entity,
                   CAST(features AS VARCHAR) AS features, score, label, latency_ms,
                   coalesce(feature_cache_hit, false) AS feature_cache_hit,
                   coalesce(prediction_cache_hit, false) AS prediction_cache_hit,
                   coalesce(CAST(features_missing AS VARCHAR), '[]') AS features_missing,
                   coalesce(status, 'ok') AS status,
                   substr(filename, {prefix}) AS segment,
                   CAST($now AS TIMESTAMP) AS loaded_at
            FROM read_json($files, format = 'newline_delimited', columns = {_JSON_COLUMNS},
                           ignore_errors = true, filename = true)
            WHERE {valid} AND arm IN ('champion', 'canary', 'shadow')
              AND coalesce(status, 'ok') IN ('ok', 'error', 'timeout')
              AND json_type(features) = 'OBJECT' AND json_type(entity) = 'OBJECT'
            """,
            params={"files": [p.as_posix() for p in paths], "now": now},
        ).to_arrow_table()
    finally:
        con.close()
    counts: dict[str, int] = {}
    for name in table.column("segment").to_pylist():
        counts[name] = counts.get(name, 0) + 1
    return table, counts


def _line_count(data: bytes) -> int:
    """Lines with content, by one C-speed count unless the data holds an empty line.

    A whitespace-only line counts here but not for DuckDB's reader; the mismatch only
    sends that segment to the line-by-line reader, which loads it correctly.
    """
    if not data:
        return 0
    if b"\n\n" not in data and not data.startswith(b"\n"):
        return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return sum(1 for line in data.split(b"\n") if line.strip())


def sync(settings: Settings, notify: _engine.Notify | None = None) -> SyncResult:
    """Load every prediction-log segment under ``settings.predlog_path`` into ``predictions``.

    Also mirrors the control plane's deployment history into ``deployments``.
    Idempotent: running it again (or replaying a segment) adds no rows. Closed
    segments already loaded whole are not re-read. Lines that are not whole
    records are skipped and listed in the result. Raises :class:`StoreUnavailable`
    when the warehouse stays locked past the lock timeout, or the control plane
    is unavailable.
    """
    import time

    import pyarrow as pa

    started = time.perf_counter()
    root = settings.predlog_path
    result = SyncResult()
    files = _segment_files(root)
    with _engine.read(settings, notify) as conn:
        seen = {
            row.path: row.size
            for row in conn.execute(sa.select(_schema.segments.c.path, _schema.segments.c.size))
        }
        mirrored = _mirror.mirrored_generations(conn)
    history = _mirror.pending_history(settings, mirrored)
    now = datetime.now(UTC).replace(tzinfo=None)
    # Everything is read before the write lock is taken, so the lock is held only for the insert.
    closed: dict[str, tuple[Path, bytes]] = {}
    by_msgspec: dict[str, bytes] = {}
    for path in files:
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        if rel in seen and seen[rel] == len(data):
            result.segments_unchanged += 1
            continue
        result.segments_read += 1
        if path.name.endswith(".jsonl") and data.endswith(b"\n"):
            closed[rel] = (path, data)
        else:  # a segment still open (or torn): the contract decoder reads it line by line
            by_msgspec[rel] = data
    tables: list[pa.Table] = []
    finished: list[tuple[str, int, int, int]] = []
    if closed:
        table, counts = _read_closed([p for p, _ in closed.values()], root, now)
        lost = {rel for rel, (_, data) in closed.items() if counts.get(rel, 0) != _line_count(data)}
        if lost:
            keep = pa.compute.invert(
                pa.compute.is_in(table.column("segment"), pa.array(sorted(lost)))
            )
            table = table.filter(keep)
            by_msgspec.update({rel: closed[rel][1] for rel in lost})
        tables.append(table)
        finished.extend(
            (rel, len(data), counts.get(rel, 0), 0)
            for rel, (_, data) in closed.items()
            if rel not in lost
        )
    for rel, data in by_msgspec.items():
        parsed = parse_segment(data, rel)
        result.skipped.extend(parsed.skipped)
        tables.append(_to_arrow(parsed.records, [rel] * len(parsed.records), now))
        if not rel.endswith(".open"):
            finished.append((rel, len(data), len(parsed.records), len(parsed.skipped)))
    incoming = pa.concat_tables([t.select(_COLUMNS) for t in tables]) if tables else None
    result.rows_read = incoming.num_rows if incoming is not None else 0
    with _engine.write(settings, notify) as conn:
        if incoming is not None and incoming.num_rows:
            insert = _insert_duckdb if _engine.is_duckdb(settings.warehouse) else _insert_generic
            result.rows_loaded = insert(conn, incoming)
        seg = _schema.segments
        for rel, size, n_rows, n_skipped in finished:
            conn.execute(seg.delete().where(seg.c.path == rel))
            conn.execute(
                seg.insert().values(
                    path=rel, size=size, rows=n_rows, skipped_lines=n_skipped, loaded_at=now
                )
            )
        result.deployments_loaded = _mirror.insert_missing(conn, history)
        result.rows_total = conn.execute(
            sa.select(sa.func.count()).select_from(_schema.predictions)
        ).scalar_one()
    result.seconds = time.perf_counter() - started
    return result
