"""A version's quality baseline: the holdout read and checked, the measured tags and what
they were measured on (registration through ``register`` is in test_eval_dataset.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe.errors import InvalidInput
from mlpipe.registry import InputColumn, InputSchema, tag_names
from mlpipe.registry._baseline import (
    HOLDOUT,
    TRAINING,
    Baseline,
    measured_tags,
    read_holdout,
    with_measured,
)
from mlpipe.tasks import TaskSpec

FEATURES = ["amount", "count"]
SCHEMA = InputSchema(
    (InputColumn("amount", "number", "float64"), InputColumn("count", "integer", "int64"))
)


def _csv(path: Path, frame: pd.DataFrame) -> Path:
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def training(tmp_path: Path) -> Path:
    frame = pd.DataFrame({"amount": [1.0, 2.0], "count": [1, 2], "label": [0, 1]})
    return _csv(tmp_path / "train.csv", frame)


def _holdout(path: Path, **columns: list[Any]) -> Path:
    frame = {"amount": [0.1, 0.9, 0.2, 0.8], "count": [1, 2, 3, 4], "label": [0, 1, 0, 1]}
    return _csv(path, pd.DataFrame({**frame, **columns}))


def test_a_holdout_keeps_the_inputs_and_the_label_and_says_what_it_is(
    tmp_path: Path, training: Path
) -> None:
    path = _holdout(tmp_path / "holdout.csv", extra=["x", "y", "z", "w"])
    baseline = read_holdout(
        path, features=["count", "amount"], label="label", task=TaskSpec(), training=training
    )
    assert list(baseline.frame.columns) == ["count", "amount", "label"]
    assert (baseline.label, baseline.path, baseline.source) == ("label", path, HOLDOUT)
    assert baseline.words == "dataset holdout.csv (the --eval-dataset holdout)"


def test_the_registration_dataset_says_so_in_words(training: Path) -> None:
    baseline = Baseline(pd.DataFrame(), "label", training)
    assert (baseline.source, baseline.words) == (
        TRAINING,
        "dataset train.csv (the registration dataset)",
    )


def test_a_long_list_of_missing_inputs_is_cut_after_twelve(tmp_path: Path, training: Path) -> None:
    path = _holdout(tmp_path / "holdout.csv")
    wanted = [f"f{i:02}" for i in range(15)]
    with pytest.raises(InvalidInput) as raised:
        read_holdout(path, features=wanted, label="label", task=TaskSpec(), training=training)
    assert str(raised.value) == (
        "--eval-dataset holdout.csv lacks input column(s) the model takes: "
        + ", ".join(wanted[:12])
        + " and 3 more (its columns: amount, count, label)"
    )


def test_blank_labels_are_no_labels(tmp_path: Path, training: Path) -> None:
    path = _holdout(tmp_path / "holdout.csv", label=[" ", None, "", None])
    with pytest.raises(InvalidInput) as raised:
        read_holdout(path, features=FEATURES, label="label", task=TaskSpec(), training=training)
    assert str(raised.value) == "--eval-dataset holdout.csv: no row has a label in column 'label'"


def test_labels_that_name_no_class_are_listed_once_each(tmp_path: Path, training: Path) -> None:
    path = _holdout(tmp_path / "holdout.csv", label=[0, 7, 7, 9])
    with pytest.raises(InvalidInput) as raised:
        read_holdout(path, features=FEATURES, label="label", task=TaskSpec(), training=training)
    assert str(raised.value) == (
        "--eval-dataset holdout.csv: label(s) 7, 9 in column 'label' name no class of the "
        "model (its classes: 0, 1)"
    )


def _served(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=float)[:, 0]  # the score is the amount


def _baseline(path: Path) -> Baseline:
    return Baseline(pd.read_csv(path), "label", path, HOLDOUT)


def test_measured_tags_on_a_holdout_name_it_and_its_hash(tmp_path: Path) -> None:
    path = _holdout(tmp_path / "holdout.csv", amount=[0.1, 0.9, 0.2, 0.4])
    tags = measured_tags(TaskSpec(), _served, SCHEMA, FEATURES, _baseline(path))
    assert tag_names.metrics(tags)["recall"] == 0.5  # class 1: 0.9 flagged, 0.4 missed
    assert tag_names.metrics(tags)["auc"] == 1.0
    assert json.loads(tags[tag_names.CLASS_RECALL]) == {"0": 1.0, "1": 0.5}
    assert json.loads(tags[tag_names.CLASS_SUPPORT]) == {"0": 2, "1": 2}
    assert tags[tag_names.METRICS_SOURCE] == HOLDOUT
    assert tags[tag_names.METRICS_ON] == "dataset holdout.csv (the --eval-dataset holdout)"
    assert tags[tag_names.EVAL_DATASET] == "holdout.csv"
    assert tags[tag_names.EVAL_DATA_SHA256] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_measured_tags_on_the_training_set_name_no_eval_dataset(tmp_path: Path) -> None:
    path = _holdout(tmp_path / "train.csv")
    tags = measured_tags(
        TaskSpec(), _served, SCHEMA, FEATURES, Baseline(pd.read_csv(path), "label", path)
    )
    assert tags[tag_names.METRICS_SOURCE] == TRAINING
    assert tag_names.EVAL_DATASET not in tags and tag_names.EVAL_DATA_SHA256 not in tags


def test_a_holdout_value_serving_would_refuse_is_named_by_row(tmp_path: Path) -> None:
    path = _holdout(tmp_path / "holdout.csv", count=[1, 2, 2.5, 2.5])
    with pytest.raises(InvalidInput) as raised:
        measured_tags(TaskSpec(), _served, SCHEMA, FEATURES, _baseline(path))
    assert str(raised.value) == (
        "--eval-dataset holdout.csv, row 3: features.count: expected an integer, got 2.5 "
        "(serving refuses it, so the holdout cannot be scored as served)"
    )


def test_a_regression_holdout_gets_its_errors_and_no_class_tags(tmp_path: Path) -> None:
    path = _holdout(tmp_path / "holdout.csv", label=[0.1, 0.9, 0.4, 1.0])
    tags = measured_tags(TaskSpec("regression"), _served, SCHEMA, FEATURES, _baseline(path))
    figures = tag_names.metrics(tags)
    assert figures["mae"] == pytest.approx(0.1)  # |0.2 - 0.4| + |0.8 - 1.0|, over 4 rows
    assert figures["bias"] == pytest.approx(-0.1)
    assert tag_names.CLASS_RECALL not in tags and tag_names.CLASS_SUPPORT not in tags


def test_with_measured_keeps_a_given_metric_and_lists_the_measured_names() -> None:
    measured = {
        **tag_names.metric_tags({"auc": 0.99, "recall": 0.8, "precision": 0.7}),
        tag_names.METRICS_SOURCE: HOLDOUT,
    }
    given = {**tag_names.metric_tags({"recall": 0.5}), "owner": "ml-team"}
    tags = with_measured(given, measured)
    assert tag_names.metrics(tags) == {"auc": 0.99, "recall": 0.5, "precision": 0.7}
    assert tags[tag_names.METRICS_MEASURED] == "auc,precision"
    assert (tags["owner"], tags[tag_names.METRICS_SOURCE]) == ("ml-team", HOLDOUT)
