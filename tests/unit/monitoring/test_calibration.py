"""Calibration: per screened column its effective size, and a threshold or why it has none,
built once into a frozen plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlpipe.monitoring._calibration import NullCache, Plan, calibrate, per_column_alpha
from mlpipe.monitoring._screen import Screened


def _screened(rows: int) -> Screened:
    rng = np.random.default_rng(0)
    reference = pd.DataFrame({"amount": rng.normal(size=400), "city": rng.choice(["a", "b"], 400)})
    current = pd.DataFrame({"amount": rng.normal(size=rows), "city": rng.choice(["a", "b"], rows)})
    return Screened(
        reference=reference, current=current, numerical=["amount"], categorical=["city"]
    )


def test_each_column_gets_a_threshold_at_the_per_column_share(tmp_path: Path) -> None:
    cache = NullCache(tmp_path, "m", "1", pd.DataFrame())
    plan = calibrate(_screened(200), None, cache, rate=0.01, extra_tests=1)
    assert plan.alpha == pytest.approx(per_column_alpha(0.01, 3))
    assert plan.entities is None and plan.insufficient == {}
    assert plan.effective == {"amount": 200.0, "city": 200.0}
    assert list(plan.thresholds) == ["amount", "city"]
    assert all(0 < t < 1 for t in plan.thresholds.values())


def test_too_few_entities_leave_every_column_untested_with_why(tmp_path: Path) -> None:
    cache = NullCache(tmp_path, "m", "1", pd.DataFrame())
    entities = pd.Series([f"c{i % 10}" for i in range(200)])
    plan = calibrate(_screened(200), entities, cache, rate=0.01)
    assert plan.entities == 10 and plan.thresholds == {}
    assert set(plan.insufficient) == {"amount", "city"}
    assert plan.insufficient["city"].endswith("from 10 distinct entities (< 30): not tested")


def test_the_plan_is_frozen_and_keyword_only() -> None:
    plan = Plan(alpha=0.01, entities=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.alpha = 0.5  # type: ignore[misc]
    with pytest.raises(TypeError):
        Plan(0.01, None)  # type: ignore[misc]
