"""A project without a feature store, on its real stores, in-process (issue 21, item 1).

``mlpipe init --no-feature-store`` creates the local stack (MLflow database, warehouse,
control plane); ``doctor`` from a subdirectory finds the project and checks each store;
the feature commands and ``monitor skew`` refuse in one line. Moved from
tests/unit/cli/test_project.py (issue 31, item 5): the stores' creation and the Feast
import behind ``features apply`` cost about ten seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_in_process as mlpipe

pytestmark = pytest.mark.integration


def test_init_without_a_feature_store_then_doctor_from_a_subdirectory(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # doctor's log check reads the free space of the host's disk: not this test's subject
    monkeypatch.setenv("MLPIPE_PREDLOG__MIN_FREE_PERCENT", "0")
    code, out, err = mlpipe(monkeypatch, capsys, "init", "--no-feature-store")
    assert code == 0, err
    assert f"project {nowhere}" in out
    assert "feature_store = false" in (nowhere / "mlpipe.toml").read_text()
    assert not (nowhere / "feature_repo").exists()
    sub = nowhere / "notebooks" / "deep"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    code, out, err = mlpipe(monkeypatch, capsys, "doctor", "--json")
    assert code == 0, err
    checks = {c["store"]: c for c in json.loads(out)}
    assert checks["feature store"] == {
        "store": "feature store",
        "location": "",
        "ok": True,
        "detail": "not configured",
        "configured": False,
    }
    assert checks["registry"]["location"] == f"sqlite:///{nowhere}/.mlpipe/mlflow.db"
    code, out, err = mlpipe(monkeypatch, capsys, "doctor")
    assert code == 0
    assert f"(config: {nowhere / 'mlpipe.toml'})" in out
    assert "│ feature store  │" in out and "not configured" in out
    # init from the subdirectory is the enclosing project's: no second stack
    code, out, err = mlpipe(monkeypatch, capsys, "init")
    assert code == 0
    assert err == "nothing to do: the local stack is already initialized\n"
    assert list(sub.iterdir()) == []
    # the project has no feature store: feature commands say so in one line
    code, out, err = mlpipe(monkeypatch, capsys, "features", "apply")
    assert (code, out) == (2, "")
    assert (
        err == "error: this project has no feature store (feature_store = false in mlpipe.toml)\n"
    )
    # skew does not apply: one line, exit 2, nothing synced and no report written
    warehouse_file = nowhere / ".mlpipe" / "warehouse.duckdb"
    before = warehouse_file.stat().st_mtime_ns
    code, out, err = mlpipe(monkeypatch, capsys, "monitor", "skew", "fraud")
    assert (code, out) == (2, "")
    assert err == (
        "error: skew compares served features with the feature store, and this project has "
        "none (feature_store = false in mlpipe.toml)\n"
    )
    assert not (nowhere / ".mlpipe" / "reports").exists()
    assert warehouse_file.stat().st_mtime_ns == before
