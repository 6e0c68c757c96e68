"""Reading a candidate offered for registration, in process: which pickles are unpickled,
and the one-line refusals (tests/integration/test_register_pickle.py runs the CLI)."""

from __future__ import annotations

from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.registry._candidate import PICKLE_GATE, read_candidate
from tests.planted_pickle import plant


def _classifier() -> LogisticRegression:
    x = np.array([[0.0], [1.0], [2.0], [3.0]])
    return LogisticRegression().fit(x, [0, 0, 1, 1])


@pytest.fixture(autouse=True)
def _gate_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PICKLE_GATE, raising=False)


def test_a_named_joblib_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "model.joblib"
    joblib.dump(_classifier(), path)
    model = read_candidate(path)
    assert isinstance(model, LogisticRegression)
    assert model.predict([[3.0]]).tolist() == [1]


def test_a_missing_path_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=rf"^model path {tmp_path / 'nope.joblib'} does not exist$"):
        read_candidate(tmp_path / "nope.joblib")


@pytest.mark.parametrize("value", ["false", "False", " 0 "])
def test_mlflow_s_gate_refuses_even_a_named_pickle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(PICKLE_GATE, value)
    marker = tmp_path / "ran.txt"
    planted = plant(tmp_path / "model.joblib", marker)
    with pytest.raises(InvalidInput) as raised:
        read_candidate(planted, trust_pickle=True)
    assert str(raised.value).startswith(
        f"{PICKLE_GATE}=false forbids unpickling {planted}: register the model in a format"
    )
    assert not marker.exists()


def test_a_pickle_in_an_mlflow_directory_needs_trust(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    plant(tmp_path / "mlflow-model" / "model.pkl", marker)
    with pytest.raises(InvalidInput) as raised:
        read_candidate(tmp_path / "mlflow-model")
    assert str(raised.value) == (
        f"{tmp_path / 'mlflow-model'} holds a pickle (model.pkl), which runs code when read; "
        "pass --trust pickle if you trust whoever made it"
    )
    assert not marker.exists()


def test_a_trusted_pickle_in_an_mlflow_directory_is_read(tmp_path: Path) -> None:
    directory = tmp_path / "mlflow-model"
    directory.mkdir()
    joblib.dump(_classifier(), directory / "model.pkl")
    assert isinstance(read_candidate(directory, trust_pickle=True), LogisticRegression)


def test_a_file_from_elsewhere_is_refused_naming_its_source(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    planted = plant(tmp_path / "dl" / "model.pkl", marker)
    with pytest.raises(InvalidInput, match=r"^run abc123 holds a pickle \(model\.pkl\), which"):
        read_candidate(planted, source="run abc123")
    assert not marker.exists()


def test_a_pickle_needing_a_missing_module_names_the_module(tmp_path: Path) -> None:
    path = tmp_path / "model.joblib"
    path.write_bytes(b"cmypkg_not_installed\nModel\n)\x81.")  # a mypkg_not_installed.Model()
    with pytest.raises(InvalidInput) as raised:
        read_candidate(path)
    assert str(raised.value) == (
        "model.joblib needs the module 'mypkg_not_installed' to load (ModuleNotFoundError): "
        "install it in this environment"
    )


def test_a_directory_with_no_model_file_is_refused_naming_the_formats(tmp_path: Path) -> None:
    (tmp_path / "model" / "data").mkdir(parents=True)
    (tmp_path / "model" / "MLmodel").write_text("flavors: {}\n")
    with pytest.raises(InvalidInput) as raised:
        read_candidate(tmp_path / "model")
    assert str(raised.value) == (
        f"{tmp_path / 'model'} is not an MLflow model directory mlpipe reads "
        "(scikit-learn/skops, LightGBM, XGBoost, ONNX or PyTorch)"
    )
