"""Warehouse tables and the migrations that create them (SQLAlchemy Core, no Alembic).

Each migration runs once, in order, inside the write transaction that opens the
warehouse; ``schema_migrations`` records which ones ran. Add a migration by
appending to ``MIGRATIONS``; never edit one that has shipped.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateColumn

from mlpipe.warehouse._partitions import partition_predictions

metadata = sa.MetaData()

schema_migrations = sa.Table(
    "schema_migrations",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("applied_at", sa.DateTime, nullable=False),
)


def _not_duckdb(
    ddl: Any,
    target: Any,
    bind: Any,
    tables: Any = None,
    state: Any = None,
    *,
    dialect: Any = None,
    compiler: Any = None,
    checkfirst: bool = False,
) -> bool:
    """For ``ddl_if`` (a ``DDLIfCallable``): the DDL is for a database other than DuckDB."""
    dialect = dialect or getattr(compiler, "dialect", None)
    return getattr(dialect, "name", None) != "duckdb"


def _predictions(meta: sa.MetaData, name: str = "predictions") -> sa.Table:
    """One row per logged prediction, keyed by (request_id, tenant, model, arm).

    Request ids are the client's and only unique within a tenant (migration 5);
    two models may score the same request (one order id, a fraud and a churn
    model: migration 9); a shadow answer shares its request id with the answer
    the client got, hence the arm in the key. ``request_id`` leads the key so
    that a lookup by id alone (``outcomes load`` without a tenant) uses its
    index on PostgreSQL. On DuckDB the key is kept by the loader, not by a
    primary-key index (migration 4, :func:`_drop_predictions_key`). On
    PostgreSQL the table is partitioned by day (migration 11): its own key gains
    ``ts`` and the key above is kept in ``prediction_keys`` (``_partitions``).
    """
    return sa.Table(
        name,
        meta,
        sa.Column("request_id", sa.String, nullable=False),
        sa.Column("arm", sa.String, nullable=False),
        sa.Column("ts", sa.DateTime, nullable=False),  # UTC, naive
        sa.Column("tenant", sa.String, nullable=False),
        sa.Column("model", sa.String, nullable=False),
        sa.Column("version", sa.String, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("entity_key", sa.String, nullable=False),
        sa.Column("entity", sa.Text, nullable=False),  # JSON object
        # JSON object: model inputs as used. Uncompressed in DuckDB (see _rebuild_predictions).
        sa.Column("features", sa.Text, nullable=False, info={"duckdb_compression": "uncompressed"}),
        sa.Column("score", sa.Double, nullable=False),
        sa.Column("label", sa.Integer, nullable=True),  # None: regression (migration 7)
        sa.Column("latency_ms", sa.Double, nullable=False),
        sa.Column("feature_cache_hit", sa.Boolean, nullable=False),
        sa.Column("prediction_cache_hit", sa.Boolean, nullable=False),
        sa.Column("features_missing", sa.Text, nullable=False),  # JSON list
        sa.Column("status", sa.String, nullable=False),
        sa.Column("segment", sa.String, nullable=False),
        sa.Column("loaded_at", sa.DateTime, nullable=False),
        # JSON list of class probabilities, multiclass only (migration 7)
        sa.Column("probabilities", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("request_id", "tenant", "model", "arm").ddl_if(
            callable_=_not_duckdb
        ),
    )


predictions = _predictions(metadata)


def _outcomes(meta: sa.MetaData, name: str = "outcomes") -> sa.Table:
    """Ground truth, resolved when it is loaded to the request it labels: (request_id, tenant).

    ``outcome_label`` is the label as the file gave it, as text; ``outcome`` is
    its number, NULL where it is not one (a class named ``setosa``; migration 7).
    """
    return sa.Table(
        name,
        meta,
        sa.Column("request_id", sa.String, primary_key=True),
        sa.Column("outcome", sa.Double, nullable=True),
        sa.Column("outcome_ts", sa.DateTime, nullable=True),
        sa.Column("source", sa.String, nullable=False),
        sa.Column("loaded_at", sa.DateTime, nullable=False),
        sa.Column("tenant", sa.String, primary_key=True),  # migration 5
        sa.Column("outcome_label", sa.Text, nullable=True),  # migration 7
    )


outcomes = _outcomes(metadata)

# Mirror of the control plane's deployment history (the control plane is the source of truth).
deployments = sa.Table(
    "deployments",
    metadata,
    sa.Column("model", sa.String, primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True),
    sa.Column("champion", sa.String, nullable=True),
    sa.Column("canary", sa.String, nullable=True),
    sa.Column("canary_weight", sa.Double, nullable=True),
    sa.Column("shadow", sa.String, nullable=True),
    sa.Column("shadow_sample", sa.Double, nullable=True),
    sa.Column("action", sa.String, nullable=True),
    sa.Column("actor", sa.String, nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("changed_at", sa.DateTime, nullable=True),
    sa.Column("previous", sa.String, nullable=True),  # migration 2
)

# Index of generated reports and their verdicts (drift, canary, skew).
reports = sa.Table(
    "reports",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("model", sa.String, nullable=False),
    sa.Column("arm", sa.String, nullable=True),
    sa.Column("version", sa.String, nullable=True),
    sa.Column("window_start", sa.DateTime, nullable=True),
    sa.Column("window_end", sa.DateTime, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("verdict", sa.String, nullable=False),
    sa.Column("path", sa.String, nullable=True),
    sa.Column("summary", sa.Text, nullable=False),  # JSON
)

# Segment files already loaded whole: a closed segment seen with the same size is not re-read.
segments = sa.Table(
    "segments",
    metadata,
    sa.Column("path", sa.String, primary_key=True),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("rows", sa.Integer, nullable=False),
    sa.Column("skipped_lines", sa.Integer, nullable=False),
    sa.Column("loaded_at", sa.DateTime, nullable=False),
)


# Lines of closed segments that did not load, kept to be looked at (migration 6): a line
# that is not a record, or a record the warehouse cannot store (a NUL byte in a text
# field, a number outside its column's range). ``record`` is the line as written.
quarantine = sa.Table(
    "quarantine",
    metadata,
    sa.Column("segment", sa.String, primary_key=True),
    # a segment's line number, or a Kafka record's offset (segment "kafka:TOPIC/PARTITION")
    sa.Column("line", sa.BigInteger, primary_key=True),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("record", sa.Text, nullable=False),
    sa.Column("loaded_at", sa.DateTime, nullable=False),
)


# How far the warehouse has read each partition of the prediction-log topic (migration 8):
# the offset of the next record to load. Written in the transaction that inserts the
# records before it, so the rows and the position never disagree (warehouse/_kafka.py).
kafka_offsets = sa.Table(
    "kafka_offsets",
    metadata,
    sa.Column("topic", sa.String, primary_key=True),
    sa.Column("partition_id", sa.Integer, primary_key=True),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.DateTime, nullable=False),
)


def _create(*tables: sa.Table) -> Callable[[Connection], None]:
    def run(conn: Connection) -> None:
        for table in tables:
            table.create(conn, checkfirst=True)

    return run


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (
        1,
        "predictions, outcomes, deployments, reports, segments",
        _create(predictions, outcomes, deployments, reports, segments),
    ),
]


def _add_previous(conn: Connection) -> None:
    # Databases created by migration 1 after this column joined the table already have it.
    # information_schema rather than sa.inspect: duckdb-engine's inspector trips on pg_catalog.
    columns = set(
        conn.exec_driver_sql(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'deployments'"
        ).scalars()
    )
    if "previous" not in columns:
        conn.exec_driver_sql("ALTER TABLE deployments ADD COLUMN previous VARCHAR")


MIGRATIONS.append((2, "deployments.previous (control-plane mirror)", _add_previous))


@compiles(CreateColumn, "duckdb")
def _column_with_compression(
    element: CreateColumn, compiler: sa.sql.compiler.DDLCompiler, **kw: Any
) -> str | None:
    """DuckDB's ``USING COMPRESSION`` for a column whose ``info`` asks for one."""
    # SQLAlchemy leaves this visitor unannotated; it answers None for a system column.
    text: str | None = compiler.visit_create_column(element, **kw)  # type: ignore[no-untyped-call]
    method = element.element.info.get("duckdb_compression")
    return f"{text} USING COMPRESSION {method}" if method and text else text


def _replace_predictions(conn: Connection, staging: sa.Table) -> None:
    """Copy ``predictions`` into ``staging`` (created here), then put it in its place.

    Column by column: ``staging`` is the newest definition, which may have
    columns a later migration adds to the table being copied (NULL until then).
    """
    have = _columns(conn, "predictions")
    cols = ", ".join(c.name for c in staging.columns if c.name in have)
    staging.create(conn)
    conn.exec_driver_sql(f"INSERT INTO {staging.name} ({cols}) SELECT {cols} FROM predictions")
    conn.exec_driver_sql("DROP TABLE predictions")
    conn.exec_driver_sql(f"ALTER TABLE {staging.name} RENAME TO predictions")


def _rebuild_predictions(conn: Connection) -> None:
    """Recreate ``predictions`` (DuckDB only) so that ``features`` is stored uncompressed.

    ``features`` is most of a row's bytes (~500 of ~700). DuckDB's default string
    compression (dictionary + FSST) halves the file but costs more than the rest of
    a sync together: 200k rows load in ~0.9 s uncompressed and ~1.4 s compressed
    (decision 008). Scans are as fast either way. DuckDB cannot
    change a column's compression in place, so the table is copied.
    """
    if conn.dialect.name != "duckdb":
        return
    ddl = conn.exec_driver_sql(
        "SELECT sql FROM duckdb_tables() WHERE table_name = 'predictions'"
    ).scalar_one()
    if "USING COMPRESSION" in ddl.upper():  # created by migration 1 after this change
        return
    _replace_predictions(conn, predictions.to_metadata(sa.MetaData(), name="predictions_rebuild"))


MIGRATIONS.append((3, "predictions.features stored uncompressed (DuckDB)", _rebuild_predictions))


def _drop_predictions_key(conn: Connection) -> None:
    """Recreate ``predictions`` (DuckDB only) without its primary-key index.

    With the index, DuckDB inserts a sync's rows on one thread and maintains an
    ART entry per row; without it, 200k rows load in ~0.83 s instead of ~1.0 s
    (statement and commit; decision 016). The key stays a
    key: every load keeps only rows the table lacks and checks that what it
    added holds no key twice (``_sync``), and DuckDB admits one writer at a time.
    PostgreSQL keeps its primary key (``ddl_if``): several writers may load at once.
    """
    if conn.dialect.name != "duckdb":
        return
    keyed = conn.exec_driver_sql(
        "SELECT count(*) FROM duckdb_constraints() "
        "WHERE table_name = 'predictions' AND constraint_type = 'PRIMARY KEY'"
    ).scalar_one()
    if not keyed:  # created by migration 1 after this change
        return
    _replace_predictions(conn, _predictions(sa.MetaData(), name="predictions_rebuild"))


MIGRATIONS.append((4, "predictions without a primary-key index (DuckDB)", _drop_predictions_key))


def _primary_key(conn: Connection, table: str) -> tuple[str | None, list[str]]:
    """The primary-key constraint of ``table`` on PostgreSQL: its name and its columns in order."""
    rows = conn.execute(
        sa.text(
            "SELECT tc.constraint_name, kcu.column_name "
            "FROM information_schema.table_constraints tc "
            "JOIN information_schema.key_column_usage kcu "
            "ON kcu.constraint_name = tc.constraint_name AND kcu.table_schema = tc.table_schema "
            "WHERE tc.table_name = :t AND tc.constraint_type = 'PRIMARY KEY' "
            "AND tc.table_schema = current_schema() ORDER BY kcu.ordinal_position"
        ),
        {"t": table},
    ).all()
    return (rows[0][0] if rows else None), [r[1] for r in rows]


def _columns(conn: Connection, table: str) -> set[str]:
    # information_schema rather than sa.inspect: duckdb-engine's inspector trips on pg_catalog.
    return set(
        conn.execute(
            sa.text("SELECT column_name FROM information_schema.columns WHERE table_name = :t"),
            {"t": table},
        ).scalars()
    )


_TENANT_OF_OUTCOME = (
    "coalesce((SELECT min(p.tenant) FROM predictions p WHERE p.request_id = o.request_id), '')"
)


def _rekey_postgres(conn: Connection) -> None:
    """PostgreSQL: re-key ``predictions`` in place and give ``outcomes`` its tenant column."""
    name, columns = _primary_key(conn, "predictions")
    if name and columns != ["request_id", "tenant", "arm"]:
        conn.exec_driver_sql(
            f'ALTER TABLE predictions DROP CONSTRAINT "{name}", '
            "ADD PRIMARY KEY (request_id, tenant, arm)"
        )
    if "tenant" in _columns(conn, "outcomes"):
        return
    name, _ = _primary_key(conn, "outcomes")
    conn.exec_driver_sql("ALTER TABLE outcomes ADD COLUMN tenant VARCHAR")
    conn.exec_driver_sql(f"UPDATE outcomes o SET tenant = {_TENANT_OF_OUTCOME}")
    drop = f'DROP CONSTRAINT "{name}", ' if name else ""
    conn.exec_driver_sql(
        f"ALTER TABLE outcomes {drop}ALTER COLUMN tenant SET NOT NULL, "
        "ADD PRIMARY KEY (request_id, tenant)"
    )


def _scope_by_tenant(conn: Connection) -> None:
    """Key request ids by tenant: ``predictions`` by (request_id, tenant, arm), ``outcomes``
    by (request_id, tenant).

    Ids come from clients, so two tenants may log the same one; keyed by id alone
    the second tenant's row was dropped at sync and its labels attached to the
    first tenant's row. Before this migration a request id had one tenant in
    ``predictions``, so each existing outcome takes the tenant of the prediction
    it labels ('' where that prediction is gone). On DuckDB ``predictions`` has
    no key index (the loader keeps the key) and ``outcomes`` is copied, since
    DuckDB cannot drop a primary key in place.
    """
    if conn.dialect.name != "duckdb":
        _rekey_postgres(conn)
        return
    if "tenant" in _columns(conn, "outcomes"):  # created by migration 1 after this change
        return
    staging = _outcomes(sa.MetaData(), name="outcomes_rebuild")
    staging.create(conn)
    conn.exec_driver_sql(
        "INSERT INTO outcomes_rebuild (request_id, outcome, outcome_ts, source, loaded_at, tenant) "
        f"SELECT request_id, outcome, outcome_ts, source, loaded_at, {_TENANT_OF_OUTCOME} "
        "FROM outcomes o"
    )
    conn.exec_driver_sql("DROP TABLE outcomes")
    conn.exec_driver_sql("ALTER TABLE outcomes_rebuild RENAME TO outcomes")


MIGRATIONS.append((5, "request ids keyed by tenant (predictions, outcomes)", _scope_by_tenant))
MIGRATIONS.append(
    (6, "quarantine (lines of closed segments that did not load)", _create(quarantine))
)


# The text of an outcome loaded before migration 7: an integral number without ".0",
# as a file of class labels most likely wrote it.
_OUTCOME_TEXT = (
    "CASE WHEN outcome = floor(outcome) AND abs(outcome) < 1e15 "
    "THEN CAST(CAST(outcome AS BIGINT) AS VARCHAR) ELSE CAST(outcome AS VARCHAR) END"
)


def _task_columns(conn: Connection) -> None:
    """Make room for every task (binary, multiclass, regression) in ``predictions`` and
    ``outcomes``.

    ``predictions.label`` becomes nullable (a regression has none) and gains
    ``probabilities`` (multiclass); ``outcomes.outcome`` becomes nullable (a
    class label that is not a number) and gains ``outcome_label``, which
    existing outcomes take from their number. Both databases change the columns
    in place; a table created by migration 1 after this change has them already.
    """
    for table, column, nullable in (
        ("predictions", "probabilities", "label"),
        ("outcomes", "outcome_label", "outcome"),
    ):
        conn.exec_driver_sql(f"ALTER TABLE {table} ALTER COLUMN {nullable} DROP NOT NULL")
        if column not in _columns(conn, table):
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")
    conn.exec_driver_sql(
        f"UPDATE outcomes SET outcome_label = {_OUTCOME_TEXT} "
        "WHERE outcome_label IS NULL AND outcome IS NOT NULL"
    )


MIGRATIONS.append(
    (7, "task types: predictions.probabilities, outcomes.outcome_label", _task_columns)
)


def _kafka_offsets(conn: Connection) -> None:
    """``kafka_offsets``, and ``quarantine.line`` wide enough for a Kafka offset (BIGINT).

    PostgreSQL widens the column in place; DuckDB cannot change the type of a
    key column, so ``quarantine`` is copied.
    """
    kafka_offsets.create(conn, checkfirst=True)
    if conn.dialect.name != "duckdb":
        conn.exec_driver_sql("ALTER TABLE quarantine ALTER COLUMN line TYPE BIGINT")
        return
    kind = conn.exec_driver_sql(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_name = 'quarantine' AND column_name = 'line'"
    ).scalar_one()
    if kind == "BIGINT":  # created by migration 6 after this change
        return
    staging = quarantine.to_metadata(sa.MetaData(), name="quarantine_rebuild")
    staging.create(conn)
    conn.exec_driver_sql("INSERT INTO quarantine_rebuild SELECT * FROM quarantine")
    conn.exec_driver_sql("DROP TABLE quarantine")
    conn.exec_driver_sql("ALTER TABLE quarantine_rebuild RENAME TO quarantine")


MIGRATIONS.append((8, "kafka_offsets; quarantine.line as BIGINT (Kafka offsets)", _kafka_offsets))

PREDICTION_KEY = ("request_id", "tenant", "model", "arm")


def _key_by_model(conn: Connection) -> None:
    """Key ``predictions`` by (request_id, tenant, model, arm).

    Two models may score one request (the same order id to a fraud and a churn
    model); keyed without the model, the second model's row was dropped at
    sync as "already loaded". A wider key holds every existing row, so
    PostgreSQL re-keys in place (the index is rebuilt). DuckDB has no key
    index (migration 4): its loader keeps the key (``_sync``), so nothing
    changes in its file.
    """
    if conn.dialect.name == "duckdb":
        return
    name, columns = _primary_key(conn, "predictions")
    if columns == list(PREDICTION_KEY):  # created by migration 1 after this change
        return
    drop = f'DROP CONSTRAINT "{name}", ' if name else ""
    conn.exec_driver_sql(
        f"ALTER TABLE predictions {drop}ADD PRIMARY KEY ({', '.join(PREDICTION_KEY)})"
    )


MIGRATIONS.append((9, "predictions keyed by model too (two models, one request id)", _key_by_model))


# Who exported or erased which tenant's data, when, and how many rows (migration 10). In
# the warehouse, so a purge's deletes and its audit row commit in one transaction.
tenant_audit = sa.Table(
    "tenant_audit",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("recorded_at", sa.DateTime, nullable=False),  # UTC, naive
    sa.Column("actor", sa.String, nullable=False),
    sa.Column("action", sa.String, nullable=False),  # "export" | "purge"
    sa.Column("tenant", sa.String, nullable=False),
    sa.Column("entity_key", sa.String, nullable=True),  # a purge of one entity
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),  # JSON: rows per place, what was not reached
)

# A tenant's own retention, overriding settings.warehouse_retention_days (migration 10).
tenant_retention = sa.Table(
    "tenant_retention",
    metadata,
    sa.Column("tenant", sa.String, primary_key=True),
    sa.Column("days", sa.Integer, nullable=False),
    sa.Column("updated_at", sa.DateTime, nullable=False),
)

MIGRATIONS.append(
    (10, "tenant_audit, tenant_retention (data lifecycle)", _create(tenant_audit, tenant_retention))
)

# PostgreSQL only (migration 11): the key of each stored prediction, one row each, unpartitioned,
# since ``predictions`` is partitioned by day there and its own key must hold ``ts``
# (warehouse/_partitions.py). The loader claims a key here before it stores the row.
prediction_keys = sa.Table(
    "prediction_keys",
    metadata,
    sa.Column("request_id", sa.String, primary_key=True),
    sa.Column("tenant", sa.String, primary_key=True),
    sa.Column("model", sa.String, primary_key=True),
    sa.Column("arm", sa.String, primary_key=True),
    sa.Column("ts", sa.DateTime, nullable=False, index=True),  # the stored row's
)

MIGRATIONS.append(
    (
        11,
        "predictions partitioned by day, keyed in prediction_keys (PostgreSQL)",
        partition_predictions,
    )
)

# What retention last removed, one row per retention in force (migration 12): ``tenant`` is
# "" for the default (settings.warehouse_retention_days), else the tenant's own. Rows older
# than ``cutoff`` are gone for those tenants; reports over older windows say so.
retention_prunes = sa.Table(
    "retention_prunes",
    metadata,
    sa.Column("tenant", sa.String, primary_key=True),
    sa.Column("days", sa.Integer, nullable=False),
    sa.Column("cutoff", sa.DateTime, nullable=False),  # UTC, naive
    sa.Column("pruned_at", sa.DateTime, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),  # predictions + outcomes, the last prune
    sa.Column("rows_total", sa.BigInteger, nullable=False),  # since the first prune
)

MIGRATIONS.append((12, "retention_prunes (what retention removed)", _create(retention_prunes)))
HEAD = MIGRATIONS[-1][0]


def migrate(conn: Connection) -> list[int]:
    """Apply the migrations not yet recorded; returns the versions applied."""
    schema_migrations.create(conn, checkfirst=True)
    done = set(conn.execute(sa.select(schema_migrations.c.version)).scalars())
    applied = []
    for version, name, step in MIGRATIONS:
        if version in done:
            continue
        step(conn)
        conn.execute(
            schema_migrations.insert().values(
                version=version, name=name, applied_at=datetime.now(UTC).replace(tzinfo=None)
            )
        )
        applied.append(version)
    return applied


def current_version(conn: Connection) -> int:
    if not sa.inspect(conn).has_table("schema_migrations"):
        return 0
    return conn.execute(sa.select(sa.func.max(schema_migrations.c.version))).scalar() or 0
