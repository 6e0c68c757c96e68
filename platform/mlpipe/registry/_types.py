"""What the registry hands back: a version, a model's summary, a loaded version."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlpipe.registry import tag_names
from mlpipe.registry._flavors import FLAVORS
from mlpipe.registry._input_schema import InputSchema
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


@dataclass(frozen=True)
class VersionInfo:
    """One registered version: its aliases, its tags (lineage, storage) and where it lives."""

    name: str
    version: str
    aliases: list[str]
    tags: dict[str, str]
    run_id: str | None
    source: str
    created_ms: int

    @classmethod
    def from_mlflow(cls, mv: Any) -> VersionInfo:
        """From MLflow's ``ModelVersion``."""
        return cls(
            name=mv.name,
            version=str(mv.version),
            aliases=list(mv.aliases or []),
            tags=dict(mv.tags or {}),
            run_id=mv.run_id,
            source=mv.source,
            created_ms=int(mv.creation_timestamp or 0),
        )

    @property
    def features(self) -> list[str]:
        features: list[str] = json.loads(self.tags.get(tag_names.FEATURES, "[]"))
        return features

    @property
    def metrics(self) -> dict[str, float]:
        return tag_names.metrics(self.tags)

    @property
    def class_recall(self) -> dict[str, float]:
        """Each class's recall as register measured it (class name -> recall; empty for a
        regression or a version registered before it was measured)."""
        return tag_names.per_class(self.tags, tag_names.CLASS_RECALL)

    @property
    def class_support(self) -> dict[str, int]:
        """The labelled rows of each class its :attr:`class_recall` was measured on."""
        return {
            k: int(v) for k, v in tag_names.per_class(self.tags, tag_names.CLASS_SUPPORT).items()
        }

    @property
    def baseline_on_holdout(self) -> bool:
        """Whether register measured the version's metrics on a holdout (``--eval-dataset``)
        rather than on its training data (optimistic)."""
        return self.tags.get(tag_names.METRICS_SOURCE) == "holdout"

    @property
    def task(self) -> TaskSpec:
        """The version's task and classes (binary ``[0, 1]`` for versions that predate them)."""
        return TaskSpec.from_tags(self.tags, float(self.tags.get(tag_names.THRESHOLD, "0.5")))

    @property
    def input_schema(self) -> InputSchema | None:
        """The typed inputs recorded at registration (None for versions registered before)."""
        text = self.tags.get(tag_names.INPUT_SCHEMA)
        return InputSchema.from_json(text) if text else None


@dataclass(frozen=True)
class ModelSummary:
    """A registered model: its latest version and its aliases (alias -> version)."""

    name: str
    latest_version: str | None
    aliases: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadedModel:
    """A verified, loaded version, ready to score arrays of its ``features``.

    ``input_schema`` is the version's typed inputs (None if it predates them);
    ``frame_inputs`` is that schema when the model is scored on a DataFrame
    (string inputs, columns selected by name), None for the float-array path.
    """

    name: str
    version: str
    features: list[str]
    feature_service: str | None
    threshold: float
    artifact_sha256: str
    model: Any = field(repr=False)
    flavor: str = "sklearn"
    input_schema: InputSchema | None = None
    task: TaskSpec = field(default_factory=TaskSpec)
    frame_inputs: InputSchema | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        schema = self.input_schema
        if schema is not None and schema.frame:  # read once: serving asks on every request
            object.__setattr__(self, "frame_inputs", schema)

    def predict_scores(self, x: Any) -> np.ndarray:
        """The model's output for the rows of ``x``, vectorized, shaped by ``task`` (see
        :mod:`mlpipe.tasks`): ``x`` is a float array, columns in ``features`` order, or
        (``frame_inputs``) a DataFrame with the training names and dtypes."""
        scores: np.ndarray = self._scorer(x)
        return scores

    def inputs_from(self, frame: pd.DataFrame) -> Any:
        """The ``features`` columns of ``frame`` as the model takes them: a float array, or
        (``frame_inputs``) a DataFrame with the training dtypes, as serving builds them."""
        if self.frame_inputs is None:
            return frame[self.features].to_numpy(dtype=float)
        return self.frame_inputs.to_frame(frame[self.features].to_numpy(dtype=object).tolist())

    @property
    def _scorer(self) -> Any:
        scorer = self.__dict__.get("_cached_scorer")
        if scorer is None:
            scorer = FLAVORS[self.flavor]().scorer(self.model, self.task)
            object.__setattr__(self, "_cached_scorer", scorer)
        return scorer
