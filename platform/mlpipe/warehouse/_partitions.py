"""PostgreSQL: ``predictions`` partitioned by day on ``ts``, its key kept in ``prediction_keys``.

Each UTC day's rows live in their own partition, ``predictions_pYYYYMMDD``
(``[day, day + 1)``), so retention drops a day that every tenant's retention
has passed instead of deleting its rows one by one (:mod:`._retention`). The
loader creates the partitions of the days a batch holds before it inserts it
(:func:`ensure_days`); ``predictions_default`` takes a row no day partition
holds, so an insert never fails for want of one, and its rows move to their
day's partition when that is created.

A key on a partitioned table must hold the partition column, so
``predictions``' own key is (request_id, tenant, model, arm, ts): unique per
day, not across days. The key the loader keeps (a request id logged again
another day is reported, not stored twice) is ``prediction_keys``, one
unpartitioned row per stored prediction: (request_id, tenant, model, arm) →
its ``ts``. The loader claims a key there first and stores only the rows whose
key it claimed (``_sync._insert_postgres``); a trigger removes a row's key when
the row is deleted (retention's row deletes, a purge, SQL by hand); dropping a
day removes that day's keys first (by ``ts``, indexed), so a reused id is
stored, not refused, once its first row is gone.

DuckDB has neither: its ``predictions`` is one table whose key the loader keeps.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:
    from sqlalchemy import Connection

DEFAULT_PARTITION = "predictions_default"
_DAY_PARTITION = re.compile(r"^predictions_p(\d{8})$")
# pg_advisory_xact_lock key ("mlpipe" in ASCII): held while day partitions are created or
# dropped, so two loaders never create one partition twice and a drop never races a creation.
_PARTITION_LOCK = 0x6D6C70697065
# How long dropping a day waits for the ACCESS EXCLUSIVE lock on ``predictions`` (a long
# report query holds it off) before the prune gives up on the drop and deletes rows instead.
DROP_LOCK_TIMEOUT = "5s"
_KEY = "request_id, tenant, model, arm"


@dataclass(frozen=True)
class DayPartition:
    """One day's partition of ``predictions``: rows with ``day <= ts < day + 1``."""

    name: str
    day: date

    @property
    def start(self) -> datetime:
        return datetime.combine(self.day, time())

    @property
    def end(self) -> datetime:
        return self.start + timedelta(days=1)


def partition_name(day: date) -> str:
    return f"predictions_p{day.year:04d}{day.month:02d}{day.day:02d}"


def is_partitioned(conn: Connection) -> bool:
    """Whether ``predictions`` is a partitioned table (PostgreSQL after migration 11)."""
    if conn.dialect.name != "postgresql":
        return False
    kind = conn.exec_driver_sql(
        "SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass('predictions')"
    ).scalar()
    return kind == "p"


def day_partitions(conn: Connection) -> list[DayPartition]:
    """The day partitions of ``predictions``, oldest first (the default partition is not one)."""
    names = conn.exec_driver_sql(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass('predictions')"
    ).scalars()
    found = []
    for name in names:
        match = _DAY_PARTITION.match(name)
        if match:
            found.append(DayPartition(name, datetime.strptime(match[1], "%Y%m%d").date()))
    return sorted(found, key=lambda p: p.day)


def days_of(conn: Connection, table: str) -> list[date]:
    """The UTC days of the ``ts`` values in ``table`` (a loader's staging table)."""
    return list(conn.exec_driver_sql(f"SELECT DISTINCT CAST(ts AS date) FROM {table}").scalars())


def ensure_days(conn: Connection, days: Iterable[date]) -> list[str]:
    """Create the day partitions of ``days`` that do not exist (in the caller's transaction);
    returns their names. Rows of such a day already in the default partition move to it."""
    have = {p.day for p in day_partitions(conn)}
    missing = sorted(set(days) - have)
    if not missing:
        return []
    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PARTITION_LOCK})")
    have = {p.day for p in day_partitions(conn)}  # another loader may have made them meanwhile
    created = []
    for day in missing:
        if day in have:
            continue
        part = DayPartition(partition_name(day), day)
        _create(conn, part)
        created.append(part.name)
    return created


def _create(conn: Connection, part: DayPartition) -> None:
    bounds = {"start": part.start, "end": part.end}
    stray = conn.execute(
        sa.text(
            f"SELECT EXISTS (SELECT 1 FROM {DEFAULT_PARTITION} WHERE ts >= :start AND ts < :end)"
        ),
        bounds,
    ).scalar()
    ddl = (
        f"CREATE TABLE {part.name} PARTITION OF predictions "
        f"FOR VALUES FROM ('{part.start.isoformat()}') TO ('{part.end.isoformat()}')"
    )
    if not stray:
        conn.exec_driver_sql(ddl)
        return
    # PostgreSQL refuses a partition whose rows the default partition holds: move them out,
    # create it, and put them back (the delete trigger took their keys: put those back too).
    conn.exec_driver_sql(
        "CREATE TEMPORARY TABLE _mlpipe_stray (LIKE predictions INCLUDING DEFAULTS) ON COMMIT DROP"
    )
    conn.execute(
        sa.text(
            f"WITH moved AS (DELETE FROM {DEFAULT_PARTITION} WHERE ts >= :start AND ts < :end "
            "RETURNING *) INSERT INTO _mlpipe_stray SELECT * FROM moved"
        ),
        bounds,
    )
    conn.exec_driver_sql(ddl)
    conn.exec_driver_sql("INSERT INTO predictions SELECT * FROM _mlpipe_stray")
    conn.exec_driver_sql(
        f"INSERT INTO prediction_keys ({_KEY}, ts) SELECT {_KEY}, ts FROM _mlpipe_stray "
        "ON CONFLICT DO NOTHING"
    )
    conn.exec_driver_sql("DROP TABLE _mlpipe_stray")


# A chunk of a day's keys deleted (by ``ts``, indexed; each by its ctid), counted per tenant.
_DROP_KEYS = sa.text(
    "WITH gone AS (DELETE FROM prediction_keys WHERE ctid = ANY(ARRAY(SELECT ctid "
    "FROM prediction_keys WHERE ts >= :start AND ts < :end LIMIT :n)) RETURNING tenant) "
    "SELECT tenant, count(*) FROM gone GROUP BY tenant"
)


def drop_day(conn: Connection, part: DayPartition, chunk: int) -> Counter[str] | None:
    """Drop a day's partition: its keys first, ``chunk`` a transaction, then the table.

    Returns the rows dropped per tenant (counted by their keys), or None when the
    drop could not have its lock within :data:`DROP_LOCK_TIMEOUT` (the partition
    stays; its keys are gone, so a reused id stores again, and the caller deletes
    its rows instead). Each step is its own transaction on ``conn``.
    """
    from sqlalchemy.exc import OperationalError

    tenants: Counter[str] = Counter()
    bounds = {"start": part.start, "end": part.end, "n": chunk}
    while True:
        with conn.begin():
            gone = conn.execute(_DROP_KEYS, bounds).all()
            found: Counter[str] = Counter(dict(gone))
        tenants.update(found)
        if sum(found.values()) < chunk:
            break
    try:
        with conn.begin():
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{DROP_LOCK_TIMEOUT}'")
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PARTITION_LOCK})")
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {part.name}")
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        return None
    return tenants


_KEY_GONE = """
CREATE OR REPLACE FUNCTION mlpipe_prediction_key_gone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM prediction_keys k
    WHERE (k.request_id, k.tenant, k.model, k.arm, k.ts)
        = (OLD.request_id, OLD.tenant, OLD.model, OLD.arm, OLD.ts);
    RETURN NULL;
END
$$
"""


def partition_predictions(conn: Connection) -> None:
    """Migration 11 (PostgreSQL): ``predictions`` partitioned by day, keyed in ``prediction_keys``.

    The table is rebuilt: the old one renamed, a partitioned one made like it
    (same columns in the same order), a partition created for each day its
    rows hold, the rows and their keys copied, the old table dropped. In the
    migration's transaction, so a failure leaves the table as it was; the copy
    takes time in proportion to the rows (docs/data-lifecycle.md).
    """
    if conn.dialect.name != "postgresql" or is_partitioned(conn):
        return
    old = "predictions_unpartitioned"
    conn.exec_driver_sql(f"ALTER TABLE predictions RENAME TO {old}")
    pkey = conn.exec_driver_sql(
        f"SELECT conname FROM pg_constraint WHERE conrelid = to_regclass('{old}') AND contype = 'p'"
    ).scalar()
    if pkey:  # its index keeps its name: free "predictions_pkey" for the new table
        conn.exec_driver_sql(f'ALTER TABLE {old} RENAME CONSTRAINT "{pkey}" TO {old}_pkey')
    conn.exec_driver_sql(
        f"CREATE TABLE predictions (LIKE {old} INCLUDING DEFAULTS) PARTITION BY RANGE (ts)"
    )
    conn.exec_driver_sql(
        f"ALTER TABLE predictions ADD CONSTRAINT predictions_pkey PRIMARY KEY ({_KEY}, ts)"
    )
    conn.exec_driver_sql(f"CREATE TABLE {DEFAULT_PARTITION} PARTITION OF predictions DEFAULT")
    conn.exec_driver_sql(
        "CREATE TABLE prediction_keys (request_id VARCHAR NOT NULL, tenant VARCHAR NOT NULL, "
        "model VARCHAR NOT NULL, arm VARCHAR NOT NULL, ts TIMESTAMP WITHOUT TIME ZONE NOT NULL, "
        f"CONSTRAINT prediction_keys_pkey PRIMARY KEY ({_KEY}))"
    )
    conn.exec_driver_sql("CREATE INDEX prediction_keys_ts ON prediction_keys (ts)")
    for day in days_of(conn, old):
        _create(conn, DayPartition(partition_name(day), day))
    conn.exec_driver_sql(f"INSERT INTO predictions SELECT * FROM {old}")
    conn.exec_driver_sql(f"INSERT INTO prediction_keys ({_KEY}, ts) SELECT {_KEY}, ts FROM {old}")
    conn.exec_driver_sql(f"DROP TABLE {old}")
    conn.exec_driver_sql(_KEY_GONE)
    conn.exec_driver_sql(
        "CREATE TRIGGER predictions_key_gone AFTER DELETE ON predictions "
        "FOR EACH ROW EXECUTE FUNCTION mlpipe_prediction_key_gone()"
    )
