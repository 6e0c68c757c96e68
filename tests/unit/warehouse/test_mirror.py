"""The deployment history the warehouse mirrors: handed in as data, one row a generation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.warehouse import _engine, _schema
from mlpipe.warehouse._mirror import insert_missing, table_rows


@dataclass(frozen=True)
class Change:
    """A control-plane history entry, as :class:`mlpipe.warehouse.DeploymentChange` reads it."""

    model: str
    generation: int
    at: datetime
    action: str = "deploy"
    champion: str | None = "1"
    canary: str | None = None
    canary_weight: float = 0.0
    shadow: str | None = None
    shadow_sample: float = 0.0
    previous: str | None = None
    actor: str = "ci"
    reason: str | None = None


AT = datetime(2026, 12, 6, 12, 0, 0)


def test_rows_are_in_naive_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    rows = table_rows([Change("fraud", 1, AT), Change("fraud", 2, AT.replace(tzinfo=plus_two))])
    assert [r["changed_at"] for r in rows] == [AT, AT - timedelta(hours=2)]
    assert rows[0]["generation"] == 1 and rows[0]["champion"] == "1"


def test_mirrored_generations_and_insert_missing(settings: Settings) -> None:
    assert warehouse.mirrored_generations(settings) == {}
    history = [Change("fraud", 1, AT), Change("fraud", 2, AT), Change("churn", 1, AT)]
    with _engine.write(settings) as conn:
        assert insert_missing(conn, table_rows(history)) == 3
        # a generation mirrored already is not written twice; nothing given, nothing done
        assert insert_missing(conn, table_rows([*history, Change("fraud", 3, AT)])) == 1
        assert insert_missing(conn, []) == 0
    assert warehouse.mirrored_generations(settings) == {"fraud": 3, "churn": 1}
    d = _schema.deployments
    with _engine.read(settings) as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(d)).scalar_one() == 4
