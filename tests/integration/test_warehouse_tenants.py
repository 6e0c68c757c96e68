"""Request ids are scoped by tenant in the warehouse and in ``outcomes load`` (issue 23, item 6).

Before the fix ``predictions`` was keyed by ``(request_id, arm)``: a second
tenant's row with an id the first tenant had used was dropped at sync ("already
loaded"), and an outcome for that id attached to the first tenant's row. Each
test runs on a DuckDB file and on a real PostgreSQL.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.predlog import ENCODER, PredictionRecord
from tests.conftest import run_cli
from tests.integration.prod_services import either_warehouse  # noqa: F401 - `settings`
from tests.integration.warehouse_past import unpartition_predictions

pytestmark = pytest.mark.integration

START = time.time() - 600


def _record(request_id: str, tenant: str, customer: int, **changes: object) -> PredictionRecord:
    record = PredictionRecord(
        request_id=request_id,
        ts=START + customer,
        tenant=tenant,
        model="fraud",
        version="1",
        arm="champion",
        generation=1,
        entity_key=f"customer_id={customer}",
        entity={"customer_id": customer},
        features={"amount": float(customer)},
        score=0.5,
        label=1,
        latency_ms=2.0,
    )
    return msgspec.structs.replace(record, **changes)


def _write(path: Path, records: list[PredictionRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))


@pytest.fixture
def two_tenants(settings: Settings) -> Settings:
    """acme and globex both logged ``same-1`` (and its shadow answer); ``a-2`` is acme's only."""
    _write(
        settings.predlog_path / "w1" / "seg-1.jsonl",
        [
            _record("same-1", "acme", 1),
            _record("same-1", "acme", 1, arm="shadow", version="2"),
            _record("a-2", "acme", 2),
        ],
    )
    _write(
        settings.predlog_path / "w2" / "seg-1.jsonl",
        [_record("same-1", "globex", 3), _record("same-1", "globex", 3, arm="shadow")],
    )
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.duplicates) == (5, 0)
    return settings


def _outcomes(settings: Settings) -> list[tuple[str, str, float]]:
    sql = "SELECT tenant, request_id, outcome FROM outcomes ORDER BY tenant, request_id"
    return [tuple(r) for r in warehouse.query(settings, sql).rows]  # type: ignore[misc]


def test_the_same_request_id_of_two_tenants_loads_twice_and_once(two_tenants: Settings) -> None:
    settings = two_tenants
    rows = warehouse.query(
        settings,
        "SELECT tenant, arm, entity_key FROM predictions WHERE request_id = 'same-1' "
        "ORDER BY tenant, arm",
    ).rows
    assert [tuple(r) for r in rows] == [
        ("acme", "champion", "customer_id=1"),
        ("acme", "shadow", "customer_id=1"),
        ("globex", "champion", "customer_id=3"),
        ("globex", "shadow", "customer_id=3"),
    ]
    # a replay of globex's segment in another folder adds nothing
    _write(settings.predlog_path / "w3" / "replay.jsonl", [_record("same-1", "globex", 3)])
    again = warehouse.sync(settings)
    assert (again.rows_loaded, again.duplicates, again.rows_total) == (0, 1, 5)


def test_a_replay_of_thousands_of_rows_of_two_tenants_adds_nothing(settings: Settings) -> None:
    # more keys than one existence check takes (1,000 on PostgreSQL)
    rows = [_record(f"r{i}", tenant, i) for i in range(1200) for tenant in ("acme", "globex")]
    _write(settings.predlog_path / "w1" / "seg.jsonl", rows)
    assert warehouse.sync(settings).rows_loaded == 2400
    _write(settings.predlog_path / "w2" / "replay.jsonl", rows)
    again = warehouse.sync(settings)
    assert (again.rows_loaded, again.duplicates, again.rows_total) == (0, 2400, 2400)


def test_an_outcome_for_an_id_two_tenants_share_is_refused_without_a_tenant(
    two_tenants: Settings, tmp_path: Path
) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text("request_id,label\na-2,0\nsame-1,1\n")
    with pytest.raises(InvalidInput) as refused:
        warehouse.load_outcomes(two_tenants, labels)
    assert str(refused.value) == (
        f"{labels}: 1 request id(s) logged by more than one tenant (first: same-1, by acme, "
        "globex); name the tenant with --tenant or a 'tenant' column"
    )
    assert _outcomes(two_tenants) == []


def test_outcomes_attach_to_the_tenant_named(two_tenants: Settings, tmp_path: Path) -> None:
    settings = two_tenants
    unique = tmp_path / "unique.csv"
    unique.write_text("request_id,label\na-2,0\n")  # one tenant logged it: no tenant needed
    assert warehouse.load_outcomes(settings, unique).inserted == 1
    labels = tmp_path / "labels.csv"
    labels.write_text("request_id,label\nsame-1,1\n")
    assert warehouse.load_outcomes(settings, labels, tenant="globex").inserted == 1
    by_column = tmp_path / "by-column.csv"
    by_column.write_text("tenant,request_id,label\nacme,same-1,0\n")
    assert warehouse.load_outcomes(settings, by_column).inserted == 1
    assert _outcomes(settings) == [
        ("acme", "a-2", 0.0),
        ("acme", "same-1", 0.0),
        ("globex", "same-1", 1.0),
    ]
    # the label joins its own tenant's prediction, not the other's
    window = warehouse.prediction_window(
        settings, "fraud", datetime(2000, 1, 1), datetime.now(UTC).replace(tzinfo=None)
    )
    joined = window.rows[window.rows["request_id"] == "same-1"]
    assert sorted(joined["outcome"].tolist()) == [0.0, 0.0, 1.0, 1.0]  # champion + shadow each
    assert len(window.rows) == 5


@pytest.mark.parametrize(
    ("content", "tenant", "match"),
    [
        ("request_id,label\nsame-1,1\n", "initech", "not logged by tenant initech"),
        ("request_id,label\na-2,1\n", "globex", "not logged by tenant globex"),
        ("tenant,request_id,label\nacme,same-1,1\n", "acme", "a 'tenant' column and --tenant"),
        ("tenant,request_id,label\n,same-1,1\n", None, "tenant on data row 1 is empty"),
    ],
)
def test_bad_tenant_outcomes_change_nothing(
    two_tenants: Settings, tmp_path: Path, content: str, tenant: str | None, match: str
) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text(content)
    with pytest.raises(InvalidInput, match=match):
        warehouse.load_outcomes(two_tenants, labels, tenant=tenant)
    assert _outcomes(two_tenants) == []


def test_outcomes_by_entity_are_scoped_by_tenant(settings: Settings, tmp_path: Path) -> None:
    # both tenants have a customer_id=5 (each its own customer)
    _write(
        settings.predlog_path / "seg.jsonl",
        [_record("x-1", "acme", 5), _record("y-1", "globex", 5, ts=START + 7)],
    )
    warehouse.sync(settings)
    at = datetime.fromtimestamp(START + 10, UTC).isoformat()
    labels = tmp_path / "late.csv"
    labels.write_text(f"entity_key,timestamp,label\ncustomer_id=5,{at},1\n")
    with pytest.raises(InvalidInput, match="entity key\\(s\\) logged by more than one tenant"):
        warehouse.load_outcomes(settings, labels)
    assert _outcomes(settings) == []
    assert warehouse.load_outcomes(settings, labels, tenant="acme").inserted == 1
    assert _outcomes(settings) == [("acme", "x-1", 1.0)]


@pytest.mark.parametrize("settings", ["duckdb"], indirect=True)
def test_outcomes_load_cli_takes_tenant_and_refuses_an_ambiguous_id(
    two_tenants: Settings, tmp_path: Path
) -> None:
    settings = two_tenants
    env = {"MLPIPE_HOME": str(settings.home), "MLPIPE_WAREHOUSE_URL": settings.warehouse}
    labels = tmp_path / "labels.csv"
    labels.write_text("request_id,label\nsame-1,1\n")
    refused = run_cli("outcomes", "load", str(labels), env=env)
    assert refused.returncode == 2
    assert "logged by more than one tenant (first: same-1, by acme, globex)" in refused.stderr
    assert _outcomes(settings) == []
    done = run_cli("outcomes", "load", str(labels), "--tenant", "acme", env=env)
    assert done.returncode == 0, done.stderr
    assert _outcomes(settings) == [("acme", "same-1", 1.0)]


_OLD_OUTCOMES = (
    "CREATE TABLE outcomes (request_id VARCHAR NOT NULL PRIMARY KEY, outcome DOUBLE PRECISION "
    "NOT NULL, outcome_ts TIMESTAMP, source VARCHAR NOT NULL, loaded_at TIMESTAMP NOT NULL)"
)


def _back_to_migration_4(settings: Settings) -> None:
    """Put the warehouse back to what migration 4 left: ids keyed without their tenant."""
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    engine = sa.create_engine(settings.warehouse, poolclass=NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE outcomes")
        conn.exec_driver_sql("DROP TABLE quarantine")
        conn.exec_driver_sql(_OLD_OUTCOMES)
        conn.exec_driver_sql(
            "INSERT INTO outcomes VALUES ('a-2', 1.0, NULL, 'old.csv', TIMESTAMP '2026-01-01')"
        )
        if conn.dialect.name != "duckdb":
            unpartition_predictions(conn)  # migration 11
            conn.exec_driver_sql(
                "ALTER TABLE predictions DROP CONSTRAINT predictions_pkey, "
                "ADD PRIMARY KEY (request_id, arm)"
            )
        conn.exec_driver_sql("DELETE FROM schema_migrations WHERE version >= 5")
    engine.dispose()


def test_a_warehouse_keyed_by_request_id_alone_is_migrated(settings: Settings) -> None:
    from mlpipe.warehouse import _schema

    _write(settings.predlog_path / "w1" / "seg.jsonl", [_record("a-2", "acme", 2)])
    warehouse.sync(settings)
    _back_to_migration_4(settings)
    _write(settings.predlog_path / "w2" / "seg.jsonl", [_record("a-2", "globex", 4)])
    result = warehouse.sync(settings)  # migrations 5 and 6 run first
    assert (result.rows_loaded, result.rows_total) == (1, 2)
    assert _outcomes(settings) == [("acme", "a-2", 1.0)]  # the tenant of the row it labelled
    versions = warehouse.query(settings, "SELECT max(version) FROM schema_migrations").rows
    assert versions == [(_schema.HEAD,)]
    assert warehouse.query(settings, "SELECT count(*) FROM quarantine").rows == [(0,)]
    if not settings.warehouse.startswith("duckdb"):
        keys = warehouse.query(
            settings,
            "SELECT tc.table_name, string_agg(k.column_name, ',' ORDER BY k.ordinal_position) "
            "FROM information_schema.table_constraints tc JOIN information_schema.key_column_usage"
            " k USING (constraint_schema, constraint_name) WHERE tc.constraint_type = "
            "'PRIMARY KEY' AND tc.table_name IN ('predictions', 'prediction_keys', 'outcomes') "
            "GROUP BY 1 ORDER BY 1",
        ).rows
        assert keys == [
            ("outcomes", "request_id,tenant"),
            ("prediction_keys", "request_id,tenant,model,arm"),  # migrations 9 and 11
            ("predictions", "request_id,tenant,model,arm,ts"),  # day partitions (migration 11)
        ]
    labels = settings.home / "labels.csv"
    labels.write_text("request_id,label\na-2,0\n")
    with pytest.raises(InvalidInput, match="more than one tenant"):
        warehouse.load_outcomes(settings, labels)
