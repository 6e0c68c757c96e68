"""The LightGBM flavor: a native ``lightgbm.Booster``, stored as LightGBM's own text model.

A Booster arrives pickled (joblib), as a ``.txt`` model file (``Booster.save_model``)
or as an MLflow ``lightgbm`` directory. It is logged with ``mlflow.lightgbm``
(``model.lgb``, the text format: no pickle) and loaded with
``lightgbm.Booster(model_file=...)``, so a serving process never unpickles it.
LightGBM's scikit-learn API (``LGBMClassifier``) stays with the scikit-learn
flavor (skops), which scores through its Booster the same way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from mlpipe.errors import InvalidInput
from mlpipe.registry._client import first_line
from mlpipe.registry._model_flavor import ModelFlavor, Scorer, classifier_task, settled
from mlpipe.tasks import Task, TaskSpec

LIGHTGBM_SUFFIXES = (".txt",)
LIGHTGBM_FILE = "model.lgb"
_UNNAMED = re.compile(r"Column_\d+")
MULTICLASS_OBJECTIVES = ("multiclass", "multiclassova")
# Objectives whose prediction is the target's value (after the objective's own link).
REGRESSION_OBJECTIVES = (
    "regression",
    "regression_l1",
    "huber",
    "fair",
    "poisson",
    "quantile",
    "mape",
    "gamma",
    "tweedie",
)


class LightGBMFlavor(ModelFlavor):
    """A native LightGBM Booster: ``binary`` (P(class 1)), ``multiclass``/``multiclassova``
    (classes 0..K-1) or a regression objective (the predicted value)."""

    name = "lightgbm"

    def accepts(self, model: Any) -> bool:
        lightgbm = _lightgbm()
        return lightgbm is not None and isinstance(model, lightgbm.Booster)

    def read_file(self, path: Path) -> Any:
        """A LightGBM text model file; InvalidInput if it is not one."""
        import lightgbm

        try:
            return lightgbm.Booster(model_file=str(path))
        except Exception as exc:  # noqa: BLE001 - LightGBM raises LightGBMError or OSError
            raise InvalidInput(f"{path} is not a LightGBM model file: {first_line(exc)}") from exc

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        import lightgbm
        import mlflow.lightgbm

        return mlflow.lightgbm.log_model(
            model,
            name="model",
            signature=signature,
            pip_requirements=[f"lightgbm=={lightgbm.__version__}"],
        )

    def load(self, local: Path, tags: dict[str, str]) -> Any:
        return self.read_file(local / LIGHTGBM_FILE)

    def read_mlflow_dir(self, path: Path) -> Any:
        return self.read_file(path / LIGHTGBM_FILE)

    def task_of(self, model: Any, declared: Task | None) -> TaskSpec:
        objective = booster_objective(model)
        what = f"this LightGBM Booster's objective is {objective or 'unknown'}"
        per_iteration = model.num_model_per_iteration()
        if objective == "binary" and per_iteration == 1:
            return classifier_task((0, 1), declared, what)
        if objective in MULTICLASS_OBJECTIVES:
            return classifier_task(range(per_iteration), declared, what)
        if objective in REGRESSION_OBJECTIVES and per_iteration == 1:
            return settled(TaskSpec("regression"), declared, what)
        raise InvalidInput(
            f"{what}; mlpipe serves LightGBM Boosters with the binary, multiclass "
            f"or a regression objective ({', '.join(REGRESSION_OBJECTIVES)})"
        )

    def input_names(self, model: Any) -> list[str] | None:
        names = [str(n) for n in model.feature_name()]
        return None if all(_UNNAMED.fullmatch(n) for n in names) else names

    def scorer(self, model: Any, task: TaskSpec | None = None) -> Scorer:
        two_columns = model.num_model_per_iteration() == 2  # multiclass over 2 classes: binary

        def _booster(x: np.ndarray) -> np.ndarray:
            out = np.asarray(model.predict(x, num_threads=1), dtype=np.float64)
            return out[:, 1] if two_columns else out

        return _booster


def booster_objective(booster: Any) -> str | None:
    """The objective's name (``binary``, ``multiclass``, ``regression``…) from the model header."""
    header: str = booster.model_to_string(num_iteration=1)
    for line in header.splitlines():
        if line.startswith("objective="):
            return line.removeprefix("objective=").split(" ", 1)[0]
        if line.startswith("Tree="):
            break
    return None


def _lightgbm() -> Any:
    try:
        import lightgbm
    except ImportError:
        return None
    return lightgbm
