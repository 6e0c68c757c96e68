"""The XGBoost flavor: ``XGBClassifier`` and native Boosters, stored in XGBoost's own format.

A candidate is an ``XGBClassifier`` (pickled), a ``Booster`` (pickled, or a
``.json``/``.ubj`` model file from ``save_model``) or an MLflow ``xgboost``
directory. What is stored is always the Booster, logged with ``mlflow.xgboost``
as UBJSON (``model.ubj``): XGBoost's own format, no pickle and no skops, so
XGBoost needs no ``--trust`` (it is trusted like LightGBM). Serving scores the
Booster with ``inplace_predict`` on one thread, up to the best iteration where
early stopping recorded one (as ``XGBClassifier.predict_proba`` does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from mlpipe.errors import InvalidInput
from mlpipe.registry._client import first_line
from mlpipe.registry._model_flavor import ModelFlavor, Scorer, classifier_task, settled
from mlpipe.tasks import Task, TaskSpec

XGBOOST_SUFFIXES = (".json", ".ubj")
XGBOOST_FILE = "model.ubj"
BINARY_OBJECTIVES = ("binary:logistic",)
# multi:softmax predicts the class index; its margins go through a softmax instead.
MULTICLASS_OBJECTIVES = ("multi:softprob", "multi:softmax")
REGRESSION_OBJECTIVES = (
    "reg:squarederror",
    "reg:squaredlogerror",
    "reg:pseudohubererror",
    "reg:absoluteerror",
    "reg:logistic",
    "reg:gamma",
    "reg:tweedie",
    "count:poisson",
)


class XGBoostFlavor(ModelFlavor):
    """An XGBoost model: ``binary:logistic`` (P(class 1)), ``multi:softprob``/``softmax``
    (classes 0..K-1, as XGBoost requires) or a regression objective (the predicted value)."""

    name = "xgboost"

    def accepts(self, model: Any) -> bool:
        try:
            import xgboost
        except ImportError:
            return False
        return isinstance(model, xgboost.Booster | xgboost.XGBModel)

    def read_file(self, path: Path) -> Any:
        """An XGBoost ``.json``/``.ubj`` model file; InvalidInput if it is not one."""
        import xgboost

        booster = xgboost.Booster()
        try:
            booster.load_model(str(path))
        except Exception as exc:  # noqa: BLE001 - XGBoostError for any unreadable file
            raise InvalidInput(f"{path} is not an XGBoost model file: {first_line(exc)}") from exc
        return booster

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        import mlflow.xgboost
        import xgboost

        return mlflow.xgboost.log_model(
            as_booster(model),
            name="model",
            signature=signature,
            model_format="ubj",
            pip_requirements=[f"xgboost=={xgboost.__version__}"],
        )

    def load(self, local: Path, tags: dict[str, str]) -> Any:
        return self.read_file(local / XGBOOST_FILE)

    def read_mlflow_dir(self, path: Path) -> Any:
        for name in ("model.ubj", "model.json", "model.xgb"):
            if (path / name).exists():
                return self.read_file(path / name)
        raise InvalidInput(f"{path} holds no XGBoost model file (model.ubj/.json/.xgb)")

    def task_of(self, model: Any, declared: Task | None) -> TaskSpec:
        booster = as_booster(model)
        objective = _objective(booster)
        what = f"this XGBoost model's objective is {objective}"
        if objective in BINARY_OBJECTIVES:
            return classifier_task((0, 1), declared, what)
        if objective in MULTICLASS_OBJECTIVES:
            return classifier_task(range(_num_class(booster)), declared, what)
        if objective in REGRESSION_OBJECTIVES and _num_target(booster) == 1:
            return settled(TaskSpec("regression"), declared, what)
        raise InvalidInput(
            f"{what}; mlpipe serves XGBoost models with binary:logistic, "
            f"{'/'.join(MULTICLASS_OBJECTIVES)} or a one-target regression objective "
            f"({', '.join(REGRESSION_OBJECTIVES)})"
        )

    def input_names(self, model: Any) -> list[str] | None:
        names = as_booster(model).feature_names
        return [str(n) for n in names] if names else None

    def scorer(self, model: Any, task: TaskSpec | None = None) -> Scorer:
        booster = as_booster(model)
        booster.set_param({"nthread": 1})
        best = booster.attr("best_iteration")
        iterations = (0, int(best) + 1) if best is not None else (0, 0)
        softmax = _objective(booster) == "multi:softmax"
        multiclass = task is not None and task.task == "multiclass"

        def _score(x: np.ndarray) -> np.ndarray:
            kind = "margin" if softmax else "value"
            out = booster.inplace_predict(
                x, iteration_range=iterations, predict_type=kind, validate_features=False
            )
            out = np.asarray(out, dtype=np.float64)
            if softmax:
                out = _softmax(out)
            if multiclass:
                return out
            return out[:, 1] if out.ndim == 2 and out.shape[1] == 2 else out.reshape(-1)

        return _score


def as_booster(model: Any) -> Any:
    """The Booster of an ``XGBModel``, or ``model`` itself if it is one."""
    get_booster = getattr(model, "get_booster", None)
    return get_booster() if get_booster is not None else model


def _objective(booster: Any) -> str:
    config = json.loads(booster.save_config())
    return str(config["learner"]["objective"]["name"])


def _config(booster: Any) -> dict[str, Any]:
    return dict(json.loads(booster.save_config())["learner"])


def _num_class(booster: Any) -> int:
    return int(_config(booster)["learner_model_param"]["num_class"])


def _num_target(booster: Any) -> int:
    return int(_config(booster)["learner_model_param"].get("num_target", 1))


def _softmax(margins: np.ndarray) -> np.ndarray:
    shifted = np.exp(margins - margins.max(axis=1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=1, keepdims=True))
