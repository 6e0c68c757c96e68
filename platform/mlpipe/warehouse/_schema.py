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
    """One row per logged prediction, keyed by (request_id, arm).

    A shadow answer shares its request id with the answer the client got, hence
    the arm in the key. On DuckDB the key is kept by the loader, not by a
    primary-key index (migration 4, :func:`_drop_predictions_key`).
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
        sa.Column("label", sa.Integer, nullable=False),
        sa.Column("latency_ms", sa.Double, nullable=False),
        sa.Column("feature_cache_hit", sa.Boolean, nullable=False),
        sa.Column("prediction_cache_hit", sa.Boolean, nullable=False),
        sa.Column("features_missing", sa.Text, nullable=False),  # JSON list
        sa.Column("status", sa.String, nullable=False),
        sa.Column("segment", sa.String, nullable=False),
        sa.Column("loaded_at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("request_id", "arm").ddl_if(callable_=_not_duckdb),
    )


predictions = _predictions(metadata)

# Ground truth, resolved to the request it labels when it is loaded.
outcomes = sa.Table(
    "outcomes",
    metadata,
    sa.Column("request_id", sa.String, primary_key=True),
    sa.Column("outcome", sa.Double, nullable=False),
    sa.Column("outcome_ts", sa.DateTime, nullable=True),
    sa.Column("source", sa.String, nullable=False),
    sa.Column("loaded_at", sa.DateTime, nullable=False),
)

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
def _column_with_compression(element: CreateColumn, compiler: sa.sql.compiler.DDLCompiler, **kw):
    """DuckDB's ``USING COMPRESSION`` for a column whose ``info`` asks for one."""
    text = compiler.visit_create_column(element, **kw)
    method = element.element.info.get("duckdb_compression")
    return f"{text} USING COMPRESSION {method}" if method and text else text


def _replace_predictions(conn: Connection, staging: sa.Table) -> None:
    """Copy ``predictions`` into ``staging`` (created here), then put it in its place."""
    staging.create(conn)
    conn.exec_driver_sql(f"INSERT INTO {staging.name} SELECT * FROM predictions")
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
