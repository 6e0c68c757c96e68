"""A model flavor: how one kind of model is logged to MLflow, loaded and scored.

A flavor knows:

- ``accepts(model)``: whether a candidate object is of this flavor;
- ``registration_tags(model, trust)``: the tags loading will need (skops types);
- ``log(model, signature, tags)``: log it as the run's ``model`` artifact;
- ``load(local, tags)``: load the downloaded, already verified, artifact dir;
- ``read_mlflow_dir(path)``: read a candidate offered as an MLflow model directory;
- ``check_binary(model)``: refuse (InvalidInput, one line) a model that is not a
  binary classifier: serving gives P(class 1) against a threshold, so a
  multiclass or regression model would be served wrong, silently;
- ``input_names(model)``: the input columns the model names, if it names them;

and ``scorer(model)`` gives the vectorized ``X -> P(class 1)`` serving calls.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mlpipe.errors import InvalidInput

Scorer = Callable[[np.ndarray], np.ndarray]

BINARY_ONLY = (
    "mlpipe serves binary classifiers only for now (P(class 1) against a threshold); "
    "multiclass and regression models are not supported yet"
)


class ModelFlavor:
    """One kind of model; subclasses fill in every method."""

    name: ClassVar[str]

    def accepts(self, model: Any) -> bool:
        raise NotImplementedError

    def registration_tags(self, model: Any, trust: tuple[str, ...]) -> dict[str, str]:
        return {}

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        """Log ``model`` as artifact ``model`` of the active run; MLflow's ModelInfo."""
        raise NotImplementedError

    def load(self, local: Path, tags: dict[str, str]) -> Any:
        raise NotImplementedError

    def read_mlflow_dir(self, path: Path) -> Any:
        """A candidate model from an MLflow model directory of this flavor."""
        raise NotImplementedError

    def check_binary(self, model: Any) -> None:
        """Raise InvalidInput (naming ``BINARY_ONLY``) unless ``model`` is a binary classifier."""

    def input_names(self, model: Any) -> list[str] | None:
        """The model's input columns in order, or None if it does not name them."""
        return None

    def scorer(self, model: Any) -> Scorer:
        raise NotImplementedError


def not_binary(what: str) -> InvalidInput:
    """The one-line refusal of a model that is not a binary classifier."""
    return InvalidInput(f"{what}: {BINARY_ONLY}")
