"""Loading the prediction log from a Kafka topic, exactly once, into ``predictions``.

``warehouse sync --follow`` reads the topic as a consumer group
(``predlog.kafka_group``), so several followers share its partitions; a
one-shot ``warehouse sync`` reads every partition directly up to its end.
Each batch of records and the position after it (``kafka_offsets``: per
partition, the offset of the next record to load) are written in **one
warehouse transaction**, so a crash at any point leaves either both or
neither: the next run starts from the position the warehouse holds and loads
every record once. On every (re)assignment the consumer seeks to the
warehouse's positions, never to Kafka's committed offsets; those are written
after the warehouse commits only so that Kafka's own tools show the group's
lag. The position is advanced by compare-and-swap: a consumer whose partition
moved to another member while it read rolls back and seeks again, so two
members never both load a range.

A record that is not a :class:`~mlpipe.predlog.PredictionRecord`, that the
warehouse cannot store, or whose tenant header disagrees with its body goes to
``quarantine`` with ``segment = "kafka:TOPIC/PARTITION"`` and ``line`` = its
offset, and the position moves past it: one bad record never holds back the
rest. Loaded rows name their record the same way in ``predictions.segment``
(``kafka:TOPIC/PARTITION@OFFSET``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec
import sqlalchemy as sa

from mlpipe.errors import StoreUnavailable
from mlpipe.predlog import DECODER, TENANT_HEADER, ClientErrors, PredictionRecord
from mlpipe.warehouse import _dialects, _engine, _schema
from mlpipe.warehouse._duckdb import duckdb_connection
from mlpipe.warehouse._segments import (
    _JSON_COLUMNS,
    CANNOT_STORE,
    COLUMNS,
    NOT_A_RECORD,
    NotWhole,
    SkippedLine,
    _to_arrow,
    rows_sql,
    unstorable,
)
from mlpipe.warehouse._sql import KNOWN, REUSED

if TYPE_CHECKING:
    import duckdb
    from sqlalchemy import Connection

    from mlpipe.config import Settings
    from mlpipe.warehouse._dialects import Dialect
    from mlpipe.warehouse._sync import SyncResult

_METADATA_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PartitionLag:
    """One partition: the next offset the warehouse will load, the topic's bounds, the lag.

    ``expired`` counts records that Kafka's retention deleted before the
    warehouse loaded them: lost to the warehouse, and said so.
    """

    topic: str
    partition: int
    loaded: int  # next offset to load (0 before the first record was loaded)
    start: int  # the partition's low watermark: its oldest record still kept
    end: int  # the partition's high watermark: the offset its next record will take
    lag: int  # records kept in the topic and not yet loaded
    expired: int

    @classmethod
    def of(cls, topic: str, partition: int, loaded: int, start: int, end: int) -> PartitionLag:
        lag = max(0, end - max(loaded, start))
        return cls(topic, partition, loaded, start, end, lag, max(0, min(start, end) - loaded))


def _consumer(settings: Settings) -> tuple[Any, ClientErrors]:
    """A consumer (:func:`consumer_config`) and the client errors librdkafka reports to it."""
    from confluent_kafka import Consumer

    errors = ClientErrors()
    return Consumer({**consumer_config(settings), "error_cb": errors}), errors


def _topic_metadata(consumer: Any, errors: ClientErrors, topic: str) -> Any:
    """``topic``'s metadata, asked for in 1-s tries for up to ``_METADATA_TIMEOUT_S``;
    a refused login ends the tries at once (no retry can fix a wrong password)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + _METADATA_TIMEOUT_S
    while True:
        try:
            return consumer.list_topics(topic, timeout=1.0)
        except KafkaException:
            consumer.poll(0)  # serves the error events queued meanwhile to ``errors``
            if errors.login_failed or time.monotonic() >= deadline:
                raise


def _unreachable(
    settings: Settings, consumer: Any, errors: ClientErrors, exc: Exception
) -> StoreUnavailable:
    """StoreUnavailable for a failed metadata request, naming the cause librdkafka reported
    (a failed SASL login, a wrong ``security.protocol``) when it reported one."""
    consumer.poll(0)  # serves the error events queued meanwhile to ``errors``
    where = f"Kafka at {settings.predlog.kafka_bootstrap} unreachable"
    return StoreUnavailable(errors.explain(f"{where}: {exc}"))


def consumer_config(settings: Settings) -> dict[str, Any]:
    """A consumer of ``predlog.kafka_group`` that never commits on its own."""
    p = settings.predlog
    return {
        **p.kafka_config,
        "bootstrap.servers": p.kafka_bootstrap,
        "group.id": p.kafka_group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        # a partition added to the topic is seen (and assigned) within seconds
        "topic.metadata.refresh.interval.ms": 5000,
        # a killed --follow consumer's partitions move to the others within 10 s
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 2_000,
    }


def _segment_prefix(topic: str) -> str:
    return f"kafka:{topic}/"


def _segment(topic: str, partition: int) -> str:
    return f"{_segment_prefix(topic)}{partition}"


def stored_positions(conn: Connection, topic: str) -> dict[int, int]:
    """The warehouse's position per partition of ``topic``: the next offset to load."""
    k = _schema.kafka_offsets
    rows = conn.execute(
        sa.select(k.c.partition_id, k.c.next_offset).where(k.c.topic == topic)
    ).all()
    return {int(partition): int(offset) for partition, offset in rows}


class PositionMoved(Exception):
    """Another consumer advanced a partition since this one read its position."""


def _advance(conn: Connection, topic: str, moves: dict[int, tuple[int | None, int]]) -> None:
    """Move each partition from its expected position to its new one, or raise PositionMoved."""
    k = _schema.kafka_offsets
    now = datetime.now(UTC).replace(tzinfo=None)
    for partition, (expected, new) in moves.items():
        if expected is None:
            exists = conn.execute(
                sa.select(k.c.next_offset).where(k.c.topic == topic, k.c.partition_id == partition)
            ).first()
            if exists is not None:
                raise PositionMoved(f"partition {partition} was loaded by another consumer")
            conn.execute(
                k.insert().values(
                    topic=topic, partition_id=partition, next_offset=new, updated_at=now
                )
            )
            continue
        moved = conn.execute(
            k.update()
            .where(k.c.topic == topic, k.c.partition_id == partition, k.c.next_offset == expected)
            .values(next_offset=new, updated_at=now)
        ).rowcount
        if moved != 1:
            raise PositionMoved(f"partition {partition} was loaded by another consumer")


@dataclass
class _Decoded:
    records: list[PredictionRecord]
    segments: list[str]  # per record: kafka:TOPIC/PARTITION@OFFSET
    quarantine: list[tuple[SkippedLine, bytes]]


@dataclass
class BatchCounts:
    """What one batch wrote: records loadable, rows added, rows whose request id another
    request had used, and the records quarantined."""

    read: int = 0
    loaded: int = 0
    reused: int = 0
    quarantined: list[SkippedLine] = field(default_factory=list)


def _moves(
    messages: Sequence[Any], positions: dict[int, int | None]
) -> dict[int, tuple[int | None, int]]:
    """Per partition of the batch: (the position expected in the warehouse, the one after).

    A batch holds each partition's messages in offset order, so the last one seen is
    the partition's last.
    """
    last: dict[int, int] = {}
    for msg in messages:
        last[msg.partition()] = msg.offset()
    return {partition: (positions.get(partition), offset + 1) for partition, offset in last.items()}


def _decode(messages: Sequence[Any], topic: str) -> _Decoded:
    """The records of a batch of messages, and the ones to quarantine with the reason."""
    out = _Decoded([], [], [])
    for msg in messages:
        partition, offset, value = msg.partition(), msg.offset(), msg.value() or b""
        segment = _segment(topic, partition)
        why, kind = None, NOT_A_RECORD
        try:
            record = DECODER.decode(value)
        except msgspec.DecodeError as exc:
            why = f"not a prediction record: {exc}"
        else:
            why, kind = _refusal(record, _tenant_header(msg)), CANNOT_STORE
        if why is None:
            out.records.append(record)
            out.segments.append(f"{segment}@{offset}")
        else:
            out.quarantine.append((SkippedLine(segment, offset, why, kind), value))
    return out


def _tenant_header(msg: Any) -> bytes | None:
    """The record's first tenant header (b"" when empty), or None without one."""
    for name, value in msg.headers() or ():
        if name == TENANT_HEADER:
            return value or b""
    return None


_KAFKA_COLUMNS = _JSON_COLUMNS[:-1] + ", _p: 'INTEGER', _o: 'BIGINT', _h: 'VARCHAR'}"
_FRAME = b'{"_p":%d,"_o":%d,"_h":%b,'


@dataclass
class MessageBatch:
    """A batch of messages (``all``, as consumed) framed for DuckDB's JSON reader: the
    lines, the messages they hold (in order), and the messages left for :func:`_decode`."""

    all: Sequence[Any]
    lines: bytearray
    messages: list[Any]
    rest: list[Any]


def _frame(messages: Sequence[Any]) -> MessageBatch:
    """Each value that is one JSON object on one line (it starts with ``{`` and holds no
    line break) becomes a line with its partition, offset and tenant header put in front
    of its fields (``_p``, ``_o``, ``_h``); the other values are left for :func:`_decode`.

    One buffer, grown in place, copies each value once (a list of parts joined at the
    end copied each twice).
    """
    out = bytearray()
    framed: list[Any] = []
    rest: list[Any] = []
    tenants: dict[bytes | None, bytes] = {None: b"null"}  # a header's JSON, once per tenant
    for msg in messages:
        value = msg.value() or b""
        if not value.startswith(b"{") or b"\n" in value:
            rest.append(msg)
            continue
        header = _tenant_header(msg)
        if header is not None and header not in tenants:
            tenants[header] = msgspec.json.encode(header.decode(errors="replace"))
        out += _FRAME % (msg.partition(), msg.offset(), tenants[header])
        out += memoryview(value)[1:]
        out += b"\n"
        framed.append(msg)
    return MessageBatch(messages, out, framed, rest)


@contextmanager
def _lines_file(batch: MessageBatch) -> Iterator[str]:
    """The framed lines in a temporary file, for ``read_json``; removed on exit."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        f.write(batch.lines)
        f.flush()
        yield f.name


def _batch_sql(topic: str) -> str:
    """The framed batch ``$files`` as ``predictions`` columns, with ``_p`` and ``_o`` and
    ``keep``: a valid record (the segment reader's ``ok``, ``_segments.rows_sql``) whose
    tenant header, if any, names the record's tenant. Strict like the segment reader: a
    line that is not JSON, or a value of the wrong type, raises ``duckdb.Error``."""
    source = f"read_json($files, format = 'newline_delimited', columns = {_KAFKA_COLUMNS})"
    quoted = _segment_prefix(topic).replace("'", "''")
    sql = rows_sql(source, f"'{quoted}' || _p || '@' || _o", ", _p, _o, _h")
    return f"SELECT *, ok AND coalesce(_h IS NULL OR _h = tenant, false) AS keep FROM ({sql})"


def _refused(batch: MessageBatch, refused: set[tuple[int, int]]) -> list[Any]:
    """The messages the reader refused (by partition and offset) or never saw (unframed),
    in the order consumed."""
    if not refused:
        return batch.rest
    unframed = {id(m) for m in batch.rest}
    return [m for m in batch.all if id(m) in unframed or (m.partition(), m.offset()) in refused]


def _load_whole_duckdb(
    conn: Connection, batch: MessageBatch, topic: str, now: datetime
) -> tuple[BatchCounts, list[Any]]:
    """One statement reads the batch with DuckDB's JSON reader and inserts the valid records
    whose key the table lacks, as a chunk of closed segments is loaded (decision 015): the
    counts, and the messages left for :func:`_decode` (refused by the reader, or unframed).

    It never hands the rows to Python: 2.8 s of CPU for 500,000 records here, against
    3.7 s to read them into Arrow and insert that. A value that is not JSON fails the
    statement, and DuckDB's transaction with it; a key twice in the batch raises
    :class:`NotWhole`. The caller then rolls back and writes the batch with
    :func:`_load_read`.
    """
    counts = BatchCounts()
    if not batch.messages:
        return counts, batch.rest
    raw = duckdb_connection(conn)
    sql = _batch_sql(topic)
    cols = ", ".join(COLUMNS)
    refused: set[tuple[int, int]] = set()
    with _lines_file(batch) as path:
        params = {"files": [path], "now": now}
        inserted = raw.execute(
            f"INSERT INTO predictions ({cols}) SELECT {cols} FROM ({sql}) AS i "
            f"WHERE keep AND NOT EXISTS ({KNOWN})",
            params,
        ).fetchone()
        counts.loaded = int(inserted[0]) if inserted else 0
        if not _keys_unique(raw, topic, now):
            raise NotWhole("a key twice in the batch")
        if counts.loaded < len(batch.messages):  # refused, replayed, or ids reused: read again
            found = raw.execute(f"SELECT _p, _o FROM ({sql}) WHERE NOT keep", params).fetchall()
            refused = {(int(p), int(o)) for p, o in found}
            if counts.loaded < len(batch.messages) - len(refused):
                kept = f"(SELECT * FROM ({sql}) WHERE keep)"
                reused = raw.execute(REUSED.format(source=kept), params).fetchone()
                counts.reused = int(reused[0]) if reused else 0
    counts.read = len(batch.messages) - len(refused)
    return counts, _refused(batch, refused)


def _keys_unique(raw: duckdb.DuckDBPyConnection, topic: str, now: datetime) -> bool:
    """Whether the rows the batch just added hold each (request_id, tenant, model, arm) once
    (``_sync._keys_unique`` for a chunk of segments: ``loaded_at`` first, for the zone maps)."""
    same = raw.execute(
        """
        SELECT count(*) = count(DISTINCT (request_id, tenant, model, arm)) FROM predictions
        WHERE loaded_at = CAST($now AS TIMESTAMP) AND starts_with(segment, $prefix)
        """,
        {"now": now, "prefix": _segment_prefix(topic)},
    ).fetchone()
    return bool(same and same[0])


def _load_read(
    conn: Connection, batch: MessageBatch, topic: str, now: datetime, dialect: Dialect
) -> tuple[BatchCounts, list[Any]]:
    """DuckDB's JSON reader, in a database of its own, reads the batch into Arrow; the valid
    records go in as a batch of msgspec-decoded records would (one row a key, COPY on
    PostgreSQL): the counts, and the messages left for :func:`_decode`.

    A batch the reader refuses (a value that is not JSON) goes to :func:`_decode` whole.
    Decoding every record with msgspec and building the Arrow columns in Python took
    1.6 × the CPU (300,000 records into PostgreSQL: 4.8 s against 3.0 s, the whole sync).
    """
    import duckdb
    import pyarrow.compute as pc

    counts = BatchCounts()
    if not batch.messages:
        return counts, batch.rest
    with _lines_file(batch) as path, duckdb.connect() as mem:
        try:
            rows = mem.sql(_batch_sql(topic), params={"files": [path], "now": now}).to_arrow_table()
        except duckdb.Error:
            return counts, list(batch.all)
    keep = rows.column("keep")
    good = rows.filter(keep).select(COLUMNS)
    refused = rows.filter(pc.invert(keep))
    bad = set(zip(refused.column("_p").to_pylist(), refused.column("_o").to_pylist(), strict=True))
    counts.read = good.num_rows
    if good.num_rows:
        counts.loaded = dialect.insert_predictions(conn, good)
        if counts.loaded < good.num_rows:
            counts.reused = dialect.reused_ids(conn, good)
    return counts, _refused(batch, bad)


def _refusal(record: PredictionRecord, header: bytes | None) -> str | None:
    """Why a decoded record is not loaded: unstorable, or a tenant header naming another tenant."""
    why = unstorable(record)
    if why is not None:
        return why
    if header is not None and header.decode(errors="replace") != record.tenant:
        return f"tenant header {header!r} does not match the record's tenant {record.tenant!r}"
    return None


def _insert_rows(conn: Connection, decoded: _Decoded, dialect: Dialect) -> tuple[int, int]:
    """Insert the batch's records (keys already loaded are kept out): (rows added, rows
    left out because another request had used their request id)."""
    if not decoded.records:
        return 0, 0
    now = datetime.now(UTC).replace(tzinfo=None)
    table = _to_arrow(decoded.records, decoded.segments, now)
    loaded = dialect.insert_predictions(conn, table)
    reused = dialect.reused_ids(conn, table) if loaded < table.num_rows else 0
    return loaded, reused


def _quarantine(conn: Connection, decoded: _Decoded) -> None:
    from mlpipe.warehouse._sync import quarantine_rows

    if not decoded.quarantine:
        return
    q = _schema.quarantine
    for line, _ in decoded.quarantine:
        conn.execute(q.delete().where(q.c.segment == line.segment, q.c.line == line.line))
    now = datetime.now(UTC).replace(tzinfo=None)
    conn.execute(q.insert(), quarantine_rows(decoded.quarantine, now))


def _write_batch(
    conn: Connection, batch: MessageBatch, topic: str, dialect: Dialect, whole: bool = False
) -> BatchCounts:
    """Insert a batch's records and quarantine the rest, in the caller's transaction:
    with one DuckDB statement where ``whole`` (:func:`_load_whole_duckdb`), else through
    Arrow (:func:`_load_read`); what DuckDB's reader refuses is decoded by msgspec, which
    names the fault."""
    now = datetime.now(UTC).replace(tzinfo=None)
    if whole:
        counts, rest = _load_whole_duckdb(conn, batch, topic, now)
    else:
        counts, rest = _load_read(conn, batch, topic, now, dialect)
    decoded = _decode(rest, topic)
    loaded, reused = _insert_rows(conn, decoded, dialect)
    _quarantine(conn, decoded)
    counts.read += len(decoded.records)
    counts.loaded += loaded
    counts.reused += reused
    counts.quarantined.extend(line for line, _ in decoded.quarantine)
    return counts


def _store(
    conn: Connection,
    batch: MessageBatch,
    topic: str,
    moves: dict[int, tuple[int | None, int]],
    dialect: Dialect,
) -> BatchCounts:
    """Write a batch and the positions after it in one transaction.

    On DuckDB the batch goes from the reader into the table in one statement; where
    that fails (a value that is not JSON aborts DuckDB's transaction; a key twice in
    the batch) the transaction is rolled back and the batch written again through Arrow.
    """
    import duckdb

    if dialect.loads_whole:
        try:
            with conn.begin():
                counts = _write_batch(conn, batch, topic, dialect, whole=True)
                _advance(conn, topic, moves)
            return counts
        except (duckdb.Error, NotWhole):
            pass  # rolled back: nothing of the batch landed
    with conn.begin():
        counts = _write_batch(conn, batch, topic, dialect)
        _advance(conn, topic, moves)
    return counts


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the span of one batch.

    A batch is up to ``kafka_sync_batch`` message objects, alive together, and a
    header list per message: the collections their allocations set off walked them
    again and again (full collections took 0.2-1.2 s of a 100,000-record batch,
    measured with ``gc.callbacks``). A batch makes no garbage that needs the
    collector; what it leaves is collected once the collector is back.
    """
    import gc

    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _mirror_to_kafka(consumer: Any, topic: str, positions: dict[int, int | None]) -> None:
    """Tell Kafka the group's position too, for its tools (never read back: best effort)."""
    from confluent_kafka import KafkaException, TopicPartition

    offsets = [TopicPartition(topic, p, o) for p, o in positions.items() if o is not None]
    if offsets:
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException:
            pass  # the warehouse holds the position; Kafka's copy is informational


class TopicReader:
    """One consumer of the prediction-log topic, loading batches into the warehouse.

    ``--follow`` opens a write connection for each batch (``warehouse.writer``):
    the warehouse is held only while a batch is written, so monitors can read
    it between batches (DuckDB admits one writer or several readers). A one-shot
    sync holds one connection throughout (:meth:`held`), as the segment sync does:
    opening the warehouse (its migration check included) and closing it cost
    ~0.07 s a batch.
    """

    def __init__(self, settings: Settings, notify: _engine.Notify | None = None) -> None:
        self.settings = settings
        self.topic = settings.predlog.kafka_topic
        self.notify = notify
        self.dialect = _dialects.dialect_for(settings.warehouse)
        self.positions: dict[int, int | None] = {}  # assigned partition -> warehouse position
        self._consumer, self._errors = _consumer(settings)
        self._held: Connection | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        """One write connection for every batch until exit (a one-shot sync)."""
        with _engine.writer(self.settings, self.notify) as conn:
            self._held = conn
            try:
                yield
            finally:
                self._held = None

    @contextmanager
    def _connect(self) -> Iterator[Connection]:
        if self._held is not None:
            yield self._held
            return
        with _engine.writer(self.settings, self.notify) as conn:
            yield conn

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        from confluent_kafka import OFFSET_BEGINNING

        with self._connect() as conn, conn.begin():
            stored = stored_positions(conn, self.topic)
        for tp in partitions:
            tp.offset = stored.get(tp.partition, OFFSET_BEGINNING)
            self.positions[tp.partition] = stored.get(tp.partition)
        consumer.assign(partitions)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        for tp in partitions:
            self.positions.pop(tp.partition, None)
        consumer.unassign()

    def partitions(self) -> list[int]:
        """The topic's partitions ([] if it does not exist); StoreUnavailable if unreachable."""
        from confluent_kafka import KafkaException

        try:
            meta = _topic_metadata(self._consumer, self._errors, self.topic)
        except KafkaException as exc:
            raise _unreachable(self.settings, self._consumer, self._errors, exc) from exc
        info = meta.topics.get(self.topic)
        if info is None or info.error is not None:
            return []
        return sorted(info.partitions)

    def assign_all(self, partitions: list[int]) -> None:
        """Read every partition directly, from the warehouse's positions (a one-shot sync).

        No group join: a one-shot sync never waits for a killed member's session
        to expire, and never takes partitions away from a ``--follow``
        consumer; the compare-and-swap in :func:`_advance` keeps the two apart.
        """
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        with self._connect() as conn, conn.begin():
            stored = stored_positions(conn, self.topic)
        self.positions = {p: stored.get(p) for p in partitions}
        self._consumer.assign(
            [TopicPartition(self.topic, p, stored.get(p, OFFSET_BEGINNING)) for p in partitions]
        )

    def subscribe(self) -> None:
        self._consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def ends(self, partitions: list[int]) -> dict[int, int]:
        """The high watermark of each partition (where a one-shot sync stops).

        Asked before the partitions are assigned: once they are, each query waited
        behind the fetches on the broker connection (~0.3 s a partition here).
        """
        from confluent_kafka import TopicPartition

        return {
            p: self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=_METADATA_TIMEOUT_S
            )[1]
            for p in partitions
        }

    def read_batch(self) -> MessageBatch:
        """Up to ``kafka_sync_batch`` messages, waiting up to ``kafka_sync_wait_s`` to fill
        the batch (errors other than a partition's end raise), framed for DuckDB's reader."""
        from confluent_kafka import KafkaError

        p = self.settings.predlog
        messages = self._consumer.consume(p.kafka_sync_batch, timeout=p.kafka_sync_wait_s)
        good = []
        for msg in messages:
            err = msg.error()
            if err is None:
                good.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                raise StoreUnavailable(f"reading Kafka topic {self.topic!r}: {err}")
        return _frame(good)

    def step(self, result: SyncResult) -> int:
        """Read one batch and load it (:meth:`load`): how many messages it held.

        Python's cyclic garbage collector is paused meanwhile (:func:`_collector_paused`);
        the batch's messages are gone before it runs again.
        """
        with _collector_paused():
            batch = self.read_batch()
            if not self.load(batch, result):
                self.seek_to_stored()
            return len(batch.all)

    def load(self, batch: MessageBatch, result: SyncResult) -> bool:
        """Write one batch and the position after it in one transaction; then tell Kafka.

        A batch whose partition another consumer advanced meanwhile is rolled back:
        False, and the caller seeks to the warehouse's positions again
        (:meth:`seek_to_stored`) before it reads on.
        """
        if not batch.all:
            return True
        moves = _moves(batch.all, self.positions)
        try:
            with self._connect() as conn:
                counts = _store(conn, batch, self.topic, moves, self.dialect)
        except PositionMoved:
            return False
        for partition, (_, new) in moves.items():
            if partition in self.positions:
                self.positions[partition] = new
        result.rows_read += counts.read
        result.rows_loaded += counts.loaded
        result.reused_ids += counts.reused
        result.skipped.extend(counts.quarantined)
        result.quarantined += len(counts.quarantined)
        result.kafka_records += len(batch.all)
        _mirror_to_kafka(self._consumer, self.topic, self.positions)
        return True

    def seek_to_stored(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        with self._connect() as conn, conn.begin():
            stored = stored_positions(conn, self.topic)
        for partition in list(self.positions):
            offset = stored.get(partition, OFFSET_BEGINNING)
            self._consumer.seek(TopicPartition(self.topic, partition, offset))
            self.positions[partition] = stored.get(partition)

    def caught_up(self, ends: dict[int, int], batch: MessageBatch | None = None) -> bool:
        """Whether every partition is loaded up to ``ends``, or will be once ``batch`` is."""
        after = _moves(batch.all, self.positions) if batch is not None else {}
        return all(
            max(self.positions.get(p) or 0, after[p][1] if p in after else 0) >= end
            for p, end in ends.items()
        )

    def close(self) -> None:
        self._consumer.close()


def load_topic(settings: Settings, result: SyncResult, notify: _engine.Notify | None) -> None:
    """One-shot: load every record the topic holds now (up to each partition's end), then stop.

    The next batch is read and framed on a thread of its own while this one is
    written (DuckDB works outside the GIL), and the cyclic garbage collector is
    paused for the run (:func:`_collector_paused`).
    """
    from concurrent.futures import Future, ThreadPoolExecutor

    reader = TopicReader(settings, notify)
    try:
        partitions = reader.partitions()
        if not partitions:
            return
        ends = reader.ends(partitions)
        stall = max(30.0, settings.predlog.kafka_timeout_s * 6)
        with (
            reader.held(),
            _collector_paused(),
            ThreadPoolExecutor(1, thread_name_prefix="mlpipe-kafka-read") as ahead,
        ):
            reader.assign_all(partitions)
            progress = time.monotonic()
            upcoming: Future[MessageBatch] | None = None
            if not reader.caught_up(ends):
                upcoming = ahead.submit(reader.read_batch)
            while upcoming is not None:
                batch = upcoming.result()
                last = reader.caught_up(ends, batch)  # nothing to read after this batch
                upcoming = None if last else ahead.submit(reader.read_batch)
                if not reader.load(batch, result):  # another consumer moved a partition
                    if upcoming is not None:
                        upcoming.result()  # read from the old positions: dropped
                    reader.seek_to_stored()
                    upcoming = ahead.submit(reader.read_batch)
                if batch.all:
                    progress = time.monotonic()
                elif time.monotonic() - progress > stall:
                    raise StoreUnavailable(
                        f"Kafka topic {reader.topic!r} gave no record for {stall:.0f}s before "
                        "its end (broker down?); what was loaded is kept, the next sync goes on "
                        "from there"
                    )
    finally:
        reader.close()
    result.kafka_lag = topic_lag(settings)


def follow(
    settings: Settings,
    result: SyncResult,
    stop: Callable[[], bool],
    on_batch: Callable[[SyncResult], None] | None = None,
    notify: _engine.Notify | None = None,
) -> None:
    """Load batches as they arrive until ``stop()`` is true (``warehouse sync --follow``)."""
    reader = TopicReader(settings, notify)
    try:
        reader.subscribe()
        while not stop():
            reader.step(result)
            if on_batch is not None:
                on_batch(result)
    finally:
        reader.close()


def topic_lag(settings: Settings) -> list[PartitionLag]:
    """Per partition of the topic: the warehouse's position, the end, and the lag.

    Raises :class:`StoreUnavailable` when the broker cannot be reached. A topic
    that does not exist yet has no partitions (an empty list).
    """
    from confluent_kafka import KafkaException, TopicPartition

    topic = settings.predlog.kafka_topic
    consumer, errors = _consumer(settings)
    try:
        try:
            meta = _topic_metadata(consumer, errors, topic)
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                return []
            bounds = {
                p: consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=_METADATA_TIMEOUT_S
                )
                for p in sorted(info.partitions)
            }
        except KafkaException as exc:
            raise _unreachable(settings, consumer, errors, exc) from exc
    finally:
        consumer.close()
    with _engine.read(settings) as conn:
        stored = stored_positions(conn, topic)
    return [
        PartitionLag.of(topic, p, stored.get(p, 0), low, high) for p, (low, high) in bounds.items()
    ]
