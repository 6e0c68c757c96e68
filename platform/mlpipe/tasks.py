"""What a model predicts (binary, multiclass or regression) and how one prediction looks.

A version records its task as the tag ``mlpipe.task`` and, for a classifier, its
class labels in the model's column order as ``mlpipe.classes`` (a JSON list);
versions registered before tasks existed have neither and are binary with
classes ``[0, 1]``. Every layer reads a model's output through :class:`TaskSpec`:

- a scorer returns, for ``n`` rows, ``[n]`` P(class 1) (binary), ``[n, K]`` class
  probabilities (multiclass) or ``[n]`` predicted values (regression);
- :meth:`TaskSpec.predictions` turns that into one :class:`Prediction` per row;
- :meth:`TaskSpec.answer` gives the fields a response carries for it.

One ``Prediction`` is what the prediction log keeps and the warehouse stores:
``score`` is P(class 1) (binary), the probability of the predicted class
(multiclass) or the predicted value (regression); ``label`` is 0/1 (binary), the
predicted class's index into ``classes`` (multiclass) or None (regression);
``probabilities`` is the multiclass row, None otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

Task = Literal["binary", "multiclass", "regression"]
TASKS: tuple[Task, ...] = ("binary", "multiclass", "regression")
TASK_TAG = "mlpipe.task"
CLASSES_TAG = "mlpipe.classes"
ClassLabel = int | str


class OutputError(ValueError):
    """A model's output does not have the shape or values its task needs."""


class Prediction(NamedTuple):
    """One row's prediction (see the module docstring for what each field holds).

    A NamedTuple, not a frozen dataclass: serving makes one per row, and a tuple is
    built in half the time (0.7 against 1.3 µs here).
    """

    score: float
    label: int | None
    probabilities: tuple[float, ...] | None = None


@dataclass(frozen=True)
class TaskSpec:
    """A version's task, its class labels (classifiers) and its threshold (binary)."""

    task: Task = "binary"
    classes: tuple[ClassLabel, ...] = (0, 1)
    threshold: float = 0.5

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r} (known: {', '.join(TASKS)})")
        if self.task == "regression" and self.classes:
            object.__setattr__(self, "classes", ())
        if self.task == "binary" and len(self.classes) != 2:
            raise ValueError(f"a binary task has 2 classes, not {len(self.classes)}")
        if self.task == "multiclass" and len(self.classes) < 3:
            raise ValueError(f"a multiclass task has 3 or more classes, not {len(self.classes)}")

    @property
    def is_classifier(self) -> bool:
        return self.task != "regression"

    def describe(self) -> str:
        """``binary``, ``multiclass (3 classes)`` or ``regression``."""
        if self.task == "multiclass":
            return f"multiclass ({len(self.classes)} classes)"
        return self.task

    # --- tags -------------------------------------------------------------------------

    def to_tags(self) -> dict[str, str]:
        tags: dict[str, str] = {TASK_TAG: self.task}
        if self.is_classifier:
            tags[CLASSES_TAG] = json.dumps(list(self.classes))
        return tags

    @classmethod
    def from_tags(cls, tags: Mapping[str, str], threshold: float = 0.5) -> TaskSpec:
        """The task a version's tags record (binary ``[0, 1]`` where they record none)."""
        task = tags.get(TASK_TAG, "binary")
        classes = tuple(json.loads(tags[CLASSES_TAG])) if CLASSES_TAG in tags else (0, 1)
        return cls(task=task, classes=classes, threshold=threshold)  # type: ignore[arg-type]

    # --- model output -------------------------------------------------------------------

    def check_output(self, output: Any, rows: int) -> np.ndarray:
        """``output`` as a float array of the task's shape; raises OutputError otherwise."""
        out = np.asarray(output, dtype=np.float64)
        if self.task == "multiclass":
            if out.ndim != 2 or out.shape != (rows, len(self.classes)):
                raise OutputError(
                    f"expected {rows}×{len(self.classes)} class probabilities, got shape "
                    f"{list(out.shape)}"
                )
        else:
            out = out.reshape(-1)
            if out.shape[0] != rows:
                raise OutputError(f"{out.shape[0]} outputs for {rows} rows")
        if not np.isfinite(out).all():
            raise OutputError("a non-finite output")
        if self.is_classifier and out.size and (out.min() < -1e-6 or out.max() > 1 + 1e-6):
            raise OutputError("a probability outside [0, 1]")
        return out

    def predictions(self, output: np.ndarray) -> list[Prediction]:
        """One Prediction per row of an output that passed :meth:`check_output`."""
        if self.task == "binary":
            cut = self.threshold
            return [Prediction(s, int(s >= cut)) for s in output.tolist()]
        if self.task == "regression":
            return [Prediction(v, None) for v in output.tolist()]
        best = output.argmax(axis=1).tolist()
        return [
            Prediction(row[i], i, tuple(row)) for row, i in zip(output.tolist(), best, strict=True)
        ]

    def answer(self, p: Prediction) -> dict[str, Any]:
        """The task's response fields: binary ``score`` and ``label``; multiclass ``label``
        (the class) and ``probabilities`` (class → probability); regression ``prediction``."""
        if self.task == "binary":
            return {"score": p.score, "label": p.label}
        if self.task == "regression":
            return {"prediction": p.score}
        probs = p.probabilities or ()
        return {
            "label": self.classes[p.label or 0],
            "probabilities": {str(c): q for c, q in zip(self.classes, probs, strict=True)},
        }

    # --- ground truth -------------------------------------------------------------------

    def class_index(self, label: Any) -> int | None:
        """The index in ``classes`` of a ground-truth label as a file gives it (``2``,
        ``"2"``, ``2.0`` or ``"setosa"``), or None if it names no class."""
        for i, c in enumerate(self.classes):
            if _same_label(c, label):
                return i
        return None

    def class_indices(self, labels: Sequence[Any]) -> list[int | None]:
        return [self.class_index(v) for v in labels]


def _same_label(cls: ClassLabel, label: Any) -> bool:
    if label is None or (isinstance(label, float) and math.isnan(label)):
        return False
    if str(cls) == str(label).strip():
        return True
    try:
        return float(cls) == float(label)
    except (TypeError, ValueError):
        return False
