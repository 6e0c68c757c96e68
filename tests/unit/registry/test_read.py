"""Reading the registry: a version by reference, every model, existence checks (an MLflow
file store in tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe.config import Settings
from mlpipe.errors import NotFound
from mlpipe.registry import (
    ModelSummary,
    classes_of,
    client,
    list_models,
    parse_ref,
    require_model,
    require_version,
    show,
)
from mlpipe.tasks import TaskSpec


@pytest.fixture
def store(home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``fraud`` v1 (binary) and v2 (multiclass, ``@champion``), ``churn`` v1 (regression),
    and ``empty`` with no version, on an MLflow file store."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    settings = Settings(home=home, registry_uri=(home / "mlruns").as_uri())
    c = client(settings)
    source = (home / "artifact").as_uri()
    for name in ("fraud", "churn", "empty"):
        c.create_registered_model(name)
    c.create_model_version("fraud", source, tags=TaskSpec().to_tags())
    multiclass = TaskSpec("multiclass", ("low", "mid", "high"))
    c.create_model_version("fraud", source, tags={**multiclass.to_tags(), "mlpipe.x": "2"})
    c.set_registered_model_alias("fraud", "champion", "2")
    c.create_model_version("churn", source, tags=TaskSpec("regression").to_tags())
    return settings


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [
        ("fraud", ("fraud", None, None)),
        ("fraud/3", ("fraud", "3", None)),
        ("fraud@champion", ("fraud", None, "champion")),
        ("fraud@a/b", ("fraud", None, "a/b")),  # an alias wins over a slash after it
    ],
)
def test_parse_ref(ref: str, parsed: tuple[str, str | None, str | None]) -> None:
    assert parse_ref(ref) == parsed


def test_show_a_version_by_number_by_alias_and_the_latest(store: Settings) -> None:
    one = show(store, "fraud/1")
    assert (one.name, one.version, one.aliases, one.task.task) == ("fraud", "1", [], "binary")
    champion = show(store, "fraud@champion")
    assert (champion.version, champion.aliases, champion.tags["mlpipe.x"]) == (
        "2",
        ["champion"],
        "2",
    )
    assert show(store, "fraud").version == "2"


def test_show_an_alias_that_is_not_set_is_not_found(store: Settings) -> None:
    with pytest.raises(NotFound, match=r"^no alias @canary on fraud$"):
        show(store, "fraud@canary")


def test_show_a_missing_version_names_the_versions_there_are(store: Settings) -> None:
    with pytest.raises(NotFound, match=r"^fraud has no version 9 \(versions: 1, 2\)$"):
        show(store, "fraud/9")


def test_show_an_unknown_model_is_not_found(store: Settings) -> None:
    with pytest.raises(NotFound, match=r"^no registered model named 'nobody'$"):
        show(store, "nobody/1")


def test_list_models_gives_each_model_its_latest_version_and_aliases(store: Settings) -> None:
    summaries = sorted(list_models(store), key=lambda m: m.name)
    assert summaries == [
        ModelSummary("churn", "1", {}),
        ModelSummary("empty", None, {}),
        ModelSummary("fraud", "2", {"champion": "2"}),
    ]


def test_require_model_and_version(store: Settings) -> None:
    require_model(store, "empty")
    require_version(store, "fraud", "2")
    with pytest.raises(NotFound, match=r"^no registered model named 'nobody'$"):
        require_model(store, "nobody")
    with pytest.raises(NotFound, match=r"^empty has no version 1 \(versions: none\)$"):
        require_version(store, "empty", "1")


def test_classes_of_a_classifier_a_regression_and_an_unknown_version(store: Settings) -> None:
    assert classes_of(store, "fraud", "1") == (0, 1)
    assert classes_of(store, "fraud", "2") == ("low", "mid", "high")
    assert classes_of(store, "churn", "1") is None
    assert classes_of(store, "fraud", "9") is None
    assert classes_of(store, "nobody", "1") is None
