"""The control plane: deployment records and their history in SQL, changed by compare-and-swap.

Each change is one transaction: a conditional ``UPDATE ... WHERE generation = :read``
(or an INSERT for a model's first deploy) plus a history row. If another writer
moved the generation first, the UPDATE matches no row and the change fails with
:class:`Conflict`; nothing is half-applied. The same code runs on SQLite (WAL,
``BEGIN IMMEDIATE``) and PostgreSQL.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy import (
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    RowMapping,
    String,
    Table,
    Text,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError as SqlIntegrityError

from mlpipe.deployments._record import Deployment, HistoryEntry, RolloutLease
from mlpipe.engines import create_tables, transaction
from mlpipe.errors import Conflict

metadata = MetaData()

_STATE_COLUMNS = (
    lambda: Column("champion", String(64)),
    lambda: Column("canary", String(64)),
    lambda: Column("canary_weight", Float, nullable=False, default=0.0),
    lambda: Column("shadow", String(64)),
    lambda: Column("shadow_sample", Float, nullable=False, default=0.0),
    lambda: Column("previous", String(64)),
    lambda: Column("actor", String(128), nullable=False),
    lambda: Column("reason", Text),
)

deployments = Table(
    "deployments",
    metadata,
    Column("model", String(255), primary_key=True),
    Column("generation", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    *(make() for make in _STATE_COLUMNS),
)

history = Table(
    "deployment_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("model", String(255), nullable=False, index=True),
    Column("generation", Integer, nullable=False),
    Column("action", String(32), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    *(make() for make in _STATE_COLUMNS),
)

# One row per model while a rollout runs: who runs it and until when it counts as alive.
rollout_leases = Table(
    "rollout_leases",
    metadata,
    Column("model", String(255), primary_key=True),
    Column("version", String(64), nullable=False),
    Column("weight", Float, nullable=False, default=0.0),
    Column("owner", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("host", String(255), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

_RECORD_FIELDS = ("champion", "canary", "canary_weight", "shadow", "shadow_sample", "previous")


class ControlPlane:
    """Deployment records behind one SQLAlchemy URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        create_tables(url, metadata)

    def get(self, model: str) -> Deployment | None:
        with transaction(self.url) as conn:
            row = conn.execute(select(deployments).where(deployments.c.model == model)).first()
        return _to_deployment(row._mapping) if row else None

    def generations(self) -> dict[str, int]:
        """Model → current generation of every model in service, in one cheap query.

        This is what servers poll: an undeployed model (no champion) is left out,
        so a server stops serving it.
        """
        query = select(deployments.c.model, deployments.c.generation).where(
            deployments.c.champion.is_not(None)
        )
        with transaction(self.url) as conn:
            rows = conn.execute(query).all()
        return {str(model): int(generation) for model, generation in rows}

    def models(self) -> list[Deployment]:
        with transaction(self.url) as conn:
            rows = conn.execute(select(deployments).order_by(deployments.c.model)).all()
        return [_to_deployment(r._mapping) for r in rows]

    def history(self, model: str, limit: int = 50) -> list[HistoryEntry]:
        query = (
            select(history)
            .where(history.c.model == model)
            .order_by(history.c.id.desc())
            .limit(limit)
        )
        with transaction(self.url) as conn:
            rows = conn.execute(query).all()
        return [_to_history(r._mapping) for r in rows]

    def commit(self, new: Deployment, *, read_generation: int, action: str) -> Deployment:
        """Store ``new`` as generation ``read_generation + 1`` if nobody moved it meanwhile.

        Raises :class:`Conflict` when the record is no longer at ``read_generation``.
        """
        stored = replace(
            new,
            generation=read_generation + 1,
            updated_at=datetime.now(UTC),
        )
        values = {f: getattr(stored, f) for f in (*_RECORD_FIELDS, "actor", "reason")}
        with transaction(self.url) as conn:
            if read_generation == 0:
                try:
                    conn.execute(
                        insert(deployments).values(
                            model=stored.model,
                            generation=stored.generation,
                            updated_at=stored.updated_at,
                            **values,
                        )
                    )
                except SqlIntegrityError as exc:
                    raise _conflict(stored.model, read_generation) from exc
            else:
                result = conn.execute(
                    update(deployments)
                    .where(deployments.c.model == stored.model)
                    .where(deployments.c.generation == read_generation)
                    .values(generation=stored.generation, updated_at=stored.updated_at, **values)
                )
                if result.rowcount != 1:
                    raise _conflict(stored.model, read_generation)
            conn.execute(
                insert(history).values(
                    model=stored.model,
                    generation=stored.generation,
                    action=action,
                    at=stored.updated_at,
                    **values,
                )
            )
        return stored

    def lease(self, model: str) -> RolloutLease | None:
        """The rollout lease on ``model``, live or abandoned, or None."""
        with transaction(self.url) as conn:
            row = conn.execute(
                select(rollout_leases).where(rollout_leases.c.model == model)
            ).first()
        return _to_lease(row._mapping) if row else None

    def take_lease(self, lease: RolloutLease, *, replacing: str | None = None) -> bool:
        """Store ``lease``: a new row, or in place of the lease ``replacing`` names as owner.

        False when another owner holds the row (or the replaced one is gone).
        """
        values = {k: getattr(lease, k) for k in _LEASE_FIELDS if k != "model"}
        with transaction(self.url) as conn:
            if replacing is None:
                try:
                    conn.execute(insert(rollout_leases).values(model=lease.model, **values))
                except SqlIntegrityError:
                    return False
                return True
            result = conn.execute(
                update(rollout_leases)
                .where(rollout_leases.c.model == lease.model)
                .where(rollout_leases.c.owner == replacing)
                .values(**values)
            )
            return bool(result.rowcount == 1)

    def renew_lease(self, model: str, owner: str, *, expires_at: datetime, weight: float) -> bool:
        """Move the lease's heartbeat and expiry; False when ``owner`` no longer holds it."""
        with transaction(self.url) as conn:
            result = conn.execute(
                update(rollout_leases)
                .where(rollout_leases.c.model == model)
                .where(rollout_leases.c.owner == owner)
                .values(heartbeat_at=datetime.now(UTC), expires_at=expires_at, weight=weight)
            )
        return bool(result.rowcount == 1)

    def drop_lease(self, model: str, owner: str | None = None) -> bool:
        """Delete the lease on ``model`` (only ``owner``'s, when given); whether one was deleted."""
        query = delete(rollout_leases).where(rollout_leases.c.model == model)
        if owner is not None:
            query = query.where(rollout_leases.c.owner == owner)
        with transaction(self.url) as conn:
            return bool(conn.execute(query).rowcount)


_LEASE_FIELDS = (
    "model",
    "version",
    "weight",
    "owner",
    "pid",
    "host",
    "started_at",
    "heartbeat_at",
    "expires_at",
)


def _to_lease(row: RowMapping) -> RolloutLease:
    data = {k: row[k] for k in _LEASE_FIELDS}
    for key in ("started_at", "heartbeat_at", "expires_at"):
        data[key] = _as_utc(data[key])
    return RolloutLease(**data)


def _conflict(model: str, read_generation: int) -> Conflict:
    return Conflict(
        f"the deployment of {model} changed concurrently (it was at generation "
        f"{read_generation} when read); nothing was changed — check `mlpipe status {model}` "
        "and retry"
    )


def _as_utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _to_deployment(row: RowMapping) -> Deployment:
    data = {k: row[k] for k in (*_RECORD_FIELDS, "model", "generation", "actor", "reason")}
    return Deployment(updated_at=_as_utc(row["updated_at"]), **data)


def _to_history(row: RowMapping) -> HistoryEntry:
    data = {
        k: row[k] for k in (*_RECORD_FIELDS, "model", "generation", "action", "actor", "reason")
    }
    return HistoryEntry(at=_as_utc(row["at"]), **data)


__all__ = ["ControlPlane"]
