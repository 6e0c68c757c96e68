"""A model flavor: how one kind of model is logged to MLflow, loaded and scored.

A flavor knows:

- ``accepts(model)``: whether a candidate object is of this flavor;
- ``registration_tags(model, trust)``: the tags loading will need (skops types);
- ``log(model, signature, tags)``: log it as the run's ``model`` artifact;
- ``load(local, tags)``: load the downloaded, already verified, artifact dir;
- ``read_mlflow_dir(path)``: read a candidate offered as an MLflow model directory;
- ``task_of(model, declared)``: what the model predicts (binary, multiclass with
  its classes, regression: a :class:`~mlpipe.tasks.TaskSpec`), inferred from the
  model and checked against the task declared with ``--task``; a model whose
  task cannot be told is refused (InvalidInput, one line) unless declared;
- ``input_names(model)``: the input columns the model names, if it names them;

and ``scorer(model, task)`` gives the vectorized ``X -> output`` serving calls,
shaped as :mod:`mlpipe.tasks` says for the task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mlpipe.errors import InvalidInput
from mlpipe.tasks import ClassLabel, Task, TaskSpec

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

    def task_of(self, model: Any, declared: Task | None) -> TaskSpec:
        """What ``model`` predicts; raises InvalidInput (one line) when that cannot be told
        or contradicts ``declared`` (the task given with ``--task``)."""
        raise InvalidInput(
            f"mlpipe cannot infer what this {self.name} model predicts; "
            "pass --task binary|multiclass|regression"
        )

    def input_names(self, model: Any) -> list[str] | None:
        """The model's input columns in order, or None if it does not name them."""
        return None

    def scorer(self, model: Any, task: TaskSpec | None = None) -> Scorer:
        raise NotImplementedError


def settled(inferred: TaskSpec, declared: Task | None, what: str) -> TaskSpec:
    """``inferred``, unless ``declared`` names another task: then InvalidInput, one line.

    ``what`` names where the inference came from ("this LGBMClassifier has 3 classes").
    """
    if declared is not None and declared != inferred.task:
        raise InvalidInput(
            f"--task {declared} does not match the model: {what}, so it is {inferred.describe()}"
        )
    return inferred


def classifier_task(
    classes: Iterable[Any], declared: Task | None, what: str, threshold: float = 0.5
) -> TaskSpec:
    """Binary (2 classes) or multiclass (3 or more) over ``classes``, in the model's order."""
    labels = plain_classes(classes)
    if len(labels) < 2:
        raise InvalidInput(f"{what} has {len(labels)} class; a classifier needs 2 or more")
    task: Task = "binary" if len(labels) == 2 else "multiclass"
    return settled(TaskSpec(task, labels, threshold), declared, f"{what} has {len(labels)} classes")


def plain_classes(classes: Iterable[Any]) -> tuple[ClassLabel, ...]:
    """Class labels as plain JSON-able Python values: integers (an integral float or a bool
    too) stay integers, anything else becomes its text."""
    labels: list[ClassLabel] = []
    for c in classes:
        value = c.item() if isinstance(c, np.generic) else c
        if isinstance(value, bool | int):
            labels.append(int(value))
        elif isinstance(value, float) and value.is_integer():
            labels.append(int(value))
        else:
            labels.append(str(value))
    return tuple(labels)
