"""One tenant's data exported and erased, on DuckDB and PostgreSQL, beside another tenant's."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from mlpipe import security, warehouse
from mlpipe.config import Settings
from mlpipe.predlog import ENCODER, PredictionRecord
from mlpipe.warehouse import _schema
from tests.conftest import run_in_process
from tests.integration.prod_services import either_warehouse  # noqa: F401 - `settings`

pytestmark = pytest.mark.integration

T0 = time.time() - 3600


def _record(i: int, tenant: str, **changes: object) -> PredictionRecord:
    fields: dict[str, object] = {
        "request_id": f"{tenant}-{i}",
        "ts": T0 + i,
        "tenant": tenant,
        "model": "fraud",
        "version": "1",
        "arm": "champion",
        "generation": 1,
        "entity_key": f"customer_id={i % 3}",
        "entity": {"customer_id": i % 3},
        "features": {"amount": float(i)},
        "score": 0.5,
        "label": i % 2,
        "latency_ms": 1.0,
    }
    return PredictionRecord(**{**fields, **changes})  # type: ignore[arg-type]


def _write(path: Path, records: list[PredictionRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))


def _ids(settings: Settings, table: sa.Table, tenant: str) -> set[str]:
    with warehouse.read(settings) as conn:
        return set(conn.scalars(sa.select(table.c.request_id).where(table.c.tenant == tenant)))


def _segment_tenants(settings: Settings) -> dict[str, int]:
    from mlpipe.predlog import DECODER

    seen: dict[str, int] = {}
    for path in settings.predlog_path.rglob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            try:
                tenant = DECODER.decode(line).tenant
            except Exception:  # noqa: BLE001 - a quarantined line: read its tenant by hand
                tenant = line.split(b'"tenant":"')[1].split(b'"')[0].decode()
            seen[tenant] = seen.get(tenant, 0) + 1
    return seen


@pytest.fixture
def two_tenants(settings: Settings) -> Settings:
    """acme and globex: 12 rows each loaded (6 with outcomes), one acme line quarantined,
    and a closed segment with 6 rows each not loaded yet."""
    for name in ("acme", "globex"):
        security.add_tenant(settings, name)
    loaded = [_record(i, t) for i in range(12) for t in ("acme", "globex")]
    bad = _record(98, "acme", label=2**40)  # a label no INTEGER holds: quarantined
    _write(settings.predlog_path / "w1" / "w1-1.jsonl", [*loaded, bad])
    warehouse.sync(settings)
    with warehouse.write(settings) as conn:
        conn.execute(
            _schema.outcomes.insert(),
            [
                {
                    "request_id": f"{t}-{i}",
                    "tenant": t,
                    "outcome": float(i % 2),
                    "outcome_label": str(i % 2),
                    "outcome_ts": datetime(2026, 1, 1),
                    "source": "test",
                    "loaded_at": datetime(2026, 1, 1),
                }
                for i in range(0, 12, 2)
                for t in ("acme", "globex")
            ],
        )
    fresh = [_record(i, t) for i in range(100, 106) for t in ("acme", "globex")]
    _write(settings.predlog_path / "w1" / "w1-2.jsonl", fresh)  # not loaded yet
    return settings


def test_export_holds_exactly_the_tenants_rows_and_outcomes(two_tenants, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "acme.parquet"
    done = warehouse.export_tenant(two_tenants, "acme", out)
    table = pq.read_table(out).to_pylist()
    assert (done.predictions, done.outcomes) == (12, 6)
    assert {r["request_id"] for r in table} == {f"acme-{i}" for i in range(12)}
    assert {r["tenant"] for r in table} == {"acme"}
    labelled = {r["request_id"]: r["outcome"] for r in table if r["outcome_source"] is not None}
    assert labelled == {f"acme-{i}": float(i % 2) for i in range(0, 12, 2)}
    assert table[0]["entity_key"] == "customer_id=0" and table[0]["features"]

    window = warehouse.export_tenant(
        two_tenants,
        "acme",
        tmp_path / "w.parquet",
        since=datetime.utcfromtimestamp(T0 + 2),  # noqa: DTZ004 - naive UTC
        until=datetime.utcfromtimestamp(T0 + 5),  # noqa: DTZ004
    )
    assert window.predictions == 3


def test_purge_an_entity_then_the_tenant_and_the_audit(two_tenants):
    s = two_tenants
    globex_before = _ids(s, _schema.predictions, "globex")
    preview = warehouse.purge_tenant(s, "acme", entity_key="customer_id=0")
    assert not preview.applied and (preview.predictions, preview.outcomes) == (4, 2)
    assert preview.segment_rows == 4 + 2  # the loaded segment's 4, the unloaded one's 2
    assert len(_ids(s, _schema.predictions, "acme")) == 12  # a preview changes nothing

    one = warehouse.purge_tenant(s, "acme", entity_key="customer_id=0", apply=True)
    assert (one.predictions, one.outcomes, one.quarantine) == (4, 2, 0)
    acme = _ids(s, _schema.predictions, "acme")
    assert acme == {f"acme-{i}" for i in range(12) if i % 3}
    assert _ids(s, _schema.outcomes, "acme") == {f"acme-{i}" for i in range(0, 12, 2) if i % 3}

    whole = warehouse.purge_tenant(s, "acme", apply=True)
    assert (whole.predictions, whole.outcomes, whole.quarantine) == (8, 4, 1)
    assert whole.segment_rows == 8 + 1 + 4  # loaded (and the quarantined line), unloaded
    warehouse.sync(s)  # the unloaded segment, rewritten, loads no acme row
    assert _ids(s, _schema.predictions, "acme") == set()
    assert _ids(s, _schema.outcomes, "acme") == set()
    assert _segment_tenants(s) == {"globex": 18}
    assert _ids(s, _schema.predictions, "globex") == globex_before | {
        f"globex-{i}" for i in range(100, 106)
    }
    assert len(_ids(s, _schema.outcomes, "globex")) == 6
    with warehouse.read(s) as conn:
        assert (
            conn.execute(sa.select(sa.func.count()).select_from(_schema.quarantine)).scalar() == 0
        )

    again = warehouse.purge_tenant(s, "acme", apply=True)
    assert again.rows == 0
    audit = warehouse.tenant_audit(s, "acme")
    assert [(e.action, e.entity_key, e.rows) for e in audit] == [
        ("purge", "customer_id=0", 4 + 2 + 6),
        ("purge", None, 8 + 4 + 1 + 13),
        ("purge", None, 0),
    ]
    assert audit[0].actor == s.actor and audit[1].detail["segments_rewritten"] == 2


def test_rows_in_a_segment_still_open_are_named_not_reached(two_tenants):
    s = two_tenants
    _write(s.predlog_path / "w2" / "w2-1.jsonl.open", [_record(200, "acme")])
    result = warehouse.purge_tenant(s, "acme", apply=True)
    assert any("1 row(s) in 1 segment(s) still being written" in n for n in result.unreachable)
    assert (s.predlog_path / "w2" / "w2-1.jsonl.open").read_bytes().count(b"acme") == 2


def test_cli_purge_without_yes_exports_errors_and_audit(home, monkeypatch, capsys):
    from mlpipe.config import load_settings

    settings = load_settings(home=home)
    for name in ("acme", "globex"):
        security.add_tenant(settings, name)
    _write(settings.predlog_path / "w1-1.jsonl", [_record(i, "acme") for i in range(3)])
    warehouse.sync(settings)

    def mlpipe(*args: str) -> tuple[int, str, str]:
        return run_in_process(monkeypatch, capsys, *args)

    code, _, err = mlpipe("tenants", "purge", "acme")
    assert code == 2 and "would delete for tenant acme: 3 prediction(s)" in err
    assert "run again with --yes" in err
    assert len(_ids(settings, _schema.predictions, "acme")) == 3

    for args, message in [
        (("tenants", "purge", "nobody", "--yes"), "no tenant 'nobody'"),
        (("tenants", "export", "acme", "--out", "x.csv"), "(name it *.parquet)"),
        (("tenants", "export", "acme", "--out", "no/x.parquet"), "directory no does not exist"),
        (("tenants", "export", "acme", "--out", "x.parquet", "--since", "soon"), "bad --since"),
        (
            ("tenants", "export", "acme", "--out", "x.parquet", "--since", "1d", "--until", "2d"),
            "is not before --until",
        ),
    ]:
        code, out, err = mlpipe(*args)
        assert (code, out) == (2, ""), (args, err)
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (home / "x.parquet").exists()

    code, _, err = mlpipe("tenants", "export", "acme", "--out", "acme.parquet", "--since", "2h")
    assert code == 0 and "exported 3 prediction(s) of tenant acme" in err
    code, _, err = mlpipe("tenants", "purge", "acme", "--yes")
    assert code == 0 and "purged for tenant acme: 3 prediction(s)" in err
    assert "prediction caches" in err
    code, out, _ = mlpipe("tenants", "audit", "--json")
    import json

    assert [(e["action"], e["tenant"], e["rows"]) for e in json.loads(out)] == [
        ("export", "acme", 3),
        ("purge", "acme", 6),
    ]
    assert _ids(settings, _schema.predictions, "acme") == set()
    assert datetime.now() - timedelta(days=1) < datetime.now()
