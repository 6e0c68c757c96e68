"""Warehouse retention: rows past their tenant's retention pruned, younger ones kept.

On PostgreSQL ``predictions`` is partitioned by day (migration 11): a day past
every retention that holds rows in it is dropped whole, which the tests check
in the catalog (``pg_inherits``); a day some tenant still keeps loses only the
expired rows. Each test runs on a fresh DuckDB file and a fresh PostgreSQL
database (``either_warehouse``); under ``CI`` a missing PostgreSQL fails them.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
import sqlalchemy as sa

from mlpipe import security, warehouse
from mlpipe.config import Settings
from mlpipe.monitoring._reports import pruned_notes
from mlpipe.predlog import ENCODER, PredictionRecord
from mlpipe.warehouse import _engine, _schema
from mlpipe.warehouse._retention import _now, prune_rows
from mlpipe.windows import Window
from tests.conftest import run_in_process
from tests.integration.prod_services import either_warehouse  # noqa: F401 - `settings`

pytestmark = pytest.mark.integration

DAY = 86400.0
AGES = (1, 10, 40)  # days


def _records(tenant: str, ages: tuple[int, ...] = AGES) -> list[PredictionRecord]:
    now = time.time()
    return [
        PredictionRecord(
            request_id=f"{tenant}-{age}-{i}",
            ts=now - age * DAY,
            tenant=tenant,
            model="fraud",
            version="1",
            arm="champion",
            generation=1,
            entity_key=f"customer_id={i}",
            entity={"customer_id": i},
            features={"amount": 1.0},
            score=0.5,
            label=1,
            latency_ms=1.0,
        )
        for age in ages
        for i in range(3)
    ]


def _load(
    settings: Settings, tenants: tuple[str, ...], ages: tuple[int, ...] = AGES, name: str = "w1-1"
) -> None:
    path: Path = settings.predlog_path / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [r for t in tenants for r in _records(t, ages)]
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    warehouse.sync(settings)
    with warehouse.write(settings) as conn:
        conn.execute(
            _schema.outcomes.insert(),
            [
                {
                    "request_id": r.request_id,
                    "tenant": r.tenant,
                    "outcome": 1.0,
                    "outcome_label": "1",
                    "outcome_ts": datetime.utcfromtimestamp(r.ts),  # noqa: DTZ004 - naive UTC
                    "source": "test",
                    "loaded_at": _now(),
                }
                for r in records
            ],
        )


def _ages(settings: Settings, table: sa.Table, tenant: str) -> list[int]:
    with warehouse.read(settings) as conn:
        ids = conn.scalars(sa.select(table.c.request_id).where(table.c.tenant == tenant))
        return sorted({int(i.split("-")[1]) for i in ids})


def test_prune_by_tenant_retention_in_chunks(settings: Settings):
    for name in ("acme", "globex"):
        security.add_tenant(settings, name)
    _load(settings, ("acme", "globex", "default"))  # default: not a control-plane tenant
    settings = settings.model_copy(update={"warehouse_retention_days": 30})
    warehouse.set_tenant_retention(settings, "acme", 5)
    assert warehouse.tenant_retention(settings) == {"acme": 5}

    with _engine.writer(settings) as conn:
        pruned = prune_rows(conn, settings, _now(), chunk=2)  # many chunks of two
    assert (pruned.predictions, pruned.outcomes) == (3 + 3 + 3 + 3, 3 + 3 + 3 + 3)
    for table in (_schema.predictions, _schema.outcomes):
        assert _ages(settings, table, "acme") == [1]
        assert _ages(settings, table, "globex") == [1, 10]
        assert _ages(settings, table, "default") == [1, 10]
    marks = [(m.tenant, m.days, m.rows) for m in warehouse.prune_marks(settings)]
    assert marks == [(None, 30, 6 + 6), ("acme", 5, 6 + 6)]  # predictions + outcomes
    assert warehouse.prune(settings).rows == 0  # nothing left past retention
    marks = [(m.tenant, m.rows, m.rows_total) for m in warehouse.prune_marks(settings)]
    assert marks == [(None, 0, 12), ("acme", 0, 12)]
    latest = warehouse.latest_prune_cutoff(settings)  # the shortest retention's
    assert latest is not None and (latest.tenant, latest.days) == ("acme", 5)
    assert latest.note.startswith("tenant acme's rows before ")
    # a monitor's window that reaches back past a cutoff says so, one note per retention
    week, month = (Window(_now() - timedelta(days=d), _now()) for d in (7, 31))
    assert pruned_notes(settings, Window(_now() - timedelta(days=2), _now())) == []
    assert pruned_notes(settings, week) == [latest.note]
    assert [n.split(" before ")[0] for n in pruned_notes(settings, month)] == [
        "rows",
        "tenant acme's rows",
    ]

    warehouse.set_tenant_retention(settings, "globex", 0)  # back to the default
    assert warehouse.tenant_retention(settings) == {"acme": 5}


def test_without_retention_nothing_is_pruned_and_sync_prunes(settings: Settings):
    security.add_tenant(settings, "acme")
    _load(settings, ("acme",))
    assert warehouse.prune(settings).rows == 0
    assert _ages(settings, _schema.predictions, "acme") == list(AGES)
    keep = settings.model_copy(update={"warehouse_retention_days": 20})
    assert warehouse.sync(keep).rows_pruned == 3 + 3
    assert _ages(keep, _schema.predictions, "acme") == [1, 10]


def test_cli_retention_flags_and_prune(home, monkeypatch, capsys):
    def mlpipe(*args: str) -> tuple[int, str, str]:
        return run_in_process(monkeypatch, capsys, *args)

    code, _, err = mlpipe("tenants", "add", "acme", "--retention-days", "-3")
    assert (code, len(err.strip().splitlines())) == (2, 1) and "--retention-days -3" in err
    code, out, _ = mlpipe("tenants", "list", "--json")
    assert out.strip() == "[]"  # nothing added
    code, _, err = mlpipe("tenants", "add", "beta", "--retention-days", "7")
    assert code == 0, err
    from mlpipe.config import load_settings

    settings = load_settings(home=home)
    assert warehouse.tenant_retention(settings) == {"beta": 7}
    assert mlpipe("tenants", "add", "acme")[0] == 0
    _load(settings, ("acme",))  # its sync prunes nothing of acme's: no retention yet
    code, _, err = mlpipe("tenants", "set", "nobody", "--retention-days", "3")
    assert code == 2 and "no tenant 'nobody'" in err
    code, _, err = mlpipe("tenants", "set", "acme", "--retention-days", "3")
    assert code == 0 and "tenant acme: warehouse rows kept 3 day(s)" in err
    code, _, err = mlpipe("warehouse", "prune")
    assert code == 0 and "pruned 6 prediction(s), 6 outcome(s)" in err
    assert _ages(settings, _schema.predictions, "acme") == [1]


# --- PostgreSQL: predictions partitioned by day ------------------------------------------

ON_POSTGRES = pytest.mark.parametrize(
    "settings", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
_DEFAULT = "predictions_default"


def _partitions(settings: Settings) -> list[str]:
    """The partitions of ``predictions``, read from the catalog."""
    with warehouse.read(settings) as conn:
        return sorted(
            conn.exec_driver_sql(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'predictions'::regclass"
            ).scalars()
        )


def _day_partition(settings: Settings, age: int) -> str:
    """The partition that holds the rows of ``age`` days ago (by their ``ts``)."""
    with warehouse.read(settings) as conn:
        (day,) = set(
            conn.execute(
                sa.select(sa.cast(_schema.predictions.c.ts, sa.Date)).where(
                    _schema.predictions.c.request_id.like(f"%-{age}-%")
                )
            ).scalars()
        )
    return f"predictions_p{day:%Y%m%d}"


def _count(settings: Settings, sql: str) -> int:
    with warehouse.read(settings) as conn:
        return int(conn.exec_driver_sql(sql).scalar_one())


def _keys_match_rows(settings: Settings) -> bool:
    """Every stored prediction has its key in ``prediction_keys``, and no key is left over."""
    sql = (
        "SELECT count(*) FROM prediction_keys k FULL JOIN predictions p "
        "USING (request_id, tenant, model, arm, ts) WHERE k.ts IS NULL OR p.ts IS NULL"
    )
    return _count(settings, sql) == 0


def _write(settings: Settings, name: str, records: list[PredictionRecord]) -> None:
    path = settings.predlog_path / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))


@ON_POSTGRES
def test_postgres_prune_drops_the_days_past_every_retention(settings: Settings):
    for name in ("acme", "globex"):
        security.add_tenant(settings, name)
    _load(settings, ("acme", "globex", "default"))
    day = {age: _day_partition(settings, age) for age in AGES}
    assert _partitions(settings) == sorted([*day.values(), _DEFAULT])
    settings = settings.model_copy(update={"warehouse_retention_days": 30})
    warehouse.set_tenant_retention(settings, "acme", 5)

    with _engine.writer(settings) as conn:
        pruned = prune_rows(conn, settings, _now(), chunk=2)
    # 40 days ago is past 30 and 5 days: dropped whole (9 rows); of 10 days ago only acme's 3
    assert (pruned.partitions, pruned.predictions, pruned.outcomes) == (1, 9 + 3, 12)
    assert _partitions(settings) == sorted([day[1], day[10], _DEFAULT])
    assert _ages(settings, _schema.predictions, "acme") == [1]
    assert _ages(settings, _schema.predictions, "globex") == [1, 10]
    assert _ages(settings, _schema.predictions, "default") == [1, 10]
    assert _count(settings, f"SELECT count(*) FROM {_DEFAULT}") == 0
    assert _keys_match_rows(settings)  # the dropped day's keys went with it
    again = warehouse.prune(settings)
    assert (again.rows, again.partitions) == (0, 0)

    # the id of a dropped row is free again: logged anew, it is stored, not taken for reused
    record = _records("acme", (40,))[0]
    _write(settings, "w2-1", [msgspec.structs.replace(record, ts=time.time())])
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.reused_ids) == (1, 0)


@ON_POSTGRES
def test_postgres_a_day_a_tenant_still_keeps_loses_only_the_expired_rows(settings: Settings):
    security.add_tenant(settings, "acme")
    _load(settings, ("acme", "globex"), ages=(40,))  # globex: no retention, kept forever
    _load(settings, ("acme",), ages=(20,), name="w1-2")
    day40, day20 = _day_partition(settings, 40), _day_partition(settings, 20)
    assert _partitions(settings) == sorted([day20, day40, _DEFAULT])
    warehouse.set_tenant_retention(settings, "acme", 5)

    pruned = warehouse.prune(settings)
    assert (pruned.partitions, pruned.predictions) == (1, 3 + 3)  # day 20 dropped, then rows
    assert _partitions(settings) == sorted([day40, _DEFAULT])
    assert _ages(settings, _schema.predictions, "acme") == []
    assert _ages(settings, _schema.predictions, "globex") == [40]
    assert _keys_match_rows(settings)
    [mark] = warehouse.prune_marks(settings)  # no default retention: acme's alone
    assert (mark.tenant, mark.days, mark.rows, mark.rows_total) == ("acme", 5, 12, 12)


@ON_POSTGRES
def test_postgres_the_day_the_cutoff_falls_in_is_not_dropped(settings: Settings):
    _load(settings, ("acme",))
    day = {age: _day_partition(settings, age) for age in AGES}
    settings = settings.model_copy(update={"warehouse_retention_days": 30})
    start = datetime.strptime(day[10][-8:], "%Y%m%d")
    now = start + timedelta(days=30, microseconds=1)  # the cutoff: just into that day
    with _engine.writer(settings) as conn:
        pruned = prune_rows(conn, settings, now)
    assert (pruned.partitions, pruned.predictions) == (1, 3)  # 40 days ago
    assert _partitions(settings) == sorted([day[1], day[10], _DEFAULT])
    assert _ages(settings, _schema.predictions, "acme") == [1, 10]


@ON_POSTGRES
def test_postgres_rows_in_the_default_partition_move_to_their_day(settings: Settings):
    _load(settings, ("acme",), ages=(1,))
    stray = _records("stray", (3,))[0]
    row = {
        **{c: getattr(stray, c) for c in ("request_id", "tenant", "model", "version", "arm")},
        "ts": datetime.fromtimestamp(stray.ts, UTC).replace(tzinfo=None),
        "generation": 1,
        "entity_key": stray.entity_key,
        "entity": "{}",
        "features": "{}",
        "score": 0.5,
        "label": 1,
        "latency_ms": 1.0,
        "feature_cache_hit": False,
        "prediction_cache_hit": False,
        "features_missing": "[]",
        "status": "ok",
        "segment": "by-hand",
        "loaded_at": _now(),
    }
    with warehouse.write(settings) as conn:  # SQL by hand: no day partition made for it
        conn.execute(_schema.predictions.insert().values(row))
    assert _count(settings, f"SELECT count(*) FROM {_DEFAULT}") == 1

    _load(settings, ("globex",), ages=(3,), name="w1-2")  # the loader makes that day's partition
    day3 = _day_partition(settings, 3)
    assert _count(settings, f"SELECT count(*) FROM {_DEFAULT}") == 0
    assert _count(settings, f"SELECT count(*) FROM {day3}") == 3 + 1
    assert _keys_match_rows(settings)  # the moved row has its key now


@ON_POSTGRES
def test_postgres_an_unpartitioned_warehouse_is_partitioned_with_its_rows(settings: Settings):
    from tests.integration.warehouse_past import unpartition_predictions

    _load(settings, ("acme", "globex"))
    columns = ", ".join(c.name for c in _schema.predictions.columns)
    every_row = f"SELECT {columns} FROM predictions ORDER BY request_id, model, arm"
    engine = sa.create_engine(settings.warehouse, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:  # back to what migration 10 left
        unpartition_predictions(conn)
        kind = conn.exec_driver_sql("SELECT relkind FROM pg_class WHERE relname = 'predictions'")
        assert kind.scalar_one() == "r"
        before = [tuple(r) for r in conn.exec_driver_sql(every_row)]
    engine.dispose()
    assert len(before) == 2 * 3 * len(AGES)

    # a new request, and one that reuses an id stored 40 days ago
    fresh = _records("acme", (0,))[0]
    reused = msgspec.structs.replace(_records("acme", (40,))[0], ts=time.time())
    _write(settings, "w2-1", [fresh, reused])
    result = warehouse.sync(settings)  # migrations 11 and 12 run first
    assert (result.rows_loaded, result.reused_ids) == (1, 1)
    after = warehouse.query(settings, every_row, limit=100).rows
    assert [r for r in after if r[0] != fresh.request_id] == before
    days = {_day_partition(settings, age) for age in (0, *AGES)}
    assert _partitions(settings) == sorted([*days, _DEFAULT])
    assert _count(settings, f"SELECT count(*) FROM {_DEFAULT}") == 0
    assert _keys_match_rows(settings)
    assert _count(settings, "SELECT max(version) FROM schema_migrations") == _schema.HEAD


def test_cli_prune_and_status_say_what_retention_removed(settings: Settings, monkeypatch, capsys):
    for key in list(os.environ):
        if key.startswith("MLPIPE_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("MLPIPE_HOME", str(settings.home))
    monkeypatch.setenv("MLPIPE_WAREHOUSE_URL", settings.warehouse)
    monkeypatch.setenv("MLPIPE_WAREHOUSE_RETENTION_DAYS", "30")
    _load(settings, ("acme",))  # `settings` has no retention: this sync prunes nothing
    on_postgres = not settings.warehouse.startswith("duckdb")

    code, _, err = run_in_process(monkeypatch, capsys, "warehouse", "prune")
    dropped = " (1 day partition(s) dropped)" if on_postgres else ""
    assert code == 0 and f"pruned 3 prediction(s){dropped}, 3 outcome(s)" in err
    code, out, err = run_in_process(monkeypatch, capsys, "warehouse", "status")
    assert code == 0, err
    text = " ".join(out.replace("│", " ").split())  # a cell may wrap onto the next line
    assert re.search(
        r"rows before \d{4}-\d\d-\d\d \d\d:\d\d UTC pruned \(retention 30 day\(s\)\); the last "
        r"prune \(.{16}\) removed 6, 6 in all",
        text,
    ), text
    assert "predictions 6 row(s)" in text
    if on_postgres:
        assert "2 day partition(s) of predictions" in text
        assert "0 row(s) in the default partition" in text
    code, out, _ = run_in_process(monkeypatch, capsys, "warehouse", "status", "--json")
    found = json.loads(out)
    assert [(m["tenant"], m["days"], m["rows"]) for m in found["prunes"]] == [(None, 30, 6)]
    assert len(found["partition_days"]) == (2 if on_postgres else 0)
    mark = warehouse.latest_prune_cutoff(settings)
    assert mark is not None and mark.covers(_now() - timedelta(days=31))
    assert not mark.covers(_now() - timedelta(days=29))

    # the report index says which reports cover a window whose rows were pruned since
    warehouse.record_reports(
        settings,
        [
            warehouse.ReportEntry(
                f"r{age}",
                "drift",
                "fraud",
                None,
                "1",
                _now() - timedelta(days=age),
                _now(),
                _now(),
                "pass",
                None,
                {},
            )
            for age in (45, 7)
        ],
    )
    code, out, err = run_in_process(monkeypatch, capsys, "warehouse", "reports", "--json")
    assert {e["id"]: e["rows_pruned"] for e in json.loads(out)} == {"r45": True, "r7": False}
    code, out, err = run_in_process(monkeypatch, capsys, "warehouse", "reports")
    assert code == 0 and "1 of these report(s) cover a window from before the cutoff: rows " in err
