"""A tenant's data: exported to Parquet, purged from the warehouse and the log, each audited."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput, NotFound
from mlpipe.warehouse._tenant_data import parse_instant
from tests.unit.warehouse.logged import records, write_segment


def _two_tenants(settings: Settings) -> Path:
    path = write_segment(
        settings, "s.jsonl", records(3, "a", tenant="acme") + records(2, "g", tenant="globex")
    )
    warehouse.sync(settings)
    return path


def test_an_export_holds_the_tenants_rows_only(settings: Settings, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    _two_tenants(settings)
    out = tmp_path / "acme.parquet"
    result = warehouse.export_tenant(settings, "acme", out)
    assert (result.predictions, result.outcomes) == (3, 0)
    table = pq.read_table(out)
    assert sorted(table.column("request_id").to_pylist()) == ["a0", "a1", "a2"]
    [entry] = warehouse.tenant_audit(settings, "acme")
    assert (entry.action, entry.rows, entry.detail["out"]) == ("export", 3, str(out))


def test_a_purge_counts_first_then_erases_rows_and_log_lines(settings: Settings) -> None:
    segment = _two_tenants(settings)
    dry = warehouse.purge_tenant(settings, "acme")
    assert (dry.applied, dry.predictions, dry.segment_rows) == (False, 3, 3)
    assert warehouse.query(settings, "SELECT count(*) FROM predictions").rows == [(5,)]
    done = warehouse.purge_tenant(settings, "acme", apply=True)
    assert (done.predictions, done.segment_rows, done.segments_rewritten) == (3, 3, 1)
    left = warehouse.query(settings, "SELECT DISTINCT tenant FROM predictions").rows
    assert left == [("globex",)]
    assert b'"acme"' not in segment.read_bytes() and segment.read_bytes().count(b"\n") == 2
    assert warehouse.sync(settings).rows_loaded == 0  # the rewritten segment is not re-read
    assert [e.action for e in warehouse.tenant_audit(settings)] == ["purge"]


def test_an_unknown_tenant_is_refused(settings: Settings, tmp_path: Path) -> None:
    _two_tenants(settings)
    with pytest.raises(NotFound) as caught:
        warehouse.purge_tenant(settings, "acme-typo")
    assert str(caught.value) == (
        "no tenant 'acme-typo': not in the control plane, no rows in the warehouse"
    )


@pytest.mark.parametrize(
    ("out", "kwargs", "message"),
    [
        ("a.csv", {}, "--out {out}: the export is a Parquet file (name it *.parquet)"),
        ("no/such/a.parquet", {}, "--out {out}: directory {parent} does not exist"),
        (
            "a.parquet",
            {"since": "2026-01-02", "until": "2026-01-01"},
            "--since 2026-01-02 00:00:00 is not before --until 2026-01-01 00:00:00",
        ),
        (
            "a.parquet",
            {"since": "soon"},
            "bad --since 'soon': use ISO 8601 (2025-01-31T12:00) or an age (7d)",
        ),
    ],
)
def test_a_bad_export_request_is_refused(
    tmp_path: Path, out: str, kwargs: dict[str, str], message: str
) -> None:
    path = tmp_path / out
    with pytest.raises(InvalidInput) as caught:
        warehouse.export_tenant(Settings(home=tmp_path), "acme", path, **kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == message.format(out=path, parent=path.parent)


def test_an_instant_is_iso_or_an_age_and_aware_ones_become_naive_utc() -> None:
    assert str(parse_instant("2026-01-02T03:04+02:00", "--since")) == "2026-01-02 01:04:00"
    age = parse_instant("7d", "--since")
    assert age is not None and age.tzinfo is None
    assert parse_instant(None, "--since") is None
