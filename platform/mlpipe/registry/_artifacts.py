"""Reading candidate models, the skops trust policy, and verified loading for serving.

MLflow 3.17 stores scikit-learn (and LightGBM's scikit-learn API) models with
skops, which refuses to load types not on an allow-list. mlpipe's policy: at
registration, the types skops does not trust by itself are listed; those from
the modules in ``AUTO_TRUSTED_MODULES`` (the model libraries mlpipe pins) are
trusted automatically, anything else must be named with ``--trust``. The
resulting list is recorded as the version tag ``mlpipe.skops_trusted_types``,
and loading uses that tag — never the list inside the artifact, which whoever
wrote the artifact controls — after the artifact's sha256 has been checked.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from mlpipe.errors import InvalidInput

AUTO_TRUSTED_MODULES = ("sklearn.", "lightgbm.", "numpy.", "scipy.", "collections.")
SKOPS_FILE = "model.skops"
TORCH_SHIM = "sklearn.externals.array_api_compat.torch"


def read_candidate(path: Path) -> Any:
    """Load a model offered for registration: pickle/joblib, TorchScript, or an MLflow dir.

    A pickle runs code when read: registering a file means trusting whoever made
    it, as with any pickle. Raises InvalidInput if it is not a usable classifier.
    """
    if not path.exists():
        from mlpipe.errors import NotFound

        raise NotFound(f"model path {path} does not exist")
    from mlpipe.registry import _flavors

    if path.is_dir():
        model = _read_mlflow_dir(path)
    elif path.suffix in _flavors.TORCH_SUFFIXES:
        model = _flavors.TorchFlavor().read_file(path)
    else:
        model = _read_pickle(path)
    try:
        _flavors.for_candidate(model)
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
    skops_file = path / SKOPS_FILE
    pickle_file = path / "model.pkl"
    if skops_file.exists():
        untrusted = _skops_io().get_untrusted_types(file=skops_file)
        return load_skops(skops_file, _auto_trusted(untrusted, extra=()))
    if pickle_file.exists():
        return _read_pickle(pickle_file)
    from mlpipe.registry import _flavors

    if (path / _flavors.TORCH_FILE).exists():
        return _flavors.TorchFlavor().read_mlflow_dir(path)
    raise InvalidInput(f"{path} is not an MLflow scikit-learn/LightGBM/PyTorch model directory")


def _auto_trusted(untrusted: list[str], extra: tuple[str, ...]) -> list[str]:
    refused = [t for t in untrusted if not t.startswith(AUTO_TRUSTED_MODULES) and t not in extra]
    if refused:
        raise InvalidInput(
            "the model holds types mlpipe does not trust by default: "
            + ", ".join(sorted(refused))
            + " (pass --trust TYPE for each if you trust them)"
        )
    return sorted(untrusted)


def trusted_types_for(model: Any, extra: tuple[str, ...]) -> list[str]:
    """The skops types to trust for ``model``; raises InvalidInput naming refused types."""
    skops_io = _skops_io()
    untrusted = skops_io.get_untrusted_types(data=skops_io.dumps(model))
    return _auto_trusted(untrusted, extra)


def load_skops(path: Path, trusted: list[str]) -> Any:
    return _skops_io().load(path, trusted=trusted)


def _skops_io() -> ModuleType:
    """``skops.io``, imported without PyTorch unless PyTorch is already loaded.

    At import, skops lists the types it trusts with scikit-learn's
    ``all_estimators``, whose package walk imports every sklearn package,
    ``sklearn.externals.array_api_compat.torch`` among them: that one imports
    PyTorch (3-5 s on two cores, in every serving worker that loads a model). The
    walk ignores packages that fail to import, and the list skips ``externals``
    anyway, so the shim is held out for the import and let back in afterwards.
    """
    if "skops.io" in sys.modules or "torch" in sys.modules or TORCH_SHIM in sys.modules:
        return importlib.import_module("skops.io")
    sys.modules[TORCH_SHIM] = None  # type: ignore[assignment]  # import of it raises ImportError
    try:
        return importlib.import_module("skops.io")
    finally:
        del sys.modules[TORCH_SHIM]


def positive_scores(model: Any) -> Any:
    """A vectorized ``X -> P(class 1)`` for ``model``, bypassing wrapper overhead where it can.

    LightGBM's sklearn wrapper costs ~1 ms a call; its Booster with one thread
    costs ~40 µs, so the Booster is used directly when there is one.
    """
    booster = getattr(model, "booster_", None)
    if booster is not None and getattr(model, "n_classes_", 2) == 2:

        def _booster(x: np.ndarray) -> np.ndarray:
            return np.asarray(booster.predict(x, num_threads=1), dtype=np.float64)

        return _booster

    def _sklearn(x: np.ndarray) -> np.ndarray:
        return np.asarray(model.predict_proba(x)[:, 1], dtype=np.float64)

    return _sklearn
