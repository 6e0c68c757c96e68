"""MLflow's errors as mlpipe's: missing → NotFound, lock contention → StoreBusy, the rest →
StoreUnavailable; and an empty artifact download is an unreachable store, not tampering."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, RESOURCE_DOES_NOT_EXIST
from sqlalchemy.exc import OperationalError

from mlpipe.errors import NotFound, StoreBusy, StoreUnavailable
from mlpipe.registry._client import download_tree, first_line, is_contention, mlflow_errors


def test_a_missing_resource_is_not_found_naming_what_was_asked() -> None:
    with pytest.raises(NotFound, match=r"^fraud/9: no version 9$") as raised:
        with mlflow_errors("fraud/9"):
            raise MlflowException("no version 9", error_code=RESOURCE_DOES_NOT_EXIST)
    assert isinstance(raised.value.__cause__, MlflowException)


def test_any_other_mlflow_error_is_the_store_unavailable() -> None:
    with pytest.raises(StoreUnavailable, match=r"^registry: bad value$"):
        with mlflow_errors("registry"):
            raise MlflowException("bad value", error_code=INVALID_PARAMETER_VALUE)


def test_a_locked_database_is_busy_and_says_retry() -> None:
    with pytest.raises(StoreBusy) as raised:
        with mlflow_errors("fraud"):
            raise MlflowException("(sqlite3.OperationalError) database is locked\n[SQL: INSERT]")
    assert str(raised.value) == (
        "fraud: the registry is busy with concurrent writes "
        "((sqlite3.OperationalError) database is locked); retry"
    )


def test_contention_is_found_in_the_exception_an_error_was_raised_from() -> None:
    try:
        try:
            raise RuntimeError("could not serialize access due to concurrent update")
        except RuntimeError as inner:
            raise MlflowException("write failed") from inner
    except MlflowException as exc:
        assert is_contention(exc)
    assert not is_contention(MlflowException("connection refused"))


def test_version_number_race_lost_after_mlflow_s_retries_is_contention() -> None:
    exc = MlflowException("Model Version creation error (name=fraud). Giving up after 3 attempts.")
    assert is_contention(exc)


def test_sqlalchemy_operational_error_outside_mlflow_is_unavailable_in_one_line() -> None:
    with pytest.raises(StoreUnavailable) as raised:
        with mlflow_errors("registry"):
            raise OperationalError("SELECT 1", {}, Exception("unable to open database file"))
    assert str(raised.value) == (
        "registry unavailable: (builtins.Exception) unable to open database file"
    )


def test_sqlalchemy_lock_outside_mlflow_is_busy() -> None:
    with pytest.raises(StoreBusy, match="busy with concurrent writes"):
        with mlflow_errors("registry"):
            raise OperationalError("SELECT 1", {}, Exception("database is locked"))


def test_an_unreachable_host_is_unavailable() -> None:
    with pytest.raises(StoreUnavailable, match=r"^registry unreachable: refused$"):
        with mlflow_errors("registry"):
            raise ConnectionRefusedError("refused")


def test_errors_of_mlpipe_s_own_pass_through_unchanged() -> None:
    with pytest.raises(ValueError, match="not mlflow's"):
        with mlflow_errors("registry"):
            raise ValueError("not mlflow's")


def test_first_line_keeps_the_first_line_and_shortens_it() -> None:
    assert first_line("  boom\n[SQL: SELECT 1]") == "boom"
    assert first_line("") == ""
    assert first_line("x" * 300, limit=10) == "x" * 9 + "…"
    assert first_line("x" * 10, limit=10) == "x" * 10


def test_download_tree_returns_the_downloaded_directory(tmp_path: Path) -> None:
    source = tmp_path / "artifact"
    (source / "data").mkdir(parents=True)
    (source / "data" / "model.lgb").write_text("tree")
    local = download_tree(source.as_uri(), str(tmp_path / "dst"), "artifact of fraud/1")
    assert (local / "data" / "model.lgb").read_text() == "tree"


def test_download_tree_with_no_files_is_the_store_unavailable(tmp_path: Path) -> None:
    source = tmp_path / "artifact"
    (source / "empty").mkdir(parents=True)
    with pytest.raises(StoreUnavailable) as raised:
        download_tree(source.as_uri(), str(tmp_path / "dst"), "artifact of fraud/1")
    assert str(raised.value) == (
        f"artifact of fraud/1: the artifact store returned no files for {source.as_uri()} "
        "(the store is unreachable, or the artifact was deleted)"
    )
