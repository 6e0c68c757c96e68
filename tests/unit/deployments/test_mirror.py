"""The MLflow aliases follow the latest committed record: mirrored, compared, healed and
checked (an MLflow file store and the control plane on SQLite, both in tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe import registry
from mlpipe.config import Settings
from mlpipe.deployments import AliasDrift, Deployment, alias_drift, check_aliases, control_plane
from mlpipe.deployments._mirror import ALIASES, heal_aliases, mirror_latest
from mlpipe.errors import CheckFailed


@pytest.fixture
def settings(home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``fraud`` versions 1 to 3 registered, nothing deployed."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    settings = Settings(home=home, registry_uri=(home / "mlruns").as_uri())
    c = registry.client(settings)
    c.create_registered_model("fraud")
    for _ in range(3):
        c.create_model_version("fraud", (home / "artifact").as_uri())
    return settings


def _commit(settings: Settings, **arms: object) -> Deployment:
    plane = control_plane(settings)
    record = plane.get("fraud")
    new = Deployment(model="fraud", actor="ci", **arms)  # type: ignore[arg-type]
    return plane.commit(new, read_generation=record.generation if record else 0, action="deploy")


def _held(settings: Settings) -> dict[str, str | None]:
    return registry.read_aliases(settings, "fraud", ALIASES)


def test_mirror_latest_of_a_model_without_a_record_is_none(settings: Settings) -> None:
    assert mirror_latest(settings, "fraud") is None
    assert set(_held(settings).values()) == {None}


def test_mirror_latest_writes_the_latest_record_s_aliases(settings: Settings) -> None:
    _commit(settings, champion="1", canary="2", canary_weight=10.0, shadow="3")
    latest = _commit(settings, champion="2", previous="1")
    assert mirror_latest(settings, "fraud") == latest
    assert _held(settings) == {"champion": "2", "canary": None, "shadow": None, "previous": "1"}


def test_alias_drift_names_each_alias_mlflow_holds_differently(settings: Settings) -> None:
    record = _commit(settings, champion="2", canary="3", canary_weight=5.0)
    registry.mirror_aliases(settings, "fraud", {"champion": "1", "shadow": "1"}, generation=0)
    assert alias_drift(settings, record) == [
        AliasDrift("champion", mlflow="1", record="2"),
        AliasDrift("canary", mlflow=None, record="3"),
        AliasDrift("shadow", mlflow="1", record=None),
    ]


def test_heal_returns_the_drift_it_found_and_mirrors_it_away(settings: Settings) -> None:
    record = _commit(settings, champion="2")
    assert heal_aliases(settings, record) == [AliasDrift("champion", None, "2")]
    assert heal_aliases(settings, record) == []
    assert _held(settings)["champion"] == "2"


def test_check_aliases_with_nothing_deployed_creates_no_control_database(
    settings: Settings,
) -> None:
    assert check_aliases(settings) == "nothing deployed"
    assert not (settings.state_path / "control.db").exists()


def test_check_aliases_passes_when_mlflow_matches_and_names_the_drift_otherwise(
    settings: Settings,
) -> None:
    _commit(settings, champion="1")
    mirror_latest(settings, "fraud")
    assert check_aliases(settings) == "MLflow aliases match the record for 1 model(s)"
    _commit(settings, champion="2", previous="1")
    with pytest.raises(CheckFailed) as raised:
        check_aliases(settings)
    assert str(raised.value) == (
        "fraud: @champion is 1 (record: 2), @previous is None (record: 1); "
        "`mlpipe status fraud` heals it"
    )
    assert _held(settings)["champion"] == "1"  # the check heals nothing
