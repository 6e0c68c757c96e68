"""The prediction-log row: the JSON line a request leaves behind, and what reads back."""

from __future__ import annotations

import json
from collections.abc import Callable

import msgspec
import pytest

from mlpipe.predlog import DECODER, ENCODER, PredictionRecord


def test_a_row_round_trips_through_its_json_line(
    make_record: Callable[[int], PredictionRecord],
) -> None:
    record = make_record(7)
    assert DECODER.decode(ENCODER.encode(record)) == record


def test_every_field_is_written_defaults_included(
    make_record: Callable[[int], PredictionRecord],
) -> None:
    line = json.loads(ENCODER.encode(make_record(1)))
    assert list(line) == list(PredictionRecord.__struct_fields__)
    defaults = ("feature_cache_hit", "prediction_cache_hit", "features_missing", "status")
    assert [line[k] for k in (*defaults, "probabilities")] == [False, False, [], "ok", None]


def test_a_row_written_before_tasks_reads_back_as_a_binary_one(
    make_record: Callable[[int], PredictionRecord],
) -> None:
    line = json.loads(ENCODER.encode(make_record(1)))
    for newer in ("probabilities", "status", "features_missing"):
        del line[newer]
    record = DECODER.decode(json.dumps(line).encode())
    assert (record.probabilities, record.status, record.features_missing) == (None, "ok", [])
    assert (record.score, record.label) == (0.5, 1)


def test_a_multiclass_and_a_regression_row(make_record: Callable[[int], PredictionRecord]) -> None:
    base = make_record(1)
    multiclass = msgspec.structs.replace(base, score=0.7, label=2, probabilities=[0.1, 0.2, 0.7])
    regression = msgspec.structs.replace(base, score=41.5, label=None)
    for record in (multiclass, regression):
        assert DECODER.decode(ENCODER.encode(record)) == record


def test_an_unknown_arm_or_status_is_refused_naming_the_field(
    make_record: Callable[[int], PredictionRecord],
) -> None:
    line = json.loads(ENCODER.encode(make_record(1)))
    with pytest.raises(msgspec.ValidationError, match=r"at `\$\.arm`"):
        DECODER.decode(json.dumps({**line, "arm": "blue"}).encode())
    with pytest.raises(msgspec.ValidationError, match=r"at `\$\.status`"):
        DECODER.decode(json.dumps({**line, "status": "maybe"}).encode())


def test_a_line_missing_a_required_field_is_refused(
    make_record: Callable[[int], PredictionRecord],
) -> None:
    line = json.loads(ENCODER.encode(make_record(1)))
    del line["generation"]
    with pytest.raises(msgspec.ValidationError, match="missing required field `generation`"):
        DECODER.decode(json.dumps(line).encode())


def test_a_row_is_frozen(make_record: Callable[[int], PredictionRecord]) -> None:
    record = make_record(1)
    with pytest.raises(AttributeError):
        record.score = 0.9  # type: ignore[misc]
    assert record.score == 0.5
