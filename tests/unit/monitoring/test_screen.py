"""Screening: each column numerical, categorical or skipped with the reason, decided once
into a frozen result."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from mlpipe.monitoring._screen import Screened, SkippedColumn, screen


def test_columns_are_sorted_into_kinds_and_the_rest_skipped_with_why() -> None:
    reference = pd.DataFrame(
        {"amount": [1.0, 2.0, np.inf, 4.0], "city": ["a", "b", "a", "b"], "flat": ["x"] * 4}
    )
    current = pd.DataFrame({"amount": ["1", "5", "6", "7"], "city": ["a", "a", "b", "c"]})
    current["flat"] = "x"
    result = screen(reference, current, ["amount", "city", "flat", "gone"], min_values=2)
    assert result.numerical == ["amount"] and result.categorical == ["city"]
    assert result.skipped == [
        SkippedColumn(column="flat", reason="one value ('x') on both sides: nothing to test"),
        SkippedColumn(column="gone", reason="not in the reference"),
    ]
    assert result.notes == [
        "amount: text values read as numbers to match the other side",
        "amount: 1 ±inf value(s) treated as missing",
    ]
    assert list(result.reference.columns) == ["amount", "city"]
    assert result.current["amount"].tolist() == [1.0, 5.0, 6.0, 7.0]
    assert result.reference["amount"].isna().tolist() == [False, False, True, False]


def test_a_window_with_too_few_values_is_skipped() -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0]})
    result = screen(frame, frame.iloc[:1], ["x"], min_values=2)
    assert result.skipped == [
        SkippedColumn(column="x", reason="only 1 value(s) in the window (< 2)")
    ]
    assert result.numerical == [] and result.reference.empty


def test_the_results_are_frozen_and_keyword_only() -> None:
    skipped = SkippedColumn(column="x", reason="why")
    screened = Screened(reference=pd.DataFrame(), current=pd.DataFrame())
    with pytest.raises(dataclasses.FrozenInstanceError):
        skipped.reason = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        screened.numerical = ["x"]  # type: ignore[misc]
    with pytest.raises(TypeError):
        SkippedColumn("x", "why")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Screened(pd.DataFrame(), pd.DataFrame())  # type: ignore[misc]
