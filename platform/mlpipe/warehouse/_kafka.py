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
from mlpipe.predlog import DECODER, TENANT_HEADER, PredictionRecord
from mlpipe.warehouse import _engine, _schema
from mlpipe.warehouse._segments import (
    _JSON_COLUMNS,
    CANNOT_STORE,
    COLUMNS,
    NOT_A_RECORD,
    SkippedLine,
    _to_arrow,
    rows_sql,
    unstorable,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from mlpipe.config import Settings
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
    """Per partition of the batch: (the position expected in the warehouse, the one after)."""
    moves: dict[int, tuple[int | None, int]] = {}
    for msg in messages:
        partition = msg.partition()
        expected = moves[partition][0] if partition in moves else positions.get(partition)
        moves[partition] = (expected, msg.offset() + 1)
    return moves


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


def _load_whole_duckdb(
    conn: Connection, messages: Sequence[Any], topic: str, now: datetime
) -> tuple[BatchCounts, list[Any]]:
    """DuckDB's JSON reader loads the batch as it loads segments (decision 015): the counts,
    and the messages it did not take, for :func:`_decode` to name or load.

    Each value is written as one line of a temporary file with its partition, offset
    and tenant header put in front (``_p``, ``_o``, ``_h``), read with the segment
    reader's strict columns, and checked by the same ``ok`` expression. A batch the
    reader refuses (a value that is not JSON) goes to :func:`_decode` whole.
    """
    import tempfile

    import duckdb
    import pyarrow.compute as pc

    from mlpipe.warehouse._sync import _insert_duckdb, _reused_ids

    parts: list[bytes] = []  # per record: its framing, then its value after the "{"
    rest = []
    tenants: dict[bytes | None, bytes] = {None: b"null"}  # a header's JSON, once per tenant
    for msg in messages:
        value = msg.value() or b""
        if not value.startswith(b"{") or b"\n" in value:
            rest.append(msg)
            continue
        header = _tenant_header(msg)
        if header is not None and header not in tenants:
            tenants[header] = msgspec.json.encode(header.decode(errors="replace"))
        parts.append(
            b'{"_p":%d,"_o":%d,"_h":%s,' % (msg.partition(), msg.offset(), tenants[header])
        )
        parts.append(value[1:] + b"\n")
    counts = BatchCounts()
    if not parts:
        return counts, rest
    raw = _engine.duckdb_connection(conn)
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        f.write(b"".join(parts))
        f.flush()
        source = f"read_json($files, format = 'newline_delimited', columns = {_KAFKA_COLUMNS})"
        quoted = _segment_prefix(topic).replace("'", "''")
        sql = rows_sql(source, f"'{quoted}' || _p || '@' || _o", ", _p, _o, _h")
        # loaded: a valid record whose tenant header, if any, names the record's tenant
        sql = f"SELECT *, ok AND coalesce(_h IS NULL OR _h = tenant, false) AS keep FROM ({sql})"
        try:
            rows = raw.sql(sql, params={"files": [f.name], "now": now}).to_arrow_table()
        except duckdb.Error:
            return counts, list(messages)
    ok = rows.column("keep")
    good = rows.filter(ok).select(COLUMNS)
    refused = rows.filter(pc.invert(ok))
    bad = set(zip(refused.column("_p").to_pylist(), refused.column("_o").to_pylist(), strict=True))
    rest += [m for m in messages if (m.partition(), m.offset()) in bad]
    counts.read = good.num_rows
    counts.loaded = _insert_duckdb(conn, good) if good.num_rows else 0
    if counts.loaded < good.num_rows:
        counts.reused = _reused_ids(conn, good)
    return counts, rest


def _refusal(record: PredictionRecord, header: bytes | None) -> str | None:
    """Why a decoded record is not loaded: unstorable, or a tenant header naming another tenant."""
    why = unstorable(record)
    if why is not None:
        return why
    if header is not None and header.decode(errors="replace") != record.tenant:
        return f"tenant header {header!r} does not match the record's tenant {record.tenant!r}"
    return None


def _insert_rows(conn: Connection, decoded: _Decoded, on_duckdb: bool) -> tuple[int, int]:
    """Insert the batch's records (keys already loaded are kept out): (rows added, rows
    left out because another request had used their request id)."""
    from mlpipe.warehouse._sync import _insert_duckdb, _insert_generic, _reused_ids

    if not decoded.records:
        return 0, 0
    now = datetime.now(UTC).replace(tzinfo=None)
    table = _to_arrow(decoded.records, decoded.segments, now)
    loaded = (_insert_duckdb if on_duckdb else _insert_generic)(conn, table)
    reused = _reused_ids(conn, table) if loaded < table.num_rows else 0
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
    conn: Connection, messages: Sequence[Any], topic: str, on_duckdb: bool
) -> BatchCounts:
    """Insert a batch's records and quarantine the rest, in the caller's transaction."""
    now = datetime.now(UTC).replace(tzinfo=None)
    counts, rest = BatchCounts(), list(messages)
    if on_duckdb:
        counts, rest = _load_whole_duckdb(conn, messages, topic, now)
    decoded = _decode(rest, topic)
    loaded, reused = _insert_rows(conn, decoded, on_duckdb)
    _quarantine(conn, decoded)
    counts.read += len(decoded.records)
    counts.loaded += loaded
    counts.reused += reused
    counts.quarantined.extend(line for line, _ in decoded.quarantine)
    return counts


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

    ``connect`` opens a write connection for one batch (``warehouse.writer``):
    the warehouse is held only while a batch is written, so monitors can read
    it between batches (DuckDB admits one writer or several readers).
    """

    def __init__(self, settings: Settings, notify: _engine.Notify | None = None) -> None:
        from confluent_kafka import Consumer

        self.settings = settings
        self.topic = settings.predlog.kafka_topic
        self.notify = notify
        self.on_duckdb = _engine.is_duckdb(settings.warehouse)
        self.positions: dict[int, int | None] = {}  # assigned partition -> warehouse position
        self._consumer = Consumer(consumer_config(settings))

    @contextmanager
    def _connect(self) -> Iterator[Connection]:
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
            meta = self._consumer.list_topics(self.topic, timeout=_METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise StoreUnavailable(
                f"Kafka at {self.settings.predlog.kafka_bootstrap} unreachable: {exc}"
            ) from exc
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

    def ends(self) -> dict[int, int]:
        """The high watermark of every assigned partition (where a one-shot sync stops)."""
        from confluent_kafka import TopicPartition

        return {
            p: self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=_METADATA_TIMEOUT_S
            )[1]
            for p in list(self.positions)
        }

    def poll_batch(self) -> list[Any]:
        """Up to ``kafka_sync_batch`` messages, waiting up to ``kafka_sync_wait_s`` to fill
        the batch (errors other than a partition's end raise)."""
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
        return good

    def load(self, messages: Sequence[Any], result: SyncResult) -> None:
        """Write one batch and the position after it in one transaction; then tell Kafka.

        A batch whose partition another consumer advanced meanwhile is rolled
        back, and the partitions seek to the warehouse's positions again.
        """
        if not messages:
            return
        moves = _moves(messages, self.positions)
        try:
            with self._connect() as conn, conn.begin():
                counts = _write_batch(conn, messages, self.topic, self.on_duckdb)
                _advance(conn, self.topic, moves)
        except PositionMoved:
            self._seek_to_stored()
            return
        for partition, (_, new) in moves.items():
            if partition in self.positions:
                self.positions[partition] = new
        result.rows_read += counts.read
        result.rows_loaded += counts.loaded
        result.reused_ids += counts.reused
        result.skipped.extend(counts.quarantined)
        result.quarantined += len(counts.quarantined)
        result.kafka_records += len(messages)
        _mirror_to_kafka(self._consumer, self.topic, self.positions)

    def _seek_to_stored(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        with self._connect() as conn, conn.begin():
            stored = stored_positions(conn, self.topic)
        for partition in list(self.positions):
            offset = stored.get(partition, OFFSET_BEGINNING)
            self._consumer.seek(TopicPartition(self.topic, partition, offset))
            self.positions[partition] = stored.get(partition)

    def caught_up(self, ends: dict[int, int]) -> bool:
        return all((self.positions.get(p) or 0) >= end for p, end in ends.items())

    def close(self) -> None:
        self._consumer.close()


def load_topic(settings: Settings, result: SyncResult, notify: _engine.Notify | None) -> None:
    """One-shot: load every record the topic holds now (up to each partition's end), then stop."""
    reader = TopicReader(settings, notify)
    try:
        partitions = reader.partitions()
        if not partitions:
            return
        reader.assign_all(partitions)
        ends = reader.ends()
        stall = max(30.0, settings.predlog.kafka_timeout_s * 6)
        progress = time.monotonic()
        while not reader.caught_up(ends):
            messages = reader.poll_batch()
            reader.load(messages, result)
            if messages:
                progress = time.monotonic()
            elif time.monotonic() - progress > stall:
                raise StoreUnavailable(
                    f"Kafka topic {reader.topic!r} gave no record for {stall:.0f}s before its "
                    "end (broker down?); what was loaded is kept, the next sync goes on from there"
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
            reader.load(reader.poll_batch(), result)
            if on_batch is not None:
                on_batch(result)
    finally:
        reader.close()


def topic_lag(settings: Settings) -> list[PartitionLag]:
    """Per partition of the topic: the warehouse's position, the end, and the lag.

    Raises :class:`StoreUnavailable` when the broker cannot be reached. A topic
    that does not exist yet has no partitions (an empty list).
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    topic = settings.predlog.kafka_topic
    consumer = Consumer(consumer_config(settings))
    try:
        try:
            meta = consumer.list_topics(topic, timeout=_METADATA_TIMEOUT_S)
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
            raise StoreUnavailable(
                f"Kafka at {settings.predlog.kafka_bootstrap} unreachable: {exc}"
            ) from exc
    finally:
        consumer.close()
    with _engine.read(settings) as conn:
        stored = stored_positions(conn, topic)
    return [
        PartitionLag.of(topic, p, stored.get(p, 0), low, high) for p, (low, high) in bounds.items()
    ]
