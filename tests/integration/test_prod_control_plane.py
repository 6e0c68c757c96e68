"""The control plane and the warehouse on PostgreSQL, through the same SQLAlchemy code as SQLite.

The compare-and-swap is a conditional ``UPDATE deployments SET generation = G+1
… WHERE model = :m AND generation = G``: under READ COMMITTED the second writer
blocks on the row lock the first one holds, then re-checks its WHERE against
the committed row, matches nothing and gets :class:`Conflict`. Here separate
processes (each with its own connection pool) read the same generation, meet at
a barrier, and commit together, round after round: exactly one wins each round.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlpipe.config import Settings
from mlpipe.deployments import ControlPlane, Deployment
from tests.integration.prod_services import postgres_database

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

RACERS = 3
ROUNDS = 5


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with postgres_database() as url:
        yield url


def _record(champion: str, model: str = "fraud") -> Deployment:
    return Deployment(model=model, champion=champion, actor="test")


def _racer(url: str, name: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    """Each round: read the record, wait for the others, commit on what was read."""
    from dataclasses import replace

    from mlpipe.deployments import ControlPlane
    from mlpipe.errors import Conflict

    plane = ControlPlane(url)
    for round_no in range(ROUNDS):
        barrier.wait(timeout=60)
        record = plane.get("fraud")
        assert record is not None
        barrier.wait(timeout=60)  # everyone has read the same generation
        try:
            stored = plane.commit(
                replace(record, champion=f"{name}-{round_no}", actor=name),
                read_generation=record.generation,
                action="promote",
            )
            results.put((round_no, name, "won", stored.generation))
        except Conflict:
            results.put((round_no, name, "conflict", record.generation))


def test_concurrent_commits_from_processes_exactly_one_wins_each_round(pg_url: str) -> None:
    plane = ControlPlane(pg_url)
    first = plane.commit(_record("1"), read_generation=0, action="deploy")
    assert first.generation == 1
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no shared sockets
    barrier, results = ctx.Barrier(RACERS), ctx.Queue()
    procs = [
        ctx.Process(target=_racer, args=(pg_url, f"p{i}", barrier, results)) for i in range(RACERS)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in range(RACERS * ROUNDS)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    for round_no in range(ROUNDS):
        this_round = [o for o in outcomes if o[0] == round_no]
        winners = [o for o in this_round if o[2] == "won"]
        assert len(winners) == 1, this_round
        assert winners[0][3] == round_no + 2  # generation 1 + one bump per round
        assert all(o[3] == round_no + 1 for o in this_round if o[2] == "conflict")
    final = plane.get("fraud")
    assert final is not None and final.generation == ROUNDS + 1
    history = plane.history("fraud", limit=100)
    assert [h.generation for h in history] == list(range(ROUNDS + 1, 0, -1))
    last = [o for o in outcomes if o[0] == ROUNDS - 1 and o[2] == "won"][0]
    assert (final.champion, final.actor) == (f"{last[1]}-{ROUNDS - 1}", last[1])


def test_first_deploy_race_is_decided_by_the_primary_key(pg_url: str) -> None:
    """Two writers both see no record: the INSERT of the second fails, as a Conflict."""
    from mlpipe.errors import Conflict

    a, b = ControlPlane(pg_url), ControlPlane(pg_url)
    a.commit(_record("1", model="churn"), read_generation=0, action="deploy")
    with pytest.raises(Conflict, match="changed concurrently"):
        b.commit(_record("2", model="churn"), read_generation=0, action="deploy")
    assert a.get("churn").champion == "1"  # type: ignore[union-attr]
    assert len(a.history("churn")) == 1


def _records(n: int, start: float):  # type: ignore[no-untyped-def]
    from mlpipe.predlog import PredictionRecord

    return [
        PredictionRecord(
            request_id=f"r{i}",
            ts=start + i,
            tenant="t",
            model="fraud",
            version="1" if i % 4 else "2",
            arm="champion" if i % 4 else "canary",
            generation=2,
            entity_key=f"customer_id={i}",
            entity={"customer_id": i},
            features={"amount": float(i), "txn_count_7d": None},
            score=0.25,
            label=0,
            latency_ms=2.0,
        )
        for i in range(n)
    ]


def test_warehouse_on_postgres_sync_is_idempotent_and_queryable(
    pg_url: str, tmp_path: Path
) -> None:
    from mlpipe import warehouse
    from mlpipe.predlog import ENCODER

    settings = Settings(home=tmp_path, warehouse_url=pg_url)
    segment = settings.predlog_path / "w1" / "seg-1.jsonl"
    segment.parent.mkdir(parents=True)
    records = _records(40, start=time.time() - 120)
    segment.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    first = warehouse.sync(settings)
    assert (first.rows_loaded, first.rows_total) == (40, 40)
    again = warehouse.sync(settings)
    assert (again.rows_loaded, again.rows_total) == (0, 40)
    result = warehouse.query(
        settings, "SELECT arm, count(*) AS n FROM predictions GROUP BY arm ORDER BY arm"
    )
    assert [tuple(r) for r in result.rows] == [("canary", 10), ("champion", 30)]
    assert warehouse.models_in_warehouse(settings) == ["fraud"]


def test_rollout_lease_on_postgres_one_owner_at_a_time(pg_url: str) -> None:
    """The lease row: one owner; renew and drop by owner only; a takeover names the old owner."""
    from datetime import UTC, datetime, timedelta

    from mlpipe.deployments import RolloutLease

    plane = ControlPlane(pg_url)
    now = datetime.now(UTC)

    def lease(owner: str) -> RolloutLease:
        expires = now + timedelta(seconds=60)
        return RolloutLease("lease-model", "2", 5.0, owner, 1, "h", now, now, expires)

    assert plane.take_lease(lease("a")) and not plane.take_lease(lease("b"))
    later = now + timedelta(seconds=120)
    assert not plane.renew_lease("lease-model", "b", expires_at=later, weight=25.0)
    assert plane.renew_lease("lease-model", "a", expires_at=later, weight=25.0)
    held = plane.lease("lease-model")
    assert held is not None and (held.owner, held.weight, held.expires_at) == ("a", 25.0, later)
    assert not plane.take_lease(lease("c"), replacing="b")
    assert plane.take_lease(lease("c"), replacing="a")
    assert not plane.drop_lease("lease-model", "a") and plane.drop_lease("lease-model", "c")
    assert plane.lease("lease-model") is None
