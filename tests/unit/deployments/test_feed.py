"""The history the warehouse mirrors: only the control plane's changes newer than what the
warehouse holds, oldest first (control plane on SQLite and a DuckDB warehouse in tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.deployments import Deployment, control_plane, history_feed


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings(home=home)


def _commit(settings: Settings, model: str, champion: str | None) -> None:
    plane = control_plane(settings)
    record = plane.get(model)
    action = "deploy" if champion else "undeploy"
    plane.commit(
        Deployment(model=model, champion=champion, actor="ci"),
        read_generation=record.generation if record else 0,
        action=action,
    )


def test_a_project_that_never_deployed_has_no_feed_and_gets_no_databases(
    settings: Settings,
) -> None:
    assert history_feed(settings) == []
    assert not (settings.state_path / "control.db").exists()
    assert not (settings.state_path / "warehouse.duckdb").exists()


def test_the_feed_is_what_the_warehouse_lacks_oldest_first(settings: Settings) -> None:
    for champion in ("1", "2", "3"):
        _commit(settings, "fraud", champion)
    _commit(settings, "churn", "1")
    feed = history_feed(settings)
    assert [(e.model, e.generation, e.champion) for e in feed] == [
        ("churn", 1, "1"),
        ("fraud", 1, "1"),
        ("fraud", 2, "2"),
        ("fraud", 3, "3"),
    ]
    assert warehouse.sync(settings, history=feed).deployments_loaded == 4
    assert history_feed(settings) == []

    _commit(settings, "fraud", None)
    assert [(e.model, e.generation, e.action, e.champion) for e in history_feed(settings)] == [
        ("fraud", 4, "undeploy", None)
    ]
