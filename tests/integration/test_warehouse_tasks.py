"""Task types in the warehouse (issue 21, item 4): binary, multiclass and regression rows.

``predictions`` keeps a multiclass row's class probabilities and a regression
row's missing label; ``outcomes`` keeps a label as the file gave it (a class
name, a class number, a numeric target) beside its number. Each test runs on a
DuckDB file and on a real PostgreSQL.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pandas as pd
import pytest

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.predlog import PredictionRecord
from mlpipe.warehouse import _schema, _sync
from tests.conftest import run_in_process
from tests.integration.prod_services import either_warehouse  # noqa: F401 - `settings`
from tests.integration.test_warehouse_tenants import START, _record, _write
from tests.integration.warehouse_past import unpartition_predictions

pytestmark = pytest.mark.integration

PROBS = [0.1, 0.2, 0.7]


def _three_tasks(prefix: str) -> list[PredictionRecord]:
    """One row of each task: binary ``{prefix}b``, multiclass ``{prefix}m``, regression
    ``{prefix}r``."""
    return [
        _record(f"{prefix}b", "acme", 1, score=0.8, label=1),
        _record(f"{prefix}m", "acme", 2, model="iris", score=0.7, label=2, probabilities=PROBS),
        _record(f"{prefix}r", "acme", 3, model="price", score=3.25, label=None),
    ]


def _stored(settings: Settings) -> dict[str, tuple[float, int | None, str | None]]:
    sql = "SELECT request_id, score, label, probabilities FROM predictions"
    return {r[0]: (r[1], r[2], r[3]) for r in warehouse.query(settings, sql).rows}


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("a clean chunk went through the row-checking path")


def test_sync_loads_the_three_tasks_by_every_path_alike(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = settings.predlog_path
    _write(root / "w1" / "clean.jsonl", _three_tasks("a"))  # one statement (DuckDB)
    _write(root / "w1" / "seg.jsonl.open", _three_tasks("o"))  # decoded line by line
    with monkeypatch.context() as m:
        if settings.warehouse.startswith("duckdb"):  # the clean segment skips the row checks
            m.setattr(_sync, "read_chunk", _refuse)
        assert warehouse.sync(settings).rows_loaded == 6
    # a line that parses but is not a record: its segment is decoded line by line, and the
    # clean segment of the same chunk goes through DuckDB's reader into Arrow
    _write(root / "w2" / "arrow.jsonl", _three_tasks("w"))
    bad = root / "w2" / "bad.jsonl"
    _write(bad, _three_tasks("x"))
    bad.write_bytes(bad.read_bytes() + b'{"request_id": "x9", "arm": "blue"}\n')
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.rows_total) == (6, 12)
    assert [(s.segment, s.line) for s in result.skipped] == [("w2/bad.jsonl", 4)]
    stored = _stored(settings)
    for prefix in "aowx":
        assert stored[f"{prefix}b"] == (0.8, 1, None), prefix
        assert stored[f"{prefix}m"] == (0.7, 2, "[0.1,0.2,0.7]"), prefix
        assert stored[f"{prefix}r"] == (3.25, None, None), prefix
    assert warehouse.sync(settings).rows_loaded == 0


def test_a_window_reads_probabilities_and_a_missing_label(settings: Settings) -> None:
    _write(settings.predlog_path / "seg.jsonl", _three_tasks("a") + _three_tasks("b"))
    warehouse.sync(settings)

    def window(model: str) -> pd.DataFrame:
        rows = warehouse.prediction_window(settings, model, _at(-60), _at(600)).rows
        return rows.set_index("request_id")

    binary, multi, regression = window("fraud"), window("iris"), window("price")
    assert binary["label"].tolist() == [1, 1]
    assert binary["label"].dtype.kind == "i"
    assert binary["probabilities"].tolist() == [None, None]
    assert multi["probabilities"].tolist() == [PROBS, PROBS]
    assert multi["label"].tolist() == [2, 2]
    assert regression["label"].isna().all() and regression["label"].dtype == "float64"
    assert regression["score"].tolist() == [3.25, 3.25]
    assert regression["outcome_label"].tolist() == [None, None]
    assert regression["outcome"].isna().all()


def _at(offset_s: float) -> datetime:
    """``START`` + ``offset_s`` as the warehouse's naive UTC."""
    return datetime.fromtimestamp(START + offset_s, UTC).replace(tzinfo=None)


def _outcomes(settings: Settings) -> list[tuple[str, float | None, str]]:
    sql = "SELECT request_id, outcome, outcome_label FROM outcomes ORDER BY request_id"
    return [tuple(r) for r in warehouse.query(settings, sql).rows]  # type: ignore[misc]


@pytest.fixture
def logged(settings: Settings) -> Settings:
    """Settings whose warehouse holds ``a*`` and ``b*`` rows of the three tasks."""
    _write(settings.predlog_path / "seg.jsonl", _three_tasks("a") + _three_tasks("b"))
    warehouse.sync(settings)
    return settings


def test_outcomes_keep_class_names_class_numbers_and_targets(
    logged: Settings, tmp_path: Path
) -> None:
    settings = logged
    labels = tmp_path / "labels.csv"
    labels.write_text("request_id,label\nab,1\nam,setosa\nar,2.50\nbm,2\nbr,-1e3\n")
    first = warehouse.load_outcomes(settings, labels)
    assert (first.inserted, first.replaced) == (5, 0)
    expected = [
        ("ab", 1.0, "1"),
        ("am", None, "setosa"),
        ("ar", 2.5, "2.50"),
        ("bm", 2.0, "2"),
        ("br", -1000.0, "-1e3"),
    ]
    assert _outcomes(settings) == expected
    again = warehouse.load_outcomes(settings, labels)  # the same file twice changes nothing
    assert (again.inserted, again.replaced, again.unchanged) == (0, 0, 5)
    assert _outcomes(settings) == expected
    relabelled = tmp_path / "relabelled.csv"
    relabelled.write_text("request_id,label\nab,0\nam,setosa\n")
    changed = warehouse.load_outcomes(settings, relabelled)
    assert (changed.inserted, changed.replaced, changed.unchanged) == (0, 1, 1)
    assert _outcomes(settings)[0] == ("ab", 0.0, "0")
    relabelled.write_text("request_id,label\nab,1\n")
    warehouse.load_outcomes(settings, relabelled)
    window = warehouse.prediction_window(settings, "iris", _at(-60), _at(600)).rows
    by_id = window.set_index("request_id")
    assert by_id.loc["am", "outcome_label"] == "setosa" and math.isnan(by_id.loc["am", "outcome"])
    assert (by_id.loc["bm", "outcome_label"], by_id.loc["bm", "outcome"]) == ("2", 2.0)


def test_outcomes_from_parquet_floats_and_strings(logged: Settings, tmp_path: Path) -> None:
    settings = logged
    targets = tmp_path / "targets.parquet"
    pd.DataFrame({"request_id": ["ar", "br"], "label": [2.5, 1.0]}).to_parquet(targets)
    classes = tmp_path / "classes.parquet"
    pd.DataFrame({"request_id": ["am", "bm"], "label": ["setosa", "virginica"]}).to_parquet(classes)
    assert warehouse.load_outcomes(settings, targets).inserted == 2
    assert warehouse.load_outcomes(settings, classes).inserted == 2
    assert _outcomes(settings) == [
        ("am", None, "setosa"),
        ("ar", 2.5, "2.5"),
        ("bm", None, "virginica"),
        ("br", 1.0, "1.0"),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("request_id,label\nab,1\nam,\n", "label on data row 2 is missing"),
        ("request_id,label\nam,setosa\nar,NaN\n", "label on data row 2 is missing"),
        ("request_id,label\nar,-inf\n", "label on data row 1 is '-inf', not a finite number"),
    ],
)
def test_outcomes_load_refuses_a_missing_label_and_writes_nothing(
    logged: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: str,
    message: str,
) -> None:
    settings = logged
    monkeypatch.setenv("MLPIPE_HOME", str(settings.home))
    monkeypatch.setenv("MLPIPE_WAREHOUSE_URL", settings.warehouse)
    labels = tmp_path / "labels.csv"
    labels.write_text(content)
    code, out, err = run_in_process(monkeypatch, capsys, "outcomes", "load", str(labels))
    assert code == 2 and out == ""
    assert err.strip() == f"error: {labels}: {message}"
    assert _outcomes(settings) == []


def test_warehouse_query_shows_the_new_columns(
    logged: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLPIPE_HOME", str(logged.home))
    monkeypatch.setenv("MLPIPE_WAREHOUSE_URL", logged.warehouse)
    sql = "SELECT request_id, label, probabilities FROM predictions WHERE request_id LIKE 'a%'"
    code, out, _ = run_in_process(monkeypatch, capsys, "warehouse", "query", sql, "--json")
    assert code == 0
    rows = sorted(msgspec.json.decode(out)["rows"], key=lambda r: r["request_id"])
    assert rows == [
        {"request_id": "ab", "label": 1, "probabilities": None},
        {"request_id": "am", "label": 2, "probabilities": "[0.1,0.2,0.7]"},
        {"request_id": "ar", "label": None, "probabilities": None},
    ]


_OLD_ROWS = "SELECT request_id, ts, score, label, features FROM predictions ORDER BY 1"


def _back_to_migration_6(settings: Settings) -> list[tuple[object, ...]]:
    """Put the warehouse back to what migration 6 left (labels required, no task columns);
    returns its predictions as they are then."""
    import sqlalchemy as sa

    engine = sa.create_engine(settings.warehouse, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        if conn.dialect.name != "duckdb":
            unpartition_predictions(conn)  # migration 11
        for sql in (
            "ALTER TABLE predictions DROP COLUMN probabilities",
            "ALTER TABLE predictions ALTER COLUMN label SET NOT NULL",
            "ALTER TABLE outcomes DROP COLUMN outcome_label",
            "ALTER TABLE outcomes ALTER COLUMN outcome SET NOT NULL",
            "DELETE FROM schema_migrations WHERE version >= 7",
        ):
            conn.exec_driver_sql(sql)
        rows = [tuple(r) for r in conn.exec_driver_sql(_OLD_ROWS)]
        assert _schema.current_version(conn) == 6
    engine.dispose()
    return rows


def test_a_warehouse_from_migration_6_keeps_its_rows(settings: Settings, tmp_path: Path) -> None:
    binary = [_record(f"old{i}", "acme", i, label=i % 2) for i in range(4)]
    _write(settings.predlog_path / "seg-1.jsonl", binary)
    warehouse.sync(settings)
    labels = tmp_path / "labels.csv"
    labels.write_text("request_id,label\nold0,0\nold1,1\nold2,0.25\n")
    warehouse.load_outcomes(settings, labels)
    before = _back_to_migration_6(settings)
    assert len(before) == 4
    # the write that opens the warehouse next migrates it in place
    _write(settings.predlog_path / "seg-2.jsonl", _three_tasks("n"))
    assert warehouse.sync(settings).rows_total == 7
    after = warehouse.query(settings, _OLD_ROWS).rows
    assert [tuple(r) for r in after if r[0].startswith("old")] == before
    assert _outcomes(settings) == [
        ("old0", 0.0, "0"),
        ("old1", 1.0, "1"),
        ("old2", 0.25, "0.25"),
    ]
    assert _stored(settings)["nm"] == (0.7, 2, "[0.1,0.2,0.7]")
    assert _stored(settings)["nr"] == (3.25, None, None)
    versions = warehouse.query(settings, "SELECT max(version) FROM schema_migrations").rows
    assert versions == [(_schema.HEAD,)]


IRIS = ("setosa", "versicolor", "virginica")


def _classes(model: str, version: str) -> tuple[object, ...] | None:
    return {"fraud": (0, 1), "iris": IRIS}.get(model)  # price: a regression


def test_labels_naming_no_class_of_the_model_load_and_are_counted(
    logged: Settings, tmp_path: Path
) -> None:
    settings = logged
    labels = tmp_path / "labels.csv"
    # ab: class 1 (1.0 names it too); am: a class name; bm: "2" names no iris class;
    # bb: 7 names no fraud class; ar: a regression target, never checked
    labels.write_text("request_id,label\nab,1.0\nam,setosa\nbm,2\nbb,7\nar,2.5\n")
    result = warehouse.load_outcomes(settings, labels, classes=_classes)
    assert (result.inserted, result.unknown_labels) == (5, 2)
    assert result.unknown_label_example == "'2' (iris v1: setosa, versicolor, virginica)"
    assert len(_outcomes(settings)) == 5  # loaded all the same
    assert warehouse.load_outcomes(settings, labels).unknown_labels == 0  # not asked: not checked


@pytest.mark.parametrize("settings", ["duckdb"], indirect=True)
def test_outcomes_load_cli_syncs_first_and_warns_of_labels_naming_no_class(
    settings: Settings, tmp_path: Path
) -> None:
    from mlpipe import registry
    from tests.conftest import run_cli, train_toy_model

    model, data = train_toy_model(tmp_path / "toy")
    registry.register(settings, "fraud", dataset=data, model_path=model)  # classes 0, 1
    _write(settings.predlog_path / "seg.jsonl", _three_tasks("a"))  # served, not synced
    env = {"MLPIPE_HOME": str(settings.home), "MLPIPE_WAREHOUSE_URL": settings.warehouse}
    labels = tmp_path / "labels.csv"
    labels.write_text("request_id,label\nab,yes\nam,setosa\n")
    loaded = run_cli("outcomes", "load", str(labels), env=env)
    assert loaded.returncode == 0, loaded.stderr
    assert (
        "Warning: 1 label(s) name no class of the model that scored them "
        "(first: 'yes' (fraud v1: 0, 1)); loaded as given"
    ) in loaded.stderr
    assert "2 outcome(s) from" in loaded.stderr and "2 new, 0 replaced, 0 unchanged" in (
        loaded.stderr
    )
    again = run_cli("outcomes", "load", str(labels), env=env)
    assert "0 new, 0 replaced, 2 unchanged" in again.stderr, again.stderr
    assert len(_outcomes(settings)) == 2
