"""The CLI's refusals where the answer comes from a real MLflow registry, in-process.

Each test creates the home's MLflow database (its migrations take seconds) and one
registers a model, so they moved here from tests/unit/cli/test_main.py (issue 31,
item 5); the commands still run through the console script's entry point in this
process, asserting the exact output and exit code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_in_process as mlpipe

pytestmark = pytest.mark.integration


def test_deploy_of_an_unregistered_model_changes_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = mlpipe(monkeypatch, capsys, "deploy", "fraud", "--version", "1")
    assert (code, out, err) == (2, "", "error: no registered model named 'fraud'\n")
    code, out, err = mlpipe(monkeypatch, capsys, "status", "fraud")
    assert code == 2 and "fraud has no deployment" in err


def test_models_show_of_an_alias_not_set_is_one_line_exit_2(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not 3 "store unreachable": MLflow answers a missing alias as a bad parameter."""
    from mlpipe import registry
    from mlpipe.config import load_settings
    from tests.conftest import train_toy_model

    model, data = train_toy_model(home, n_estimators=5)
    registry.register(load_settings(), "fraud", dataset=data, model_path=model)
    code, out, err = mlpipe(monkeypatch, capsys, "models", "show", "fraud@champion")
    assert (code, out, err) == (2, "", "error: no alias @champion on fraud\n")
