"""Prediction-log segments: finding them, decoding them, reading them in bulk.

Closed segments end in ``.jsonl``; the one a worker is writing ends in
``.jsonl.open``, and a killed worker leaves its ``.open`` file behind, so both
are read. A line that does not decode as a :class:`PredictionRecord` (a
half-written last line, most often), or holds a record the warehouse cannot
store (:func:`unstorable`), is skipped and reported, never loaded.
Closed segments are read in chunks of up to ``CHUNK_BYTES`` with DuckDB's JSON
reader (:func:`segments_sql`); a chunk it refuses, or a segment it lost lines
of, is decoded line by line with msgspec so the bad lines are named
(:func:`read_chunk`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from mlpipe.predlog import DECODER, PredictionRecord
from mlpipe.warehouse import _schema

if TYPE_CHECKING:
    import pyarrow as pa

_LIST_DECODER = msgspec.json.Decoder(list[PredictionRecord])
_ENCODE = msgspec.json.encode


# Why a line was not loaded, in three kinds (``SkippedLine.kind``).
TORN = "half-written"  # the last line of a segment, without its newline
NOT_A_RECORD = "not a record"
CANNOT_STORE = "cannot be stored"  # a whole record with a value no warehouse column can hold


@dataclass(frozen=True)
class SkippedLine:
    """A line that was not loaded: which file, which line (1-based), why, and which kind of why."""

    segment: str
    line: int
    reason: str
    kind: str = NOT_A_RECORD


@dataclass
class Parsed:
    """A segment's records the warehouse can store, the lines it skipped, and their bytes."""

    records: list[PredictionRecord] = field(default_factory=list)
    skipped: list[SkippedLine] = field(default_factory=list)
    lines: dict[int, bytes] = field(default_factory=dict)  # line number -> a skipped line

    def skip(self, skipped: SkippedLine, line: bytes) -> None:
        self.skipped.append(skipped)
        self.lines[skipped.line] = line

    def keep(self, name: str, number: int, line: bytes, record: PredictionRecord) -> None:
        why = unstorable(record)
        if why is None:
            self.records.append(record)
        else:
            self.skip(SkippedLine(name, number, why, CANNOT_STORE), line)


# What the warehouse's columns hold, on DuckDB and PostgreSQL alike: INTEGER is 32-bit,
# TIMESTAMP is read back as a Python datetime (years 1-9999), and PostgreSQL's text
# cannot hold a NUL byte (DuckDB's can; both refuse it, so both load the same rows).
_INT32 = (-(2**31), 2**31 - 1)
TS_RANGE = (-62135596800.0, 253402300800.0)  # [0001-01-01, 10000-01-01) in unix seconds
_TEXT_FIELDS = ("request_id", "tenant", "model", "version", "entity_key")


def unstorable(record: PredictionRecord) -> str | None:
    """Why the warehouse cannot store ``record`` (a reason naming the field), or None if it can.

    JSON columns (``entity``, ``features``, ``features_missing``) are stored as
    the encoder's text, which escapes a NUL and holds any number, so only the
    plain columns are checked.
    """
    for name in _TEXT_FIELDS:
        if "\x00" in getattr(record, name):
            return f"{name} holds a NUL byte"
    for name in ("generation", "label"):
        value = getattr(record, name)
        if value is not None and not _INT32[0] <= value <= _INT32[1]:
            return f"{name} {value} is outside the warehouse's INTEGER range"
    if not TS_RANGE[0] <= record.ts < TS_RANGE[1]:
        return f"ts {record.ts!r} is outside the years 1-9999"
    return None


CHUNK_BYTES = 256 * 1024 * 1024  # closed segments loaded in one statement and transaction


@dataclass
class Batch:
    """Rows to insert, segments loaded whole (path, size, rows, skipped lines), lines skipped,
    and the skipped lines of the segments loaded whole, to quarantine (line, its bytes)."""

    tables: list[pa.Table] = field(default_factory=list)
    finished: list[tuple[str, int, int, int]] = field(default_factory=list)
    skipped: list[SkippedLine] = field(default_factory=list)
    quarantine: list[tuple[SkippedLine, bytes]] = field(default_factory=list)

    def add_parsed(self, rel: str, data: bytes, now: datetime) -> None:
        parsed = parse_segment(data, rel)
        self.skipped.extend(parsed.skipped)
        self.tables.append(_to_arrow(parsed.records, [rel] * len(parsed.records), now))
        # An open segment may still grow; its lines are quarantined once it is closed.
        if not rel.endswith(".open"):
            self.finished.append((rel, len(data), len(parsed.records), len(parsed.skipped)))
            self.quarantine.extend((s, parsed.lines[s.line]) for s in parsed.skipped)


def segment_files(root: Path) -> list[Path]:
    if not root.exists():
        return []
    files = [
        p for p in root.rglob("*") if p.is_file() and p.name.endswith((".jsonl", ".jsonl.open"))
    ]
    return sorted(files)


def read_open_segment(path: Path) -> bytes | None:
    """An open segment's bytes, or None where it is gone since it was listed.

    A worker closes its segment by renaming ``.jsonl.open`` to ``.jsonl`` at any
    moment; the closed file is loaded in its place (by this listing or the next
    sync), and its rows are keyed, so none is lost or loaded twice.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def segment_size(path: Path) -> int | None:
    """A listed segment's size, or None where it is gone (see :func:`read_open_segment`)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def parse_segment(data: bytes, name: str) -> Parsed:
    """Decode one segment's bytes; skip (and report) every line that is not a whole record,
    or is one the warehouse cannot store (:func:`unstorable`)."""
    lines = data.split(b"\n")
    # Everything before the last newline is complete; what follows it is a tail that may be torn.
    complete, tail = lines[:-1], lines[-1]
    numbered = [(i + 1, line) for i, line in enumerate(complete) if line.strip()]
    parsed = Parsed()
    try:
        records = _LIST_DECODER.decode(b"[" + b",".join(line for _, line in numbered) + b"]")
    except msgspec.DecodeError:
        for number, line in numbered:
            try:
                parsed.keep(name, number, line, DECODER.decode(line))
            except msgspec.DecodeError as exc:
                reason = f"not a prediction record: {exc}"
                parsed.skip(SkippedLine(name, number, reason, NOT_A_RECORD), line)
    else:
        for (number, line), record in zip(numbered, records, strict=True):
            parsed.keep(name, number, line, record)
    if tail.strip():
        try:
            parsed.keep(name, len(lines), tail, DECODER.decode(tail))
        except msgspec.DecodeError:
            why = "half-written last line (no newline)"
            parsed.skip(SkippedLine(name, len(lines), why, TORN), tail)
    return parsed


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
            "probabilities": pa.array(
                [
                    None if r.probabilities is None else _ENCODE(r.probabilities).decode()
                    for r in records
                ],
                pa.string(),
            ),
        }
    )


COLUMNS = [c.name for c in _schema.predictions.columns]


_JSON_COLUMNS = (
    "{request_id: 'VARCHAR', ts: 'DOUBLE', tenant: 'VARCHAR', model: 'VARCHAR', "
    "version: 'VARCHAR', arm: 'VARCHAR', generation: 'INTEGER', entity_key: 'VARCHAR', "
    "entity: 'JSON', features: 'JSON', score: 'DOUBLE', label: 'INTEGER', latency_ms: 'DOUBLE', "
    "feature_cache_hit: 'BOOLEAN', prediction_cache_hit: 'BOOLEAN', features_missing: 'JSON', "
    "status: 'VARCHAR', probabilities: 'DOUBLE[]'}"
)
# The same record structure for json_transform_strict (a Kafka record's value).
JSON_STRUCTURE = (
    '{"request_id": "VARCHAR", "ts": "DOUBLE", "tenant": "VARCHAR", "model": "VARCHAR", '
    '"version": "VARCHAR", "arm": "VARCHAR", "generation": "INTEGER", "entity_key": "VARCHAR", '
    '"entity": "JSON", "features": "JSON", "score": "DOUBLE", "label": "INTEGER", '
    '"latency_ms": "DOUBLE", "feature_cache_hit": "BOOLEAN", "prediction_cache_hit": "BOOLEAN", '
    '"features_missing": "JSON", "status": "VARCHAR", "probabilities": ["DOUBLE"]}'
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
    "latency_ms",
)


def segments_sql(root: Path) -> str:
    """Rows of the segments ``$files`` as ``predictions`` columns, plus ``ok``: a valid record.

    DuckDB's reader runs strict: a line that is not JSON, or holds a value of
    the wrong type (an integer outside INTEGER too), raises ``duckdb.Error``. A
    line that parses but misses a field, holds an impossible value or one the
    warehouse cannot store (:func:`unstorable`) is a row whose ``ok`` is false.
    """
    prefix = len(root.as_posix()) + 2  # 1-based substr after "<root>/"
    source = (
        f"read_json($files, format = 'newline_delimited', columns = {_JSON_COLUMNS}, "
        "filename = true)"
    )
    return rows_sql(source, f"substr(filename, {prefix})")


def rows_sql(source: str, segment: str, extra: str = "") -> str:
    """``predictions`` columns and ``ok`` from ``source``, a relation of the record's fields
    (typed as :data:`JSON_STRUCTURE`); ``segment`` names each row's origin (an SQL
    expression), ``extra`` adds select items."""
    valid = " AND ".join(f"{c} IS NOT NULL" for c in _REQUIRED)
    no_nul = f"NOT contains(concat({', '.join(_TEXT_FIELDS)}), chr(0))"
    in_range = f"ts >= {TS_RANGE[0]} AND ts < {TS_RANGE[1]}"
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
               {segment} AS segment,
               CAST($now AS TIMESTAMP) AS loaded_at,
               CAST(to_json(probabilities) AS VARCHAR) AS probabilities,
               coalesce({valid} AND {no_nul} AND {in_range}
                 AND arm IN ('champion', 'canary', 'shadow')
                 AND coalesce(status, 'ok') IN ('ok', 'error', 'timeout')
                 AND starts_with(CAST(features AS VARCHAR), '{{')
                 AND starts_with(CAST(entity AS VARCHAR), '{{'),
                 false) AS ok{extra}
        FROM {source}
    """


def _read_closed(
    paths: list[Path], root: Path, now: datetime
) -> tuple[pa.Table, dict[str, tuple[int, int]]]:
    """Read closed segments with DuckDB's JSON reader: the valid rows, and per file (lines, valid).

    A line DuckDB cannot read raises ``duckdb.Error`` and the caller reads the
    files with msgspec, which names the line; a file with a line that is not a
    valid row (see :func:`segments_sql`) is re-read with msgspec too.
    """
    import duckdb
    import pyarrow.compute as pc

    con = duckdb.connect()
    try:
        table = con.sql(
            segments_sql(root), params={"files": [p.as_posix() for p in paths], "now": now}
        ).to_arrow_table()
    finally:
        con.close()
    per_file = table.group_by("segment").aggregate([("ok", "count"), ("ok", "sum")]).to_pylist()
    counts = {r["segment"]: (r["ok_count"], r["ok_sum"] or 0) for r in per_file}
    ok = table.column("ok")
    if not pc.all(ok).as_py():
        table = table.filter(ok)
    return table.select(COLUMNS), counts


# A changed segment: its path relative to the predlog root, its path, its size when listed.
Segment = tuple[str, Path, int]


def chunks(segments: list[Segment]) -> list[list[Segment]]:
    """Closed segments grouped into chunks of about ``CHUNK_BYTES`` (a big one goes alone)."""
    grouped: list[list[Segment]] = []
    total = CHUNK_BYTES
    for segment in segments:
        if total >= CHUNK_BYTES:
            grouped.append([])
            total = 0
        grouped[-1].append(segment)
        total += segment[2]
    return grouped


def read_chunk(chunk: list[Segment], root: Path, now: datetime) -> Batch:
    """One chunk of closed segments: DuckDB's reader, msgspec for any segment it lost lines of."""
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc

    batch = Batch()
    try:
        table, counts = _read_closed([path for _, path, _ in chunk], root, now)
    except duckdb.Error:  # a line DuckDB cannot read: msgspec reads the chunk and names it
        for rel, path, _ in chunk:
            batch.add_parsed(rel, path.read_bytes(), now)
        return batch
    lines = {rel: counts.get(rel, (0, 0)) for rel, _, _ in chunk}
    lost = {rel for rel, (n_lines, n_valid) in lines.items() if n_lines != n_valid}
    if lost:
        keep = pc.invert(pc.is_in(table.column("segment"), pa.array(sorted(lost))))
        table = table.filter(keep)
    batch.tables.append(table)
    batch.finished.extend(
        (rel, size, lines[rel][1], 0) for rel, _, size in chunk if rel not in lost
    )
    for rel, path, _ in chunk:
        if rel in lost:
            batch.add_parsed(rel, path.read_bytes(), now)
    return batch


class NotWhole(Exception):
    """A chunk the one-statement load does not take: it goes through :func:`read_chunk`."""


_SCAN_BYTES = 1 << 20  # a segment is scanned for line starts this much at a time


def record_lines(path: Path) -> int:
    """How many records ``path`` holds if every line starts a JSON object; else :class:`NotWhole`.

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
        raise NotWhole(f"{path}: a line that does not start a JSON object")
    return lines
