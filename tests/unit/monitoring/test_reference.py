"""What an arm is compared against: a given frame's scores or classes become the prediction
column, a frame without them says prediction drift is not tested, a large one is sampled."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe.monitoring import _reference
from mlpipe.monitoring._reference import (
    PREDICTION,
    ReferenceSource,
    given_reference,
    predicted,
    reference_scores,
    served,
)
from mlpipe.tasks import TaskSpec
from mlpipe.windows import ReferenceSpec

BINARY = TaskSpec()
IRIS = TaskSpec("multiclass", ("setosa", "versicolor", "virginica"))
HOUSE = TaskSpec("regression", ())


def test_a_binary_frame_scores_are_the_prediction_and_its_labels_the_positive_rate() -> None:
    frame = pd.DataFrame({"x": [1, 2, 3, 4], "score": [0.1, 0.9, 0.8, 0.2], "label": [0, 1, 1, 1]})
    ref = given_reference(frame, BINARY)
    assert list(ref.frame.columns) == ["x", PREDICTION]
    assert ref.positive_rate == 0.75 and ref.notes == ()
    assert given_reference(frame, HOUSE).positive_rate is None  # a regression has none


def test_a_frame_without_what_was_predicted_says_prediction_drift_is_not_tested() -> None:
    frame = pd.DataFrame({"x": [1, 2], "label": [0, 1]})
    ref = given_reference(frame, BINARY)
    assert list(ref.frame.columns) == ["x"]
    assert ref.notes == ("prediction drift not tested: the given reference has no score column",)
    iris = given_reference(pd.DataFrame({"x": [1.0], "score": [0.7]}), IRIS)
    assert list(iris.frame.columns) == ["x"]
    assert iris.notes == ("prediction drift not tested: the given reference has no label column",)


def test_a_multiclass_frame_predicted_classes_are_text() -> None:
    frame = pd.DataFrame({"x": [1, 2], "score": [0.7, 0.6], "label": ["setosa", "versicolor"]})
    ref = given_reference(frame, IRIS)
    assert ref.frame[PREDICTION].tolist() == ["setosa", "versicolor"]


def test_served_and_predicted_agree_on_what_prediction_drift_compares() -> None:
    rows = pd.DataFrame({"score": [0.9, 0.8, 0.7], "label": [1, 0, np.nan]})
    assert served(IRIS, rows) == ["versicolor", "setosa", None]
    assert served(IRIS, pd.DataFrame({"label": [5]})) == [None]  # no such class
    assert served(BINARY, rows).tolist() == [0.9, 0.8, 0.7]
    probabilities = np.array([[0.2, 0.7, 0.1], [0.6, 0.3, 0.1]])
    assert predicted(IRIS, probabilities) == ["versicolor", "setosa"]
    assert predicted(HOUSE, np.array([3.5])).tolist() == [3.5]


def test_a_given_frame_is_sampled_to_the_reference_size_and_described() -> None:
    frame = pd.DataFrame({"x": np.arange(100), "score": np.linspace(0, 1, 100)})
    source = ReferenceSource(spec=ReferenceSpec("frame"), frame=frame, sample_rows=10)
    settings: Any = None  # a given frame needs neither the registry nor the warehouse
    ref = source.for_version(settings, "m", "1", BINARY)
    assert len(ref.frame) == 10 and list(ref.frame.index) == list(range(10))
    assert source.describe() == "given frame"
    training = ReferenceSource(spec=ReferenceSpec("training"), frame=None, sample_rows=10)
    assert training.describe() == "training reference"


def test_training_without_a_version_is_an_empty_reference() -> None:
    settings: Any = None
    ref = ReferenceSource(spec=ReferenceSpec("training"), frame=None, sample_rows=10).for_version(
        settings, "m", None, BINARY
    )
    assert ref.frame.empty and ref.positive_rate is None


def test_reference_scores_are_scored_once_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    class Loaded:
        threshold = 0.5

        def inputs_from(self, frame: pd.DataFrame) -> pd.DataFrame:
            return frame

        def predict_scores(self, frame: pd.DataFrame) -> np.ndarray:
            return frame["x"].to_numpy() / 10

    def load_verified(settings: Any, model: str, version: str) -> Loaded:
        calls.append(version)
        return Loaded()

    monkeypatch.setattr(_reference.registry, "load_verified", load_verified)
    frame = pd.DataFrame({"x": [1.0, 6.0, 9.0, 2.0]})
    settings: Any = None
    first = reference_scores(settings, "fraud", "3", frame, tmp_path)
    again = reference_scores(settings, "fraud", "3", frame, tmp_path)
    assert calls == ["3"]
    assert again.scores.tolist() == first.scores.tolist() == [0.1, 0.6, 0.9, 0.2]
    assert again.threshold == 0.5 and again.positive_rate == 0.5


def test_a_reference_source_is_frozen_and_keyword_only() -> None:
    source = ReferenceSource(spec=ReferenceSpec("training"), frame=None, sample_rows=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        source.sample_rows = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        ReferenceSource(ReferenceSpec("training"), None, 10)  # type: ignore[misc]
