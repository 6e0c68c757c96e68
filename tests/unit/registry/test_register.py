"""Model names at register: ASCII letters, digits, '.', '_', '-', at most 128 (issue 23, low)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe import registry
from mlpipe.config import load_settings
from mlpipe.errors import InvalidInput


@pytest.mark.parametrize(
    "name",
    [
        "fr\u0430ud",  # a Cyrillic 'а': looks like "fraud"
        "caf\u00e9",
        "x" * 129,
        "",
        "..",
        ".hidden",
        "a/b",
        "two words",
    ],
)
def test_a_name_outside_the_rule_is_refused_before_anything_is_read(home: Path, name: str) -> None:
    settings = load_settings(home=home)
    with pytest.raises(InvalidInput, match="ASCII letters, digits"):
        registry.register(
            settings, name, dataset=home / "no-such.csv", model_path=home / "no-such.joblib"
        )
    assert not settings.state_path.exists()  # no registry was created


@pytest.mark.parametrize("name", ["fraud", "fraud.v2", "churn_model-3", "x" * 128])
def test_a_name_inside_the_rule_gets_past_the_name_check(home: Path, name: str) -> None:
    settings = load_settings(home=home)
    with pytest.raises(Exception) as raised:
        registry.register(
            settings, name, dataset=home / "no-such.csv", model_path=home / "no-such.joblib"
        )
    assert "ASCII letters" not in str(raised.value)  # it failed later, on the missing file
