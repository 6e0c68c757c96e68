"""The scikit-learn flavor (and LightGBM's scikit-learn API, and XGBoost inside a Pipeline).

MLflow 3.17 stores scikit-learn models with skops, which refuses to load types
not on an allow-list. mlpipe's policy: at registration, the types skops does
not trust by itself are listed; those from the modules in
``AUTO_TRUSTED_MODULES`` (the model libraries mlpipe pins) are trusted
automatically, anything else must be named with ``--trust``. The resulting list
is recorded as the version tag ``mlpipe.skops_trusted_types``, and loading uses
that tag — never the list inside the artifact, which whoever wrote the artifact
controls — after the artifact's sha256 has been checked.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from mlpipe.errors import InvalidInput
from mlpipe.registry import tag_names
from mlpipe.registry._model_flavor import ModelFlavor, Scorer, classifier_task, settled
from mlpipe.tasks import Task, TaskSpec

AUTO_TRUSTED_MODULES = (
    "sklearn.",
    "lightgbm.",
    "xgboost.",
    "numpy.",
    "scipy.",
    "collections.",
)
SKOPS_FILE = "model.skops"
TORCH_SHIM = "sklearn.externals.array_api_compat.torch"

# The distributions behind the modules whose types mlpipe trusts without --trust.
_DISTRIBUTIONS = {
    "sklearn": "scikit-learn",
    "lightgbm": "lightgbm",
    "xgboost": "xgboost",
    "numpy": "numpy",
    "scipy": "scipy",
}


class SklearnFlavor(ModelFlavor):
    """scikit-learn and LightGBM's scikit-learn API, stored with skops: classifiers with
    ``predict_proba`` and ``classes_``, and regressors (``predict``)."""

    name = "sklearn"

    def accepts(self, model: Any) -> bool:
        return hasattr(model, "predict_proba") or _is_regressor(model)

    def registration_tags(self, model: Any, trust: tuple[str, ...]) -> dict[str, str]:
        return {tag_names.SKOPS_TRUSTED_TYPES: json.dumps(trusted_types_for(model, trust))}

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        import mlflow.sklearn

        trusted = json.loads(tags[tag_names.SKOPS_TRUSTED_TYPES])
        return mlflow.sklearn.log_model(
            model,
            name="model",
            serialization_format="skops",
            skops_trusted_types=trusted,
            signature=signature,
            pip_requirements=sklearn_requirements(trusted),
        )

    def load(self, local: Path, tags: dict[str, str]) -> Any:
        trusted = json.loads(tags.get(tag_names.SKOPS_TRUSTED_TYPES, "[]"))
        return load_skops(local / SKOPS_FILE, trusted)

    def read_mlflow_dir(self, path: Path) -> Any:
        """The model of an MLflow skops directory, trusting only ``AUTO_TRUSTED_MODULES``."""
        skops_file = path / SKOPS_FILE
        untrusted = _skops_io().get_untrusted_types(file=skops_file)
        return load_skops(skops_file, _auto_trusted(untrusted, extra=()))

    def task_of(self, model: Any, declared: Task | None) -> TaskSpec:
        what = f"this {type(model).__name__}"
        classes = getattr(model, "classes_", None) if hasattr(model, "predict_proba") else None
        if classes is not None:
            return classifier_task(classes, declared, what)
        if _is_regressor(model):
            return settled(TaskSpec("regression"), declared, f"{what} is a regressor")
        raise InvalidInput(
            f"{what} has predict_proba but no classes_ (is it fitted?); mlpipe needs the "
            "classes of a classifier"
        )

    def input_names(self, model: Any) -> list[str] | None:
        names = getattr(model, "feature_names_in_", None)
        return [str(n) for n in names] if names is not None else None

    def scorer(self, model: Any, task: TaskSpec | None = None) -> Scorer:
        if task is None or task.task == "binary":
            return positive_scores(model)
        booster = getattr(model, "booster_", None)
        if booster is not None:  # LightGBM's wrapper: its Booster, one thread (see below)
            return _booster_scorer(booster)
        if task.task == "multiclass":
            return lambda x: np.asarray(model.predict_proba(x), dtype=np.float64)
        return lambda x: np.asarray(model.predict(x), dtype=np.float64).reshape(len(x))


def _is_regressor(model: Any) -> bool:
    """Whether ``model`` (or a Pipeline's last step) is a scikit-learn-style regressor."""
    if not hasattr(model, "predict") or hasattr(model, "predict_proba"):
        return False
    steps = getattr(model, "steps", None)
    final = steps[-1][1] if steps else model
    try:
        from sklearn.base import is_regressor

        return bool(is_regressor(final))
    except Exception:  # noqa: BLE001 - an object sklearn cannot tag is not a regressor
        return False


def _booster_scorer(booster: Any) -> Scorer:
    def _booster(x: np.ndarray) -> np.ndarray:
        return np.asarray(booster.predict(x, num_threads=1), dtype=np.float64)

    return _booster


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


def positive_scores(model: Any) -> Scorer:
    """A vectorized ``X -> P(class 1)`` for ``model``, bypassing wrapper overhead where it can.

    LightGBM's sklearn wrapper costs ~1 ms a call; its Booster with one thread
    costs ~40 µs, so the Booster is used directly when there is one.
    """
    booster = getattr(model, "booster_", None)
    if booster is not None and getattr(model, "n_classes_", 2) == 2:
        return _booster_scorer(booster)

    def _sklearn(x: np.ndarray) -> np.ndarray:
        return np.asarray(model.predict_proba(x)[:, 1], dtype=np.float64)

    return _sklearn


def sklearn_requirements(trusted_types: list[str]) -> list[str] | None:
    """Pinned pip requirements for a skops-stored model, or None to let MLflow infer them.

    MLflow infers requirements by loading the model in a fresh Python process,
    which costs several seconds a registration (and more under contention). When
    every type the model holds comes from a library mlpipe pins, the list is
    known without that: the model libraries, skops, and what skops loads with.
    A type from anywhere else (named with ``--trust``) leaves it to MLflow.
    """
    from importlib.metadata import PackageNotFoundError, version

    modules = {t.split(".", 1)[0] for t in trusted_types} - {"collections"}
    if not modules <= _DISTRIBUTIONS.keys():
        return None
    wanted = sorted(
        {"scikit-learn", "skops", "numpy", "scipy"} | {_DISTRIBUTIONS[m] for m in modules}
    )
    try:
        return [f"{dist}=={version(dist)}" for dist in wanted]
    except PackageNotFoundError:
        return None
