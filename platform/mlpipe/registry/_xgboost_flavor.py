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
from mlpipe.registry._model_flavor import ModelFlavor, Scorer, not_binary

XGBOOST_SUFFIXES = (".json", ".ubj")
XGBOOST_FILE = "model.ubj"
BINARY_OBJECTIVES = ("binary:logistic",)


class XGBoostFlavor(ModelFlavor):
    """An XGBoost classifier whose objective gives P(class 1) (``binary:logistic``)."""

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

    def check_binary(self, model: Any) -> None:
        objective = _objective(as_booster(model))
        if objective not in BINARY_OBJECTIVES:
            raise not_binary(f"this XGBoost model's objective is {objective}")

    def input_names(self, model: Any) -> list[str] | None:
        names = as_booster(model).feature_names
        return [str(n) for n in names] if names else None

    def scorer(self, model: Any) -> Scorer:
        booster = as_booster(model)
        booster.set_param({"nthread": 1})
        best = booster.attr("best_iteration")
        iterations = (0, int(best) + 1) if best is not None else (0, 0)

        def _score(x: np.ndarray) -> np.ndarray:
            scores = booster.inplace_predict(x, iteration_range=iterations, validate_features=False)
            return np.asarray(scores, dtype=np.float64).reshape(-1)

        return _score


def as_booster(model: Any) -> Any:
    """The Booster of an ``XGBModel``, or ``model`` itself if it is one."""
    get_booster = getattr(model, "get_booster", None)
    return get_booster() if get_booster is not None else model


def _objective(booster: Any) -> str:
    config = json.loads(booster.save_config())
    return str(config["learner"]["objective"]["name"])
