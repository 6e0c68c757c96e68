"""Per-class tables of canary and shadow analyses, on rows built in memory."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from mlpipe.monitoring._class_tables import agreement_tables, arm_classes, probability_deltas
from mlpipe.tasks import TaskSpec

IRIS = TaskSpec("multiclass", ("setosa", "versicolor", "virginica"))


def _rows(labels: list[float | None], outcomes: list[object]) -> pd.DataFrame:
    numbers = pd.to_numeric(pd.Series(outcomes, dtype=object), errors="coerce")
    return pd.DataFrame(
        {"label": labels, "outcome": numbers, "outcome_label": pd.Series(outcomes, dtype=object)}
    )


def test_each_arm_is_described_on_its_own_rows_by_class_name() -> None:
    champion = _rows([0, 1, 1, 2, None], ["setosa", "versicolor", "virginica", None, None])
    canary = _rows([2, 2, 0], ["virginica", "rose", "setosa"])  # "rose" names no class
    table = arm_classes({"champion": champion, "canary": canary}, IRIS)
    by_class = {r["class"]: r for r in table}
    assert list(by_class) == ["setosa", "versicolor", "virginica"]
    # the error row (no label) predicts nothing: shares over the 4 predictions
    assert by_class["versicolor"]["champion_share"] == pytest.approx(0.5)
    assert by_class["virginica"]["canary_share"] == pytest.approx(2 / 3)
    assert by_class["virginica"]["champion_labelled"] == 1
    assert by_class["virginica"]["champion_recall"] == 0.0  # predicted versicolor
    assert by_class["versicolor"]["champion_precision"] == 0.5  # 2 predicted, 1 right
    # the canary's "rose" row counts in no class's recall nor precision
    assert by_class["virginica"]["canary_precision"] == 1.0
    assert by_class["virginica"]["canary_recall"] == 1.0
    assert math.isnan(by_class["versicolor"]["canary_recall"])  # no versicolor outcome


def test_without_outcomes_only_shares_are_shown_and_a_binary_outcome_is_its_class() -> None:
    binary = TaskSpec()
    bare = arm_classes({"champion": _rows([0, 1], [None, None])}, binary)
    assert [set(r) for r in bare] == [{"class", "champion_share"}] * 2
    (zero, one) = arm_classes({"champion": _rows([1, 1, 0], [1.0, 0.0, 0.0])}, binary)
    assert (zero["class"], one["class"]) == ("0", "1")
    assert one["champion_precision"] == 0.5 and one["champion_recall"] == 1.0
    assert zero["champion_recall"] == 0.5


def test_agreement_and_confusion_name_the_candidate_and_the_classes() -> None:
    champion, canary = np.array([0, 0, 1, 2, 2]), np.array([0, 1, 1, 2, 0])
    agreement, confusion = agreement_tables(champion, canary, IRIS, "canary")
    assert agreement[0] == {"class": "setosa", "champion": 2, "canary": 2, "both": 1,
                            "agreement": 0.5}  # fmt: skip
    assert confusion[2] == {"champion \\ canary": "virginica", "setosa": 1, "versicolor": 0,
                            "virginica": 1}  # fmt: skip
    probs = np.full((5, 3), 1 / 3)
    deltas = probability_deltas(probs, probs + np.array([0.1, -0.1, 0.0]), IRIS)
    assert [(d["class"], round(d["mean"], 9)) for d in deltas] == [
        ("setosa", 0.1), ("versicolor", -0.1), ("virginica", 0.0)
    ]  # fmt: skip
