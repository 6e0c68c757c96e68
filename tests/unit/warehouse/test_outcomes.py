"""Labels loaded and matched to logged predictions: all rows match or none load, a file
loaded twice changes nothing, a label changed replaces the old one."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput, NotFound
from mlpipe.warehouse import _schema
from tests.unit.warehouse.logged import records, write_segment


def _labels(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _outcomes(settings: Settings) -> list[tuple[str, float | None, str]]:
    o = _schema.outcomes
    with warehouse.read(settings) as conn:
        rows = conn.execute(
            sa.select(o.c.request_id, o.c.outcome, o.c.outcome_label).order_by(o.c.request_id)
        ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def test_labels_by_request_id_load_once_and_a_change_replaces(
    settings: Settings, tmp_path: Path
) -> None:
    write_segment(settings, "s.jsonl", records(3))
    warehouse.sync(settings)
    first = _labels(tmp_path / "l.csv", "request_id,label\nr0,1\nr1,setosa\n")
    result = warehouse.load_outcomes(settings, first)
    assert (result.rows, result.matched_by, result.inserted, result.replaced) == (
        2,
        "request_id",
        2,
        0,
    )
    assert _outcomes(settings) == [("r0", 1.0, "1"), ("r1", None, "setosa")]
    again = warehouse.load_outcomes(settings, first)
    assert (again.inserted, again.replaced, again.unchanged) == (0, 0, 2)
    changed = _labels(tmp_path / "l2.csv", "request_id,label\nr0,0\n")
    assert warehouse.load_outcomes(settings, changed).replaced == 1
    assert _outcomes(settings)[0] == ("r0", 0.0, "0")


def test_a_file_with_an_unlogged_id_loads_nothing(settings: Settings, tmp_path: Path) -> None:
    write_segment(settings, "s.jsonl", records(1))
    warehouse.sync(settings)
    path = _labels(tmp_path / "l.csv", "request_id,label\nr0,1\nnope,1\n")
    with pytest.raises(InvalidInput) as caught:
        warehouse.load_outcomes(settings, path)
    assert str(caught.value) == (
        "1 request id(s) not in the warehouse (first: nope); "
        "run `mlpipe warehouse sync` first, or check the file"
    )
    assert _outcomes(settings) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "request_id,label,extra\nr0,1,x\n",
            "unknown column(s) extra; accepted: request_id, label  or  entity_key, timestamp, "
            "label (and tenant)",
        ),
        ("request_id\nr0\n", "no 'label' column"),
        ("label\n1\n", "needs a 'request_id' column, or 'entity_key' and 'timestamp'"),
        ("request_id,label\nr0,\n", "label on data row 1 is missing"),
        ("request_id,label\nr0,inf\n", "label on data row 1 is 'inf', not a finite number"),
        (
            "entity_key,timestamp,label\ncustomer_id=1,soon,1\n",
            "timestamp on data row 1 ('soon') is not a date-time",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_the_fault(tmp_path: Path, text: str, message: str) -> None:
    path = _labels(tmp_path / "l.csv", text)
    settings = Settings(home=tmp_path)
    with pytest.raises(InvalidInput) as caught:
        warehouse.load_outcomes(settings, path)
    assert str(caught.value) == f"{path}: {message}"


def test_a_missing_file_or_another_format_is_refused(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    with pytest.raises(NotFound) as missing:
        warehouse.load_outcomes(settings, tmp_path / "none.csv")
    assert str(missing.value) == f"outcomes file {tmp_path / 'none.csv'} does not exist"
    json_file = _labels(tmp_path / "l.json", "{}")
    with pytest.raises(InvalidInput) as other:
        warehouse.load_outcomes(settings, json_file)
    assert str(other.value) == f"{json_file}: outcomes must be .csv or .parquet, not .json"
