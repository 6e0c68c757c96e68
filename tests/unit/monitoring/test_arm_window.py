"""One report per version an arm served: groups newest first, ``--version`` keeps one and
notes the rest, an arm with no rows still gets its (empty) group."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe.monitoring._arm_window import (
    ArmGroup,
    ArmWindow,
    arm_window,
    newest_first,
    version_groups,
)
from mlpipe.tasks import TaskSpec

ROWS = pd.DataFrame(
    {
        "arm": ["champion", "champion", "champion", "canary"],
        "version": ["1", "2", "2", "3"],
        "ts": pd.to_datetime(
            ["2026-01-01 10:00", "2026-01-01 09:00", "2026-01-01 11:00", "2026-01-01 10:00"]
        ),
    }
)


def test_an_arm_that_served_two_versions_gets_a_group_per_version_newest_first() -> None:
    assert newest_first(ROWS[ROWS["arm"] == "champion"]) == ["2", "1"]
    groups = version_groups(ROWS, ["champion", "canary", "shadow"])
    assert [(g.arm, g.version, g.name) for g in groups] == [
        ("champion", "2", "champion-v2"),
        ("champion", "1", "champion-v1"),
        ("canary", "3", "canary"),
        ("shadow", None, "shadow"),
    ]
    assert groups[0].mask.tolist() == [False, True, True, False]
    assert not groups[3].mask.any()


def test_one_version_kept_notes_the_rows_of_others() -> None:
    groups = version_groups(ROWS, ["champion", "canary"], version="1")
    assert [(g.arm, g.version, g.name) for g in groups] == [
        ("champion", "1", "champion"),
        ("canary", "1", "canary"),
    ]
    assert groups[0].notes == ("2 row(s) of other versions on the champion arm left out",)
    assert groups[1].notes == ("1 row(s) of other versions on the canary arm left out",)
    assert not groups[1].mask.any()


def test_a_group_window_scales_the_sampled_total_and_keeps_its_entities() -> None:
    features = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0]})
    entities = pd.DataFrame({"entity_key": ["a", "b", "a", "c"]})
    logged: Any = type("Logged", (), {})()
    logged.rows, logged.features, logged.entities = ROWS, features, entities
    logged.total, logged.sampled = 40, True
    (group, *_) = version_groups(ROWS, ["champion"])
    window = arm_window(logged, group, TaskSpec())
    assert window.total == 20 and window.sampled  # half the sample: half the window
    assert window.features["x"].tolist() == [2.0, 3.0]
    assert window.clusters().tolist() == ["b", "a"]
    assert window.version == "2"


def test_a_window_without_entities_clusters_each_row_alone() -> None:
    window = ArmWindow(
        rows=ROWS.iloc[:0], features=pd.DataFrame(), entities=None, total=0, sampled=False
    )
    assert window.version == "?"
    assert np.array_equal(window.clusters(), np.arange(0))


def test_a_group_is_frozen_and_keyword_only() -> None:
    group = version_groups(ROWS, ["canary"])[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        group.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ArmGroup("canary", "3", group.mask, "canary")  # type: ignore[misc]
