"""Warehouse retention: rows past their tenant's retention pruned, younger ones kept."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from mlpipe import security, warehouse
from mlpipe.config import Settings
from mlpipe.predlog import ENCODER, PredictionRecord
from mlpipe.warehouse import _engine, _schema
from mlpipe.warehouse._retention import _now, prune_rows
from tests.conftest import run_in_process
from tests.integration.prod_services import either_warehouse  # noqa: F401 - `settings`

pytestmark = pytest.mark.integration

DAY = 86400.0
AGES = (1, 10, 40)  # days


def _records(tenant: str) -> list[PredictionRecord]:
    return [
        PredictionRecord(
            request_id=f"{tenant}-{age}-{i}",
            ts=time.time() - age * DAY,
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
        for age in AGES
        for i in range(3)
    ]


def _load(settings: Settings, tenants: tuple[str, ...]) -> None:
    path: Path = settings.predlog_path / "w1-1.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [r for t in tenants for r in _records(t)]
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    warehouse.sync(settings)
    from datetime import datetime

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
    assert warehouse.prune(settings).rows == 0  # nothing left past retention

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
