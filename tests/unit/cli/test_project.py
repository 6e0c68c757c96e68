"""Projects in-process: init writes mlpipe.toml, commands find it from below, and a
project without a feature store is ordinary (issue 21, item 1); --help and settings
mistakes read as one line (item 6, issue 23 low). The whole life of a project without a
feature store, on its real stores, is tests/integration/test_project_init.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_in_process as mlpipe


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
