"""The serving side's snapshot of the tenants: what it holds before and after a reload, a
failed reload keeping the last snapshot, and the background refresh (control plane in
tmp_path; keys and their refusals are in test_keys.py)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from mlpipe.config import load_settings
from mlpipe.engines import engine_for
from mlpipe.security import TenantDirectory, add_tenant, revoke_tenant, tenant_store


@pytest.fixture
def settings(tmp_path: Path) -> Any:
    return load_settings(home=tmp_path)


def test_before_the_first_reload_nothing_is_known_and_no_key_passes(settings: Any) -> None:
    _, key = add_tenant(settings, "acme")
    directory = TenantDirectory(tenant_store(settings))
    assert (directory.loaded, directory.any_tenants) == (False, False)
    assert directory.authenticate(key) is None
    directory.reload()
    assert (directory.loaded, directory.any_tenants) == (True, True)
    assert directory.authenticate(key) is not None


def test_an_empty_table_is_loaded_with_no_tenants(settings: Any) -> None:
    directory = TenantDirectory(tenant_store(settings))
    directory.reload()
    assert (directory.loaded, directory.any_tenants) == (True, False)


def test_a_revoked_tenant_still_counts_as_a_tenant(settings: Any) -> None:
    _, key = add_tenant(settings, "acme")
    revoke_tenant(settings, "acme")
    directory = TenantDirectory(tenant_store(settings))
    directory.reload()
    assert directory.any_tenants  # auth = "auto" keeps requiring keys
    assert directory.authenticate(key) is None


def test_a_failed_reload_keeps_the_last_snapshot_and_logs_it(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, key = add_tenant(settings, "acme")
    directory = TenantDirectory(tenant_store(settings))
    directory.reload()
    with engine_for(settings.control).begin() as conn:
        conn.execute(sa.text("DROP TABLE tenants"))
    with caplog.at_level(logging.ERROR, logger="mlpipe.security"):
        directory.reload()
    assert [r.getMessage() for r in caplog.records] == [
        "tenants: reload failed; keeping the last snapshot"
    ]
    assert directory.authenticate(key) is not None
    assert directory.loaded


def _until(check: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def test_start_loads_at_once_and_the_refresh_picks_up_changes(settings: Any) -> None:
    _, first = add_tenant(settings, "acme")
    directory = TenantDirectory(tenant_store(settings), refresh_s=0.01).start()
    try:
        assert directory.authenticate(first) is not None  # read by start(), before any refresh
        _, second = add_tenant(settings, "beta")
        revoke_tenant(settings, "acme")
        assert _until(lambda: directory.authenticate(second) is not None)
        assert _until(lambda: directory.authenticate(first) is None)
    finally:
        directory.stop()


def test_start_twice_runs_one_refresh_thread_and_stop_ends_it(settings: Any) -> None:
    directory = TenantDirectory(tenant_store(settings), refresh_s=0.01)
    before = {t.ident for t in threading.enumerate() if t.name == "mlpipe-tenants"}
    directory.start().start()
    threads = [
        t for t in threading.enumerate() if t.name == "mlpipe-tenants" and t.ident not in before
    ]
    assert len(threads) == 1 and threads[0].daemon
    directory.stop()
    threads[0].join(timeout=10)
    assert not threads[0].is_alive()
