"""A deployment's aliases mirrored onto MLflow, and read back (an MLflow file store in tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe.config import Settings
from mlpipe.errors import NotFound
from mlpipe.registry import client, mirror_aliases, read_aliases

ALIASES = ("champion", "canary", "shadow", "previous")


@pytest.fixture
def store(home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings on an MLflow file store holding ``fraud`` versions 1, 2 and 3."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    settings = Settings(home=home, registry_uri=(home / "mlruns").as_uri())
    c = client(settings)
    c.create_registered_model("fraud")
    for _ in range(3):
        c.create_model_version("fraud", (home / "artifact").as_uri())
    return settings


def test_mirror_sets_each_alias_to_its_version(store: Settings) -> None:
    mirror_aliases(store, "fraud", {"champion": "1", "canary": "2"}, generation=1)
    assert read_aliases(store, "fraud", ALIASES) == {
        "champion": "1",
        "canary": "2",
        "shadow": None,
        "previous": None,
    }


def test_mirror_moves_an_alias_and_deletes_one_mapped_to_none(store: Settings) -> None:
    mirror_aliases(store, "fraud", {"champion": "1", "canary": "2"}, generation=1)
    mirror_aliases(store, "fraud", {"champion": "2", "canary": None, "previous": "1"}, generation=2)
    assert read_aliases(store, "fraud", ALIASES) == {
        "champion": "2",
        "canary": None,
        "shadow": None,
        "previous": "1",
    }


def test_deleting_an_alias_that_was_never_set_is_no_error(store: Settings) -> None:
    mirror_aliases(store, "fraud", {"shadow": None, "champion": "3"}, generation=1)
    assert read_aliases(store, "fraud", ["shadow", "champion"]) == {
        "shadow": None,
        "champion": "3",
    }


def test_mirror_that_fails_names_the_committed_generation_and_the_repair(store: Settings) -> None:
    with pytest.raises(NotFound) as raised:
        mirror_aliases(store, "churn", {"champion": "1"}, generation=7)
    assert str(raised.value).startswith(
        "generation 7 of churn is committed, but MLflow aliases could not be mirrored "
        "(`mlpipe status churn` re-mirrors them): "
    )


def test_read_aliases_of_an_unknown_model_is_not_found(store: Settings) -> None:
    with pytest.raises(NotFound, match=r"^aliases of churn: "):
        read_aliases(store, "churn", ALIASES)


def test_read_aliases_reads_only_the_names_asked_for(store: Settings) -> None:
    mirror_aliases(store, "fraud", {"champion": "1", "canary": "2"}, generation=1)
    assert read_aliases(store, "fraud", ["canary"]) == {"canary": "2"}
    assert read_aliases(store, "fraud", []) == {}
