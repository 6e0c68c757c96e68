"""One tenant's data: exported to Parquet, or erased wherever the tool can reach it.

:func:`export_tenant` writes the tenant's predictions joined with their
outcomes (entity keys as logged; PII fields were hashed before they were
logged). :func:`purge_tenant` deletes the tenant's (or one entity's) rows
from ``predictions``, ``outcomes`` and ``quarantine`` and rewrites the closed
segments on disk (not loaded yet, loaded but not yet released, archived)
without them; the deletes and the audit row commit in one transaction, so the
audit never claims an erasure that rolled back. What it cannot reach is named
in the result (:attr:`PurgeResult.unreachable`). Both are listed by
:func:`tenant_audit`.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import sqlalchemy as sa

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.warehouse import _engine, _schema
from mlpipe.warehouse._segments import segment_files
from mlpipe.windows import parse_duration

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy import Connection

    from mlpipe.config import Settings

_BATCH = 50_000  # rows fetched and written to Parquet at a time


class _Owner(msgspec.Struct):
    """The two fields of a logged line that say whose it is."""

    tenant: str
    entity_key: str = ""


_OWNER = msgspec.json.Decoder(_Owner)


@dataclass(frozen=True)
class ExportResult:
    path: Path
    predictions: int
    outcomes: int  # predictions of the export that have an outcome


@dataclass
class PurgeResult:
    """Rows deleted (or, with ``applied`` False, that would be) per place, and what was not
    reached."""

    tenant: str
    entity_key: str | None
    applied: bool
    predictions: int = 0
    outcomes: int = 0
    quarantine: int = 0
    segment_rows: int = 0  # lines cut from closed segments (and archived ones)
    segments_rewritten: int = 0
    unreachable: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return self.predictions + self.outcomes + self.quarantine + self.segment_rows


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    actor: str
    action: str
    tenant: str
    entity_key: str | None
    rows: int
    detail: dict[str, Any]


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def parse_instant(text: str | datetime | None, flag: str) -> datetime | None:
    """ISO 8601 (naive is UTC), or a duration back from now (``7d``); else InvalidInput."""
    if text is None:
        return None
    if isinstance(text, str):
        try:
            value = datetime.fromisoformat(text.strip())
        except ValueError:
            try:
                return _now() - parse_duration(text, flag)
            except InvalidInput:
                raise InvalidInput(
                    f"bad {flag} {text!r}: use ISO 8601 (2025-01-31T12:00) or an age (7d)"
                ) from None
    else:
        value = text
    return value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)


def _tenant_rows(tenant: str, entity_key: str | None) -> sa.ColumnElement[bool]:
    p = _schema.predictions
    where = p.c.tenant == tenant
    return where if entity_key is None else sa.and_(where, p.c.entity_key == entity_key)


def _require_tenant(settings: Settings, conn: Connection, tenant: str, found: int) -> None:
    """A name the control plane knows, or one with rows: else a typo, refused (NotFound)."""
    from mlpipe import security

    if found or any(t.name == tenant for t in security.list_tenants(settings)):
        return
    p = _schema.predictions
    held = conn.execute(sa.select(sa.literal(1)).where(p.c.tenant == tenant).limit(1)).first()
    if held is None:
        raise NotFound(f"no tenant {tenant!r}: not in the control plane, no rows in the warehouse")


# --- export ----------------------------------------------------------------------------


def _arrow_type(column: sa.Column[Any]) -> pa.DataType:
    import pyarrow as pa

    kind = column.type
    if isinstance(kind, sa.Boolean):
        return pa.bool_()
    if isinstance(kind, sa.Integer):
        return pa.int64()
    if isinstance(kind, sa.Float):
        return pa.float64()
    if isinstance(kind, sa.DateTime):
        return pa.timestamp("us")
    return pa.string()


def _export_columns() -> list[sa.ColumnElement[Any]]:
    p, o = _schema.predictions, _schema.outcomes
    return [
        *p.c,
        o.c.outcome,
        o.c.outcome_label,
        o.c.outcome_ts,
        o.c.source.label("outcome_source"),
        o.c.loaded_at.label("outcome_loaded_at"),
    ]


def export_tenant(
    settings: Settings,
    tenant: str,
    out: Path,
    *,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
) -> ExportResult:
    """Write ``tenant``'s predictions in ``[since, until)`` with their outcomes to ``out``.

    ``since`` and ``until`` are datetimes or text (:func:`parse_instant`).

    The file appears whole or not at all (written beside it, then renamed).
    Raises :class:`InvalidInput` for a file that is not ``.parquet``, a missing
    directory or an empty window, :class:`NotFound` for an unknown tenant.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    since, until = parse_instant(since, "--since"), parse_instant(until, "--until")
    if out.suffix != ".parquet":
        raise InvalidInput(f"--out {out}: the export is a Parquet file (name it *.parquet)")
    if not out.parent.is_dir():
        raise InvalidInput(f"--out {out}: directory {out.parent} does not exist")
    if since is not None and until is not None and since >= until:
        raise InvalidInput(f"--since {since} is not before --until {until}")
    p, o = _schema.predictions, _schema.outcomes
    columns = _export_columns()
    schema = pa.schema(
        [(c.name, _arrow_type(c)) for c in columns]  # type: ignore[arg-type]
    )
    query = (
        sa.select(*columns)
        .select_from(
            p.outerjoin(o, sa.and_(o.c.request_id == p.c.request_id, o.c.tenant == p.c.tenant))
        )
        .where(p.c.tenant == tenant)
        .order_by(p.c.ts, p.c.request_id, p.c.model, p.c.arm)
    )
    if since is not None:
        query = query.where(p.c.ts >= since)
    if until is not None:
        query = query.where(p.c.ts < until)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    rows = labelled = 0
    try:
        with _engine.read(settings) as conn:
            _require_tenant(settings, conn, tenant, 0)
            result = conn.execute(query)
            with pq.ParquetWriter(partial, schema) as writer:
                while batch := result.fetchmany(_BATCH):
                    table = pa.Table.from_pylist([dict(r._mapping) for r in batch], schema)
                    writer.write_table(table)
                    rows += table.num_rows
                    labelled += table.num_rows - table.column("outcome_source").null_count
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    detail = {"out": str(out), "since": str(since), "until": str(until), "outcomes": labelled}
    with _engine.write(settings) as conn:
        _audit(conn, settings, "export", tenant, None, rows, detail)
    return ExportResult(out, rows, labelled)


# --- purge -----------------------------------------------------------------------------


def _owned(line: bytes, tenant: str, entity_key: str | None) -> bool:
    try:
        who = _OWNER.decode(line)
    except msgspec.DecodeError:
        return False  # not a record (kept for quarantine): nobody's row
    return who.tenant == tenant and (entity_key is None or who.entity_key == entity_key)


def _cut(data: bytes, tenant: str, entity_key: str | None) -> tuple[bytes, int]:
    """``data`` without the tenant's lines, and how many were cut. A torn last line stays."""
    if tenant.encode() not in data:  # most segments: no line of this tenant
        return data, 0
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    kept = [line for line in complete if not _owned(line, tenant, entity_key)]
    cut = len(complete) - len(kept)
    if not cut:
        return data, 0
    return b"".join(line + b"\n" for line in kept) + tail, cut


def _rewrite(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, whole (written beside it, fsynced, renamed)."""
    partial = path.with_name(f".{path.name}.purge")
    with partial.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)


def _closed_segments(settings: Settings) -> list[tuple[Path, Path]]:
    """(root, segment) for each closed segment of the log and of its archive."""
    roots = [settings.predlog_path]
    if settings.predlog.archive_dir:
        roots.append(settings.path(settings.predlog.archive_dir))
    return [
        (root, path)
        for root in roots
        for path in segment_files(root)
        if path.name.endswith(".jsonl")
    ]


def _open_rows(settings: Settings, tenant: str, entity_key: str | None) -> tuple[int, int]:
    """The tenant's rows in segments still open (being written): (rows, segments)."""
    rows = segments = 0
    for path in segment_files(settings.predlog_path):
        if path.name.endswith(".jsonl"):
            continue
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        n = _cut(data, tenant, entity_key)[1]
        rows += n
        segments += bool(n)
    return rows, segments


def _quarantined(conn: Connection, tenant: str, entity_key: str | None) -> list[tuple[str, int]]:
    q = _schema.quarantine
    found = []
    for segment, line, record in conn.execute(sa.select(q.c.segment, q.c.line, q.c.record)):
        try:
            row = json.loads(record)
        except ValueError:
            continue
        if (
            isinstance(row, dict)
            and row.get("tenant") == tenant
            and (entity_key is None or row.get("entity_key") == entity_key)
        ):
            found.append((segment, line))
    return found


def _count(conn: Connection, table: sa.Table, where: sa.ColumnElement[bool]) -> int:
    return int(
        conn.execute(sa.select(sa.func.count()).select_from(table).where(where)).scalar_one()
    )


def _outcomes_of(tenant: str, entity_key: str | None) -> sa.ColumnElement[bool]:
    o, p = _schema.outcomes, _schema.predictions
    where = o.c.tenant == tenant
    if entity_key is None:
        return where
    ids = sa.select(p.c.request_id).where(_tenant_rows(tenant, entity_key))
    return sa.and_(where, o.c.request_id.in_(ids))


def purge_tenant(
    settings: Settings, tenant: str, *, entity_key: str | None = None, apply: bool = False
) -> PurgeResult:
    """Erase ``tenant``'s rows (only ``entity_key``'s, when given); ``apply=False`` counts them.

    Holds the warehouse's write connection throughout, so on DuckDB no sync
    loads a segment between its rewrite and the deletes. Segments still open
    (a worker appends to them) are not rewritten: their rows are counted in
    :attr:`PurgeResult.unreachable`, to purge again once they close.
    """
    result = PurgeResult(tenant, entity_key, apply)
    p, o, q, seg = _schema.predictions, _schema.outcomes, _schema.quarantine, _schema.segments
    with _engine.writer(settings) as conn:
        with conn.begin():
            result.outcomes = _count(conn, o, _outcomes_of(tenant, entity_key))
            result.predictions = _count(conn, p, _tenant_rows(tenant, entity_key))
            quarantined = _quarantined(conn, tenant, entity_key)
            result.quarantine = len(quarantined)
            sizes = {
                r.path: (r.size, r.rows)
                for r in conn.execute(sa.select(seg.c.path, seg.c.size, seg.c.rows))
            }
        rewritten: list[tuple[str, int, int, int]] = []  # (path, old size, new size, rows cut)
        for root, path in _closed_segments(settings):
            data = path.read_bytes()
            kept, cut = _cut(data, tenant, entity_key)
            if not cut:
                continue
            result.segment_rows += cut
            result.segments_rewritten += 1
            if apply:
                _rewrite(path, kept)
                if root == settings.predlog_path:
                    rewritten.append((path.relative_to(root).as_posix(), len(data), len(kept), cut))
        open_rows, open_segments = _open_rows(settings, tenant, entity_key)
        _require_tenant(settings, conn, tenant, result.rows + open_rows)
        result.unreachable = _unreachable(settings, open_rows, open_segments)
        if not apply:
            return result
        with conn.begin():
            conn.execute(o.delete().where(_outcomes_of(tenant, entity_key)))
            conn.execute(p.delete().where(_tenant_rows(tenant, entity_key)))
            for segment, line in quarantined:
                conn.execute(q.delete().where(q.c.segment == segment, q.c.line == line))
            for rel, old, new, cut in rewritten:
                # a segment loaded whole stays "loaded whole" at its new size (nothing to re-read)
                if sizes.get(rel, (None, 0))[0] == old:
                    conn.execute(
                        seg.update()
                        .where(seg.c.path == rel)
                        .values(size=new, rows=max(0, sizes[rel][1] - cut))
                    )
            detail = {k: v for k, v in asdict(result).items() if k not in ("tenant", "entity_key")}
            _audit(conn, settings, "purge", tenant, entity_key, result.rows, detail)
    return result


def _unreachable(settings: Settings, open_rows: int, open_segments: int) -> list[str]:
    """What a purge does not erase, each with what to do about it."""
    notes = []
    if open_rows:
        notes.append(
            f"{open_rows} row(s) in {open_segments} segment(s) still being written: they close "
            f"within predlog.segment_max_age_s ({settings.predlog.segment_max_age_s:g}s); "
            "purge again after that"
        )
    if settings.predlog.sink == "kafka":
        notes.append(
            f"records on the Kafka topic {settings.predlog.kafka_topic}: kept until the "
            "topic's retention.ms removes them"
        )
    notes.append(f"reports already written under {settings.reports_path} (aggregates, sample rows)")
    notes.append(
        "the running servers' in-memory prediction caches (restart them to drop cached answers)"
    )
    return notes


# --- audit -----------------------------------------------------------------------------


def _audit(
    conn: Connection,
    settings: Settings,
    action: str,
    tenant: str,
    entity_key: str | None,
    rows: int,
    detail: dict[str, Any],
) -> None:
    conn.execute(
        _schema.tenant_audit.insert().values(
            id=uuid.uuid4().hex,
            recorded_at=_now(),
            actor=settings.actor,
            action=action,
            tenant=tenant,
            entity_key=entity_key,
            rows=rows,
            detail=json.dumps(detail, default=str),
        )
    )


def tenant_audit(settings: Settings, tenant: str | None = None) -> list[AuditEntry]:
    """Exports and purges, oldest first (only ``tenant``'s, when given)."""
    a = _schema.tenant_audit
    query = sa.select(a).order_by(a.c.recorded_at, a.c.id)
    if tenant is not None:
        query = query.where(a.c.tenant == tenant)
    with _engine.read(settings) as conn:
        return [
            AuditEntry(
                r.recorded_at,
                r.actor,
                r.action,
                r.tenant,
                r.entity_key,
                r.rows,
                json.loads(r.detail),
            )
            for r in conn.execute(query)
        ]
