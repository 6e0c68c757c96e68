"""What an arm's window is compared against: its reference, from one of three sources.

* ``training``: the reference register stored with the version, scored by the
  version itself for prediction drift (the scores cached beside the null
  distributions: the registry stores the reference's inputs, not its scores;
  training labels are no reference for scores, a model's positive rate is not the
  base rate);
* a window of earlier traffic (``window:7d``), shadow rows left out;
* a given frame (features, optional ``score`` and predicted ``label``).

Prediction drift compares the binary score, the multiclass predicted class (as
text: a categorical column) or the regression predicted value, in the column
:data:`PREDICTION`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpipe import registry, warehouse
from mlpipe.config import Settings
from mlpipe.errors import MlpipeError
from mlpipe.monitoring._calibration import reference_digest, safe_name
from mlpipe.tasks import TaskSpec
from mlpipe.windows import ReferenceSpec, Window

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

PREDICTION = "prediction"
_SEED = 7


def null_folder(settings: Settings) -> Path:
    """Where null distributions and reference scores are cached."""
    return settings.state_path / "monitor" / "drift-null"


@dataclass(frozen=True, kw_only=True)
class Reference:
    """An arm's reference: features (+ :data:`PREDICTION`) and its positive rate (binary,
    where known), with notes on what could not be tested against it."""

    frame: pd.DataFrame
    positive_rate: float | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ReferenceScores:
    """The version's scores on its reference, and its decision threshold."""

    scores: np.ndarray
    threshold: float

    @property
    def positive_rate(self) -> float:
        return float((self.scores >= self.threshold).mean())


def reference_scores(
    settings: Settings, model: str, version: str, reference: pd.DataFrame, folder: Path
) -> ReferenceScores:
    """The version's scores on its reference, cached; raises MlpipeError if it cannot load."""
    import numpy as np

    path = (
        folder / safe_name(model) / safe_name(version) / f"scores-{reference_digest(reference)}.npz"
    )
    if path.exists():
        cached = np.load(path)
        return ReferenceScores(scores=cached["scores"], threshold=float(cached["threshold"]))
    loaded = registry.load_verified(settings, model, version)
    scores = np.asarray(loaded.predict_scores(loaded.inputs_from(reference)), dtype=float)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, scores=scores, threshold=np.array(loaded.threshold))
    tmp.replace(path)
    return ReferenceScores(scores=scores, threshold=loaded.threshold)


def predicted(spec: TaskSpec, output: np.ndarray) -> Any:
    """What prediction drift compares for a model output: the binary score, the predicted
    class as text (multiclass: a categorical column) or the predicted value."""
    if spec.task != "multiclass":
        return output
    names = [str(c) for c in spec.classes]
    return [names[i] for i in output.argmax(axis=1)]


def served(spec: TaskSpec, rows: pd.DataFrame) -> Any:
    """:func:`predicted` of logged rows: score, or the class their ``label`` indexes as text."""
    if spec.task != "multiclass":
        return rows["score"].to_numpy(dtype=float)
    names = [str(c) for c in spec.classes]
    return [
        None if v is None or v != v or not 0 <= int(v) < len(names) else names[int(v)]
        for v in rows["label"].tolist()
    ]


def training_reference(settings: Settings, model: str, version: str, spec: TaskSpec) -> Reference:
    """The version's stored reference, with what the version predicts on it."""
    frame = registry.load_reference(settings, model, version).drop(columns="label", errors="ignore")
    try:
        scores = reference_scores(settings, model, version, frame, null_folder(settings))
    except MlpipeError as exc:
        note = f"prediction drift not tested: the version's reference scores: {exc}"
        return Reference(frame=frame, notes=(note,))
    if spec.task != "binary":  # the version's own predictions: classes, or values
        return Reference(frame=frame.assign(**{PREDICTION: predicted(spec, scores.scores)}))
    return Reference(
        frame=frame.assign(**{PREDICTION: scores.scores}), positive_rate=scores.positive_rate
    )


def window_reference(
    settings: Settings, model: str, window: Window, sample_rows: int, spec: TaskSpec
) -> Reference:
    """The champion and canary traffic of an earlier window, with what was served."""
    ref = warehouse.prediction_window(
        settings, model, window.start, window.end, sample_rows=sample_rows, seed=_SEED
    )
    keep = (ref.rows["arm"] != "shadow").to_numpy()
    frame = ref.features[keep].reset_index(drop=True)
    frame[PREDICTION] = served(spec, ref.rows[keep])
    if spec.task != "binary":
        return Reference(frame=frame)
    rate = float(ref.rows["label"][keep].mean()) if keep.any() else None
    return Reference(frame=frame, positive_rate=rate)


def given_reference(frame: pd.DataFrame, spec: TaskSpec) -> Reference:
    """A given frame: scores in ``score`` (its ``label`` the predicted labels) if it has them;
    a multiclass version's predicted classes in ``label``, a regression's values in ``score``."""
    if spec.task == "multiclass":
        if "label" not in frame.columns:
            note = "prediction drift not tested: the given reference has no label column"
            return Reference(frame=frame.drop(columns="score", errors="ignore"), notes=(note,))
        out = frame.drop(columns=["score", "label"], errors="ignore")
        return Reference(frame=out.assign(**{PREDICTION: frame["label"].astype(str)}))
    if "score" not in frame.columns:
        note = "prediction drift not tested: the given reference has no score column"
        return Reference(frame=frame.drop(columns="label", errors="ignore"), notes=(note,))
    rate = float(frame["label"].mean()) if "label" in frame.columns else None
    out = frame.drop(columns="label", errors="ignore").rename(columns={"score": PREDICTION})
    return Reference(frame=out, positive_rate=rate if spec.task == "binary" else None)


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class ReferenceSource:
    """Where each arm's reference comes from: a given frame, a window of traffic, or training."""

    spec: ReferenceSpec
    frame: pd.DataFrame | None
    sample_rows: int

    def describe(self) -> str:
        return self.spec.describe() if self.frame is None else "given frame"

    def for_version(
        self, settings: Settings, model: str, version: str | None, task: TaskSpec
    ) -> Reference:
        """The reference for an arm (training: of the arm's ``version``; none without one),
        at most ``sample_rows`` of it."""
        import pandas as pd

        if self.frame is not None:
            ref = given_reference(self.frame, task)
        elif self.spec.kind == "window":
            assert self.spec.window is not None
            ref = window_reference(settings, model, self.spec.window, self.sample_rows, task)
        elif version is not None:
            ref = training_reference(settings, model, version, task)
        else:
            ref = Reference(frame=pd.DataFrame())
        frame = ref.frame
        if len(frame) > self.sample_rows:
            frame = frame.sample(self.sample_rows, random_state=_SEED)
        return Reference(
            frame=frame.reset_index(drop=True), positive_rate=ref.positive_rate, notes=ref.notes
        )


__all__ = [
    "PREDICTION",
    "Reference",
    "ReferenceScores",
    "ReferenceSource",
    "given_reference",
    "null_folder",
    "predicted",
    "reference_scores",
    "served",
    "training_reference",
    "window_reference",
]
