"""Which records the warehouse cannot store, and how the segment reader reports them (issue 23)."""

from __future__ import annotations

import time

import msgspec
import pytest

from mlpipe.predlog import ENCODER, PredictionRecord
from mlpipe.warehouse import SkippedLine, parse_segment
from mlpipe.warehouse._segments import CANNOT_STORE, unstorable


def _record(**changes: object) -> PredictionRecord:
    record = PredictionRecord(
        request_id="r1",
        ts=time.time(),
        tenant="acme",
        model="fraud",
        version="1",
        arm="champion",
        generation=1,
        entity_key="customer_id=1",
        entity={"customer_id": 1},
        features={"amount": 1.0},
        score=0.5,
        label=1,
        latency_ms=1.0,
    )
    return msgspec.structs.replace(record, **changes)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"request_id": "a\x00b"}, "request_id holds a NUL byte"),
        ({"tenant": "\x00"}, "tenant holds a NUL byte"),
        ({"entity_key": "customer_id=\x00"}, "entity_key holds a NUL byte"),
        ({"generation": 2**31}, "generation 2147483648 is outside the warehouse's INTEGER range"),
        ({"label": -(2**31) - 1}, "label -2147483649 is outside the warehouse's INTEGER range"),
        ({"ts": 1e13}, "ts 10000000000000.0 is outside the years 1-9999"),
    ],
)
def test_a_value_no_column_can_hold_is_named(changes: dict[str, object], reason: str) -> None:
    assert unstorable(_record(**changes)) == reason


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"generation": 2**31 - 1, "label": -(2**31)},
        {"entity": {"customer_id": 2**64}, "features": {"a\x00": None}},  # JSON text: stored
        {"request_id": "tab\tand é"},  # other control characters are the gateway's to refuse
        {"ts": 0.0},
        {"label": None, "score": 1e300},  # a regression: no label, any predicted value
        {"label": 2, "probabilities": [0.1, 0.2, 0.7]},  # multiclass
    ],
)
def test_values_the_columns_hold_pass(changes: dict[str, object]) -> None:
    assert unstorable(_record(**changes)) is None


def test_parse_segment_skips_an_unstorable_record_and_keeps_its_line() -> None:
    bad = ENCODER.encode(_record(request_id="x\x00"))
    data = ENCODER.encode(_record()) + b"\n" + bad + b"\n" + ENCODER.encode(_record(label=2**40))
    parsed = parse_segment(data, "w1-1.jsonl")
    assert [r.request_id for r in parsed.records] == ["r1"]
    assert parsed.skipped == [
        SkippedLine("w1-1.jsonl", 2, "request_id holds a NUL byte", CANNOT_STORE),
        SkippedLine(
            "w1-1.jsonl",
            3,
            "label 1099511627776 is outside the warehouse's INTEGER range",
            CANNOT_STORE,
        ),
    ]
    assert parsed.lines[2] == bad
