"""The rows of a drift window that one report judges: one version on one arm.

A figure never pools two versions: an arm that served two versions in the
window gets one group (and one report file, ``ARM-vVERSION``) per version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlpipe import warehouse
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class ArmGroup:
    """The rows of one version on one arm (``mask`` over the window), and its report's name."""

    arm: str
    version: str | None
    mask: np.ndarray
    name: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, eq=False)
class ArmWindow:
    """One group's rows in the window: base columns, features, the entity of each row, how
    many rows the window held before sampling, and the version's task."""

    rows: pd.DataFrame
    features: pd.DataFrame
    entities: pd.Series | None
    total: int
    sampled: bool
    spec: TaskSpec = TaskSpec()

    @property
    def version(self) -> str:
        """The version most of the rows were served by ("?" without rows)."""
        return str(self.rows["version"].mode().iloc[0]) if len(self.rows) else "?"

    def clusters(self) -> np.ndarray:
        """Each row's entity (each row its own where the window has no entities)."""
        import numpy as np

        if self.entities is None:
            return np.arange(len(self.rows))
        entities: np.ndarray = self.entities.astype(str).to_numpy()
        return entities


def arm_window(logged: warehouse.PredictionWindow, group: ArmGroup, spec: TaskSpec) -> ArmWindow:
    """The group's rows of ``logged``; ``total`` scaled by its share where sampled."""
    mask = group.mask
    entities = None
    if logged.entities is not None and "entity_key" in logged.entities:
        entities = logged.entities["entity_key"][mask].reset_index(drop=True)
    return ArmWindow(
        rows=logged.rows[mask].reset_index(drop=True),
        features=logged.features[mask].reset_index(drop=True),
        entities=entities,
        total=logged.total if mask.all() else int(round(logged.total * mask.mean())),
        sampled=logged.sampled,
        spec=spec,
    )


def newest_first(rows: pd.DataFrame) -> list[str]:
    """The versions among ``rows``, the one that served last first."""
    last = rows.groupby(rows["version"].astype(str))["ts"].max()
    return [str(v) for v in last.sort_values(ascending=False, kind="stable").index]


def version_groups(
    rows: pd.DataFrame, arms: list[str], version: str | None = None
) -> list[ArmGroup]:
    """One group per (arm, served version) in the window, newest version first.

    ``version`` keeps that version only, with a note per arm of the rows left out. An
    arm with no rows (of ``version``) gets an empty group named after the arm.
    """
    import numpy as np

    groups: list[ArmGroup] = []
    for arm in arms:
        on_arm = (rows["arm"] == arm).to_numpy()
        versions = newest_first(rows[on_arm]) if on_arm.any() else []
        notes: tuple[str, ...] = ()
        if version is not None:
            other = int((on_arm & (rows["version"].astype(str) != version).to_numpy()).sum())
            if other:
                notes = (f"{other} row(s) of other versions on the {arm} arm left out",)
            versions = [version] if version in versions else []
        if not versions:
            empty = np.zeros(len(rows), bool)
            groups.append(ArmGroup(arm=arm, version=version, mask=empty, name=arm, notes=notes))
        for v in versions:
            mask = on_arm & (rows["version"].astype(str) == v).to_numpy()
            name = arm if len(versions) == 1 else f"{arm}-v{v}"
            groups.append(ArmGroup(arm=arm, version=v, mask=mask, name=name, notes=notes))
    return groups


__all__ = ["ArmGroup", "ArmWindow", "arm_window", "newest_first", "version_groups"]
