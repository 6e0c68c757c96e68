"""``warehouse sync`` mirrors the control plane's deployment history into ``deployments``.

The history reaches the warehouse through :func:`mlpipe.deployments.history_feed`,
read before each sync as the ``mlpipe warehouse sync`` command reads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe import deployments, warehouse
from mlpipe.warehouse import _schema

pytestmark = pytest.mark.integration


def _mirror(settings) -> list[tuple]:  # type: ignore[no-untyped-def, type-arg]
    result = warehouse.query(
        settings,
        "SELECT model, generation, action, champion, canary, canary_weight, previous, reason "
        "FROM deployments ORDER BY model, generation",
    )
    return [tuple(r) for r in result.rows]


def _sync(settings) -> warehouse.SyncResult:  # type: ignore[no-untyped-def]
    """A sync as ``mlpipe warehouse sync`` runs one: the history read first."""
    return warehouse.sync(settings, history=deployments.history_feed(settings))


def test_sync_mirrors_history_once_per_generation(registered_home: Path, settings) -> None:  # type: ignore[no-untyped-def]
    assert deployments.history_feed(settings) == []  # nothing deployed: no control DB
    assert warehouse.sync(settings, history=[]).deployments_loaded == 0
    assert not (settings.state_path / "control.db").exists()

    deployments.deploy(settings, "fraud", "1", reason="first")
    deployments.deploy(settings, "fraud", "2", canary=10, reason="try v2")
    deployments.promote(settings, "fraud", reason="looks good", force=True)
    first = _sync(settings)
    assert first.deployments_loaded == 3
    assert _mirror(settings) == [
        ("fraud", 1, "deploy", "1", None, 0.0, None, "first"),
        ("fraud", 2, "canary", "1", "2", 10.0, None, "try v2"),
        ("fraud", 3, "promote --force", "2", None, 0.0, "1", "looks good"),
    ]
    assert _sync(settings).deployments_loaded == 0  # idempotent
    assert len(_mirror(settings)) == 3

    deployments.rollback(settings, "fraud", reason="oops")
    assert _sync(settings).deployments_loaded == 1
    assert _mirror(settings)[-1] == ("fraud", 4, "rollback", "1", None, 0.0, None, "oops")
    changed_at = warehouse.query(settings, "SELECT min(changed_at) FROM deployments").rows[0][0]
    assert changed_at is not None and changed_at.tzinfo is None  # naive UTC like every ts


def test_a_warehouse_from_migration_1_gains_the_previous_column(
    registered_home: Path,
    settings,  # type: ignore[no-untyped-def]
) -> None:
    import duckdb

    warehouse.sync(settings)  # creates the warehouse at the newest migration
    path = settings.state_path / "warehouse.duckdb"
    with duckdb.connect(str(path)) as con:  # put it back to what migration 1 created
        con.execute("ALTER TABLE deployments DROP COLUMN previous")
        con.execute("DELETE FROM schema_migrations WHERE version = 2")
    deployments.deploy(settings, "fraud", "1")
    deployments.deploy(settings, "fraud", "2")
    assert _sync(settings).deployments_loaded == 2
    assert [r[6] for r in _mirror(settings)] == [None, "1"]
    versions = warehouse.query(settings, "SELECT max(version) FROM schema_migrations").rows[0][0]
    assert versions == _schema.HEAD
