"""A model flavor: how one kind of model is logged to MLflow, loaded and scored.

A flavor knows:

- ``accepts(model)``: whether a candidate object is of this flavor;
- ``registration_tags(model, trust)``: the tags loading will need (skops types);
- ``log(model, signature, tags)``: log it as the run's ``model`` artifact;
- ``load(local, tags)``: load the downloaded, already verified, artifact dir;
- ``read_mlflow_dir(path)``: read a candidate offered as an MLflow model directory;

and ``scorer(model)`` gives the vectorized ``X -> P(class 1)`` serving calls.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

Scorer = Callable[[np.ndarray], np.ndarray]


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

    def scorer(self, model: Any) -> Scorer:
        raise NotImplementedError
