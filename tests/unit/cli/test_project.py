"""Projects in-process: init writes mlpipe.toml, commands find it from below, and a
project without a feature store is ordinary (issue 21, item 1); --help and settings
mistakes read as one line (item 6, issue 23 low)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_in_process as mlpipe


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory in no project, with no MLPIPE_* variable set."""
    for key in [k for k in os.environ if k.startswith("MLPIPE_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path.resolve()


def test_a_command_outside_a_project_says_so_and_creates_nothing(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (["status", "fraud"], ["doctor"], ["serve"]):
        code, out, err = mlpipe(monkeypatch, capsys, *args)
        assert (code, out) == (2, "")
        assert err == (
            "error: not an mlpipe project (run mlpipe init): "
            f"no mlpipe.toml in {nowhere} or above it\n"
        )
    assert list(nowhere.iterdir()) == []


def test_init_without_a_feature_store_then_doctor_from_a_subdirectory(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
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


def test_init_no_feature_store_on_a_project_that_has_one_changes_nothing(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (nowhere / "mlpipe.toml").write_text('experiment = "x"\n')
    code, out, err = mlpipe(monkeypatch, capsys, "init", "--no-feature-store")
    assert (code, out) == (2, "")
    assert err == (
        f"error: {nowhere / 'mlpipe.toml'} has a feature store: set feature_store = false in it\n"
    )
    assert sorted(p.name for p in nowhere.iterdir()) == ["mlpipe.toml"]
    assert (nowhere / "mlpipe.toml").read_text() == 'experiment = "x"\n'


@pytest.mark.parametrize(
    "args", [["--help"], ["demo", "--help"], ["doctor", "--help"], ["monitor", "drift", "--help"]]
)
def test_help_shows_flags_without_a_value_placeholder(
    nowhere: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    code, out, err = mlpipe(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "--help" in out and "<bool>" not in out


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[serving]\nport = {a = 1}\n", "serving.port: Input should be a valid integer"),
        ("[monitor.deep]\nx = 1\n", "monitor.deep: Extra inputs are not permitted"),
        ('control_url = "not a url"\n', "control_url: Value error, not a database URL"),
    ],
)
def test_a_bad_mlpipe_toml_is_one_line_naming_file_and_key(
    nowhere: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    toml: str,
    expected: str,
) -> None:
    (nowhere / "mlpipe.toml").write_text(toml)
    code, out, err = mlpipe(monkeypatch, capsys, "status", "fraud")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: invalid settings ({nowhere / 'mlpipe.toml'} or MLPIPE_*): ")
    assert expected in err and err.count("\n") == 1
    assert sorted(p.name for p in nowhere.iterdir()) == ["mlpipe.toml"]


def test_an_environment_value_that_is_not_json_is_one_line(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (nowhere / "mlpipe.toml").write_text("")
    monkeypatch.setenv("MLPIPE_PII_FIELDS", "email")
    code, out, err = mlpipe(monkeypatch, capsys, "status", "fraud")
    assert (code, out) == (2, "")
    assert err.startswith("error: invalid settings: MLPIPE_PII_FIELDS is not valid JSON")
    assert err.count("\n") == 1


def test_init_of_a_path_that_cannot_be_a_project_is_one_line(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (nowhere / "afile").write_text("x")
    code, out, err = mlpipe(monkeypatch, capsys, "init", "afile")
    assert (code, out, err) == (2, "", f"error: {nowhere / 'afile'} is not a directory\n")
    code, out, err = mlpipe(monkeypatch, capsys, "init", "/proc/no-such-dir")
    assert (code, out) == (2, "")
    assert err == "error: cannot write /proc/no-such-dir/mlpipe.toml: No such file or directory\n"
    assert sorted(p.name for p in nowhere.iterdir()) == ["afile"]
