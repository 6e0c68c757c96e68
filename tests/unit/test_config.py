"""Settings: defaults, then mlpipe.toml (and its profiles), then MLPIPE_* variables."""

import os
from pathlib import Path

import pytest

from mlpipe.config import find_project, load_settings
from mlpipe.errors import ConfigError
from tests.conftest import run_in_process


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


def test_the_project_is_the_nearest_mlpipe_toml_above(nowhere: Path) -> None:
    (nowhere / "mlpipe.toml").write_text('experiment = "outer"\n')
    deep = nowhere / "src" / "pkg"
    deep.mkdir(parents=True)
    os.chdir(deep)
    assert find_project() == nowhere.resolve()
    settings = load_settings(home=find_project())
    assert settings.experiment == "outer"
    assert settings.state_path == nowhere.resolve() / ".mlpipe"


def test_mlpipe_home_wins_over_the_walk(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (nowhere / "mlpipe.toml").write_text("")
    other = nowhere / "elsewhere"
    other.mkdir()
    monkeypatch.setenv("MLPIPE_HOME", str(other))
    assert find_project() == other


def test_outside_a_project_is_named_and_nothing_is_created(nowhere: Path) -> None:
    with pytest.raises(ConfigError) as err:
        find_project()
    assert str(err.value) == (
        "not an mlpipe project (run mlpipe init): "
        f"no mlpipe.toml in {nowhere.resolve()} or above it"
    )
    assert list(nowhere.iterdir()) == []


def test_settings_for_a_home_read_that_home_s_file(nowhere: Path) -> None:
    """Settings(home=...) reads the toml of that home, not of the working directory."""
    (nowhere / "mlpipe.toml").write_text('experiment = "here"\n')
    other = nowhere / "other"
    other.mkdir()
    (other / "mlpipe.toml").write_text('experiment = "there"\n')
    assert load_settings(home=other).experiment == "there"


def test_no_feature_store_is_a_setting(home: Path) -> None:
    assert load_settings().feature_store is True
    (home / "mlpipe.toml").write_text("feature_store = false\n")
    assert load_settings().feature_store is False


@pytest.mark.parametrize("key", ["control_url", "warehouse_url"])
@pytest.mark.parametrize("url", ["notadb", "http://db.example/x"])
def test_a_database_url_that_is_not_one_is_one_line_naming_file_and_key(
    home: Path, key: str, url: str
) -> None:
    (home / "mlpipe.toml").write_text(f'{key} = "{url}"\n')
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert message.startswith(f"invalid settings ({home / 'mlpipe.toml'} or MLPIPE_*): {key}: ")
    assert "not a database URL SQLAlchemy can open" in message and "\n" not in message


def test_postgres_and_duckdb_urls_are_database_urls(home: Path) -> None:
    s = load_settings(
        control_url="postgresql+psycopg://127.0.0.1/test", warehouse_url="duckdb:///w.duckdb"
    )
    assert s.control.startswith("postgresql") and s.warehouse == "duckdb:///w.duckdb"


@pytest.mark.parametrize(
    ("name", "value"), [("MLPIPE_PII_FIELDS", "email"), ("MLPIPE_SERVING", "port=4000")]
)
def test_an_environment_value_that_is_not_json_is_one_line(
    home: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value).startswith(f"invalid settings: {name} is not valid JSON")
    assert "\n" not in str(err.value)


def test_a_profile_that_is_not_a_table_is_named(home: Path) -> None:
    (home / "mlpipe.toml").write_text("[profile]\nprod = 3\n")
    with pytest.raises(ConfigError, match=r"'profile' must be a table of \[profile.NAME\] tables"):
        load_settings()


def _attacker(nowhere: Path) -> Path:
    """Where the hostile ``mlpipe.toml`` moves the stores: outside the project, per test."""
    return nowhere.parent / f"{nowhere.name}-attacker"


def _hostile_parent(nowhere: Path) -> Path:
    """``nowhere`` holds an ``mlpipe.toml`` that moves the stores; the work is in a subdirectory."""
    (nowhere / "mlpipe.toml").write_text(f'state_dir = "{_attacker(nowhere)}"\n')
    work = nowhere / "work"
    work.mkdir()
    os.chdir(work)
    return work


@pytest.mark.parametrize("how", ["file owned by another user", "directory owned by another user"])
def test_a_project_another_user_owns_is_refused(nowhere: Path, how: str) -> None:
    work = _hostile_parent(nowhere)
    target = nowhere / "mlpipe.toml" if how.startswith("file") else nowhere
    os.chown(target, 65534, 65534)
    with pytest.raises(ConfigError) as err:
        find_project()
    assert str(err.value) == (
        f"refusing the project found at {nowhere.resolve()}/mlpipe.toml: "
        f"{target.resolve()} is owned by uid 65534, not by you (uid {os.geteuid()}); "
        f"if you trust it, set MLPIPE_SAFE_DIRECTORIES={nowhere.resolve()} "
        f"or MLPIPE_HOME={nowhere.resolve()}"
    )
    with pytest.raises(ConfigError, match="refusing the project"):
        load_settings()  # the library's own discovery refuses it too
    assert list(work.iterdir()) == []


def test_a_project_others_can_write_is_refused_until_trusted(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hostile_parent(nowhere)
    config = nowhere / "mlpipe.toml"
    config.chmod(config.stat().st_mode | 0o002)
    with pytest.raises(ConfigError, match=r"mlpipe.toml is writable by others; if you trust it"):
        find_project()
    monkeypatch.setenv("MLPIPE_SAFE_DIRECTORIES", f"/elsewhere{os.pathsep}{nowhere}")
    assert find_project() == nowhere.resolve()


def test_the_cli_refuses_a_hostile_parent_in_one_line(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the console script's entry point in this process (the discovery is the
    library's, read per command; no child interpreter needed)."""
    work = _hostile_parent(nowhere)
    os.chown(nowhere / "mlpipe.toml", 65534, 65534)
    code, out, err = run_in_process(monkeypatch, capsys, "status", "fraud")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: refusing the project found at {nowhere.resolve()}/mlpipe.toml")
    assert list(work.iterdir()) == [] and not _attacker(nowhere).exists()
    monkeypatch.setenv("MLPIPE_HOME", str(nowhere))
    monkeypatch.setenv("MLPIPE_STATE_DIR", ".s")
    _, _, trusted_err = run_in_process(monkeypatch, capsys, "status", "fraud")
    assert "refusing" not in trusted_err
