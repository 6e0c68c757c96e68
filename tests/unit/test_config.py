"""Settings: defaults, then mlpipe.toml (and its profiles), then MLPIPE_* variables."""

from pathlib import Path

import pytest

from mlpipe.config import load_settings
from mlpipe.errors import ConfigError


def test_defaults_put_every_store_under_home(home: Path) -> None:
    s = load_settings()
    assert s.home == home.resolve()
    assert s.registry == f"sqlite:///{home.resolve()}/.mlpipe/mlflow.db"
    assert s.control == f"sqlite:///{home.resolve()}/.mlpipe/control.db"
    assert s.warehouse == f"duckdb:///{home.resolve()}/.mlpipe/warehouse.duckdb"
    assert s.predlog_path == home.resolve() / ".mlpipe" / "predlog"
    assert s.feature_repo_path == home.resolve() / "feature_repo"


def test_toml_then_env_then_flags(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / "mlpipe.toml").write_text('experiment = "from-file"\n[serving]\nport = 4000\n')
    assert load_settings().serving.port == 4000
    monkeypatch.setenv("MLPIPE_SERVING__PORT", "5000")
    assert load_settings().serving.port == 5000
    assert load_settings().experiment == "from-file"
    assert load_settings(experiment="from-flag").experiment == "from-flag"


def test_profile_table_overrides_base(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / "mlpipe.toml").write_text(
        'control_url = "sqlite:///base.db"\n'
        '[profile.prod]\ncontrol_url = "postgresql+psycopg://127.0.0.1/test"\n'
    )
    assert load_settings().control == "sqlite:///base.db"
    monkeypatch.setenv("MLPIPE_PROFILE", "prod")
    assert load_settings().control == "postgresql+psycopg://127.0.0.1/test"


def test_unknown_profile_is_named(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / "mlpipe.toml").write_text("[profile.prod]\nexperiment = 'x'\n")
    monkeypatch.setenv("MLPIPE_PROFILE", "staging")
    with pytest.raises(ConfigError, match=r"no \[profile.staging\] \(have: prod\)"):
        load_settings()


def test_corrupt_toml_names_the_file(home: Path) -> None:
    (home / "mlpipe.toml").write_text("serving = [\n")
    with pytest.raises(ConfigError, match=r"mlpipe.toml is not valid TOML"):
        load_settings()


def test_unknown_key_and_bad_value_name_the_field(home: Path) -> None:
    (home / "mlpipe.toml").write_text("[serving]\nprot = 1\n")
    with pytest.raises(ConfigError, match=r"serving.prot: Extra inputs are not permitted"):
        load_settings()
    (home / "mlpipe.toml").write_text("[serving]\nport = 'many'\n")
    with pytest.raises(ConfigError, match=r"serving.port: Input should be a valid integer"):
        load_settings()
