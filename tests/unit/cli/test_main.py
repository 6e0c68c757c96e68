"""The command in-process: exact output and exit codes at the error boundary.

Those that need a real MLflow registry are tests/integration/test_registry_refusals.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_in_process as mlpipe


def test_status_of_a_model_never_deployed(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = mlpipe(monkeypatch, capsys, "status", "nosuch")
    assert (code, out) == (2, "")
    assert err == "error: nosuch has no deployment; run `mlpipe deploy nosuch --version V` first\n"


def test_history_json_of_a_model_never_deployed_prints_no_json(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = mlpipe(monkeypatch, capsys, "history", "nosuch", "--json")
    assert (code, out) == (2, "")
    assert err.startswith("error: nosuch has no deployment")
    assert "Traceback" not in err


def test_tenants_list_json_on_a_fresh_home(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = mlpipe(monkeypatch, capsys, "tenants", "list", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == []


def test_unknown_option_is_a_usage_error(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = mlpipe(monkeypatch, capsys, "status", "fraud", "--no-such-flag")
    assert (code, out) == (2, "")
    assert "No such option: --no-such-flag" in err


def test_warehouse_query_prints_logged_values_as_text_not_terminal_codes(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A logged value can hold escape codes or rich markup: both print inert (issue 23, low)."""
    sql = "SELECT chr(27) || '[2J' || chr(7) AS a, '[bold]b[/bold]' AS b"
    code, out, err = mlpipe(monkeypatch, capsys, "warehouse", "query", sql)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J\\x07" in out
    assert "[bold]b[/bold]" in out


def test_warehouse_query_shows_bidi_and_zero_width_characters_escaped(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A right-to-left override or a zero-width space would make one logged id look like
    another in a table: each prints as ``\\uNNNN`` (issue 29, item 12)."""
    chars = [0x200B, 0x200F, 0x202A, 0x202E, 0x2066, 0x2069, 0xFEFF]
    sql = f"SELECT 'id' || chr(c) || 'x' AS v FROM unnest({chars}) AS t(c)"
    code, out, err = mlpipe(monkeypatch, capsys, "warehouse", "query", sql)
    assert code == 0, err
    for c in chars:
        assert chr(c) not in out
        assert f"id\\u{c:04x}x" in out


def test_debug_after_the_subcommand_is_the_global_option(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mlpipe status X --debug`` works as ``mlpipe --debug status X`` (issue 28, item 9)."""
    code, out, err = mlpipe(monkeypatch, capsys, "status", "nosuch", "--debug")
    assert (code, out) == (2, "")
    assert "No such option" not in err
    assert "Traceback" in err
    assert err.endswith(
        "error: nosuch has no deployment; run `mlpipe deploy nosuch --version V` first\n"
    )


def test_a_table_written_to_a_pipe_is_not_cut_at_80_columns(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mlpipe ... > drift.txt`` keeps whole cells, as wide as they are (issue 28, item 9)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    sql = "SELECT repeat('x', 150) AS bill_length_of_a_very_long_column_name, 1 AS n"
    code, out, err = mlpipe(monkeypatch, capsys, "warehouse", "query", sql)
    assert code == 0, err
    assert "x" * 150 in out and "bill_length_of_a_very_long_column_name" in out
    assert "…" not in out
