"""Reading a candidate model offered for registration, from a file or an MLflow directory.

A file is read by its suffix: ``.onnx`` (ONNX), ``.txt`` (LightGBM text model),
``.json``/``.ubj`` (XGBoost model), ``.pt``/``.pth``/``.torchscript`` (PyTorch),
anything else as a pickle/joblib file. Whatever cannot be read is refused in one
line naming what is supported, never with the reader's own error.

A pickle runs code when it is read. Naming a local pickle file with ``--model``
is the user's opt-in for that file; a pickle inside an MLflow model directory,
or downloaded from a run, is read only with ``--trust pickle`` (the user may
never have looked at it). Either way ``MLFLOW_ALLOW_PICKLE_DESERIALIZATION=false``
(MLflow's own gate) refuses every pickle.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.registry._flavors import SUPPORTED, for_candidate
from mlpipe.registry._lightgbm_flavor import LIGHTGBM_FILE, LIGHTGBM_SUFFIXES, LightGBMFlavor
from mlpipe.registry._onnx_flavor import ONNX_FILE, ONNX_SUFFIXES, OnnxFlavor
from mlpipe.registry._sklearn_flavor import SKOPS_FILE, SklearnFlavor
from mlpipe.registry._torch_flavor import TORCH_FILE, TORCH_PT2_FILE, TORCH_SUFFIXES, TorchFlavor
from mlpipe.registry._xgboost_flavor import XGBOOST_SUFFIXES, XGBoostFlavor

FILES = (
    "a pickle/joblib file, LightGBM .txt, XGBoost .json/.ubj, ONNX .onnx, "
    "TorchScript .pt/.pth, or an MLflow model directory"
)
TRUST_PICKLE = "pickle"  # the --trust value that lets a pickle from elsewhere be read
PICKLE_GATE = "MLFLOW_ALLOW_PICKLE_DESERIALIZATION"


def read_candidate(path: Path, *, trust_pickle: bool = False, source: str | None = None) -> Any:
    """Load a model offered for registration (see the module docstring for the formats).

    ``source`` names where ``path`` came from when it is no file the user named
    (``run R``): then, as for an MLflow model directory, a pickle is read only
    with ``trust_pickle``. Raises NotFound if ``path`` is missing, InvalidInput
    if it is no model file mlpipe reads, holds no model mlpipe registers, or is
    a pickle that is not trusted or that ``MLFLOW_ALLOW_PICKLE_DESERIALIZATION``
    forbids.
    """
    if not path.exists():
        raise NotFound(f"model path {path} does not exist")
    gate = _Pickles(str(source or path), trusted=trust_pickle, named=source is None)
    model = _read_mlflow_dir(path, gate) if path.is_dir() else _read_file(path, gate)
    try:
        for_candidate(model)
    except InvalidInput as exc:
        raise InvalidInput(
            f"{path} holds a {type(model).__name__}, not a model mlpipe registers: it registers "
            f"{SUPPORTED}"
        ) from exc
    return model


class _Pickles:
    """Whether a pickle may be unpickled here; the one-line refusal when not."""

    def __init__(self, origin: str, *, trusted: bool, named: bool) -> None:
        self.origin = origin
        self.trusted = trusted  # --trust pickle
        self.named = named  # the user named this path (not downloaded from a run)

    def require(self, path: Path, *, in_directory: bool) -> None:
        if os.environ.get(PICKLE_GATE, "").strip().lower() in ("false", "0"):
            raise InvalidInput(
                f"{PICKLE_GATE}=false forbids unpickling {path}: register the model in a "
                "format that is not a pickle (skops MLflow directory, ONNX, LightGBM .txt, "
                f"XGBoost .json), or unset {PICKLE_GATE} if you trust it"
            )
        if not (self.trusted or (self.named and not in_directory)):
            raise InvalidInput(
                f"{self.origin} holds a pickle ({path.name}), which runs code when read; "
                f"pass --trust {TRUST_PICKLE} if you trust whoever made it"
            )


def _read_file(path: Path, gate: _Pickles) -> Any:
    suffix = path.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        return _with_library("onnx", lambda: OnnxFlavor().read_file(path))
    if suffix in LIGHTGBM_SUFFIXES:
        return LightGBMFlavor().read_file(path)
    if suffix in XGBOOST_SUFFIXES:
        return _with_library("xgboost", lambda: XGBoostFlavor().read_file(path))
    if suffix in TORCH_SUFFIXES:
        return _with_library("torch", lambda: TorchFlavor().read_file(path))
    gate.require(path, in_directory=False)
    return _read_pickle(path)


def _with_library(module: str, read: Any) -> Any:
    """``read()``, or one line naming the library to install when it is missing."""
    try:
        return read()
    except ModuleNotFoundError as exc:
        raise InvalidInput(
            f"reading this model needs the {module!r} package, which is not installed "
            f"({exc.name} is missing); install mlpipe[formats] or {module}"
        ) from exc


def _read_pickle(path: Path) -> Any:
    import joblib

    try:
        return joblib.load(path)
    except ModuleNotFoundError as exc:  # the model's class lives in a module not installed here
        raise InvalidInput(
            f"{path.name} needs the module {exc.name!r} to load (ModuleNotFoundError): "
            "install it in this environment"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means "not a model file"
        raise InvalidInput(f"{path} is not a model file mlpipe reads: give {FILES}") from exc


def _read_mlflow_dir(path: Path, gate: _Pickles) -> Any:
    if (path / SKOPS_FILE).exists():
        return SklearnFlavor().read_mlflow_dir(path)
    if (path / "model.pkl").exists():
        gate.require(path / "model.pkl", in_directory=True)
        return _read_pickle(path / "model.pkl")
    if (path / TORCH_FILE).exists() or (path / TORCH_PT2_FILE).exists():
        return _with_library("torch", lambda: TorchFlavor().read_mlflow_dir(path))
    if (path / LIGHTGBM_FILE).exists():
        return LightGBMFlavor().read_mlflow_dir(path)
    if (path / ONNX_FILE).exists():
        return _with_library("onnx", lambda: OnnxFlavor().read_mlflow_dir(path))
    if any((path / f"model{s}").exists() for s in (".ubj", ".json", ".xgb")):
        return _with_library("xgboost", lambda: XGBoostFlavor().read_mlflow_dir(path))
    raise InvalidInput(
        f"{path} is not an MLflow model directory mlpipe reads "
        "(scikit-learn/skops, LightGBM, XGBoost, ONNX or PyTorch)"
    )
