"""A batch of Kafka records into the warehouse, without a broker: framed for DuckDB's reader,
stored with the partitions' positions in one transaction, the bad records quarantined."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mlpipe.config import Settings
from mlpipe.predlog import ENCODER, TENANT_HEADER
from mlpipe.warehouse import _engine
from mlpipe.warehouse._dialects import dialect_for
from mlpipe.warehouse._kafka import PositionMoved, _frame, _moves, _store, stored_positions
from tests.unit.warehouse.logged import records

TOPIC = "predictions"


@dataclass
class Message:
    """What the warehouse reads of a consumed ``confluent_kafka.Message``."""

    p: int
    o: int
    v: bytes | None
    h: list[tuple[str, bytes]] | None = None

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def value(self) -> bytes | None:
        return self.v

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self.h


def _batch() -> list[Message]:
    good = [ENCODER.encode(r) for r in records(3)]
    other = ENCODER.encode(records(1, "x")[0])
    return [
        Message(0, 0, good[0], [(TENANT_HEADER, b"t")]),
        Message(0, 1, good[1]),
        Message(1, 0, b"not json"),
        Message(0, 2, good[2]),
        Message(1, 1, other, [(TENANT_HEADER, b"someone-else")]),
    ]


def test_one_line_json_values_are_framed_and_the_rest_left_in_order() -> None:
    messages = [Message(0, 0, b'{"a": 1}'), Message(0, 1, b"[1]"), Message(0, 2, b'{"a":\n1}')]
    batch = _frame(messages)
    assert batch.messages == messages[:1]
    assert batch.rest == messages[1:]
    assert bytes(batch.lines) == b'{"_p":0,"_o":0,"_h":null,"a": 1}\n'


def test_moves_go_from_the_stored_position_to_after_the_last_offset() -> None:
    assert _moves(_batch(), {0: 0}) == {0: (0, 3), 1: (None, 2)}


def test_a_batch_is_stored_with_its_positions_and_its_bad_records_quarantined(
    settings: Settings,
) -> None:
    messages = _batch()
    dialect = dialect_for(settings.warehouse)
    with _engine.writer(settings) as conn:
        counts = _store(conn, _frame(messages), TOPIC, _moves(messages, {}), dialect)
        with conn.begin():
            assert stored_positions(conn, TOPIC) == {0: 3, 1: 2}
    assert (counts.read, counts.loaded, counts.reused) == (3, 3, 0)
    reasons = sorted((q.segment, q.line, q.kind) for q in counts.quarantined)
    assert reasons == [
        ("kafka:predictions/1", 0, "not a record"),
        ("kafka:predictions/1", 1, "cannot be stored"),
    ]
    # another consumer's batch that expected no position yet is refused, nothing written
    with _engine.writer(settings) as conn, pytest.raises(PositionMoved):
        _store(conn, _frame(messages), TOPIC, _moves(messages, {}), dialect)
    # read again from the stored positions: a replay adds nothing
    with _engine.writer(settings) as conn:
        again = _store(conn, _frame(messages), TOPIC, _moves(messages, {0: 3, 1: 2}), dialect)
    assert (again.read, again.loaded) == (3, 0)
