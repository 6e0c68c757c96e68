"""Reading a candidate model offered for registration, from a file or an MLflow directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.registry._flavors import for_candidate
from mlpipe.registry._sklearn_flavor import SKOPS_FILE, SklearnFlavor
from mlpipe.registry._torch_flavor import TORCH_FILE, TORCH_SUFFIXES, TorchFlavor


def read_candidate(path: Path) -> Any:
    """Load a model offered for registration: pickle/joblib, TorchScript, or an MLflow dir.

    A pickle runs code when read: registering a file means trusting whoever made
    it, as with any pickle. Raises InvalidInput if it is not a usable classifier.
    """
    if not path.exists():
        raise NotFound(f"model path {path} does not exist")
    if path.is_dir():
        model = _read_mlflow_dir(path)
    elif path.suffix in TORCH_SUFFIXES:
        model = TorchFlavor().read_file(path)
    else:
        model = _read_pickle(path)
    try:
        for_candidate(model)
    except InvalidInput as exc:
        raise InvalidInput(
            f"{path} holds a {type(model).__name__}, not a classifier with predict_proba "
            "(scikit-learn or LightGBM) or a torch module"
        ) from exc
    return model


def _read_pickle(path: Path) -> Any:
    import joblib

    try:
        return joblib.load(path)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means "not a model file"
        raise InvalidInput(f"{path} is not a model file (pickle/joblib): {exc}") from exc


def _read_mlflow_dir(path: Path) -> Any:
    if (path / SKOPS_FILE).exists():
        return SklearnFlavor().read_mlflow_dir(path)
    if (path / "model.pkl").exists():
        return _read_pickle(path / "model.pkl")
    if (path / TORCH_FILE).exists():
        return TorchFlavor().read_mlflow_dir(path)
    raise InvalidInput(f"{path} is not an MLflow scikit-learn/LightGBM/PyTorch model directory")
