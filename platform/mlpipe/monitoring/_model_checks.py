"""The checks that compare two versions' outputs: the paired test and the label metrics.

A canary analysis (:mod:`._canary`) and a shadow analysis (:mod:`._shadow`) run
the same checks on a :class:`Pairing` (both versions' outputs on the same rows)
or, where re-scoring failed, on each arm's own rows. Which checks run follows
the version's task (:mod:`mlpipe.tasks`):

- binary: the paired score test (Spearman of the scores) and AUC, recall,
  precision, log loss (:mod:`._label_metrics`);
- multiclass: the paired class test (Cohen's kappa of the predicted classes)
  and accuracy, macro F1, log loss (:mod:`._task_metrics`), with outcome labels
  mapped to class indices (labels naming no class are counted, left out);
- regression: the paired score test on the predicted values, and MAE, RMSE,
  bias (:mod:`._task_metrics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from mlpipe.monitoring import _label_metrics as lm
from mlpipe.monitoring import _paired
from mlpipe.monitoring import _task_metrics as tm
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    import pandas as pd

MIN_POSITIVES = 10  # labelled positives (and negatives) needed before label metrics count


@dataclass(frozen=True)
class CanaryCheck:
    name: str
    champion: float | None
    canary: float | None
    threshold: str
    passed: bool | None  # None: not evaluated (the detail says why)
    detail: str = ""


@dataclass(frozen=True)
class Pairing:
    """Every analysed row (champion arm's, then canary arm's) scored by both versions:
    ``[n]`` scores (binary) or predictions (regression), ``[n, K]`` class probabilities
    (multiclass)."""

    champion: np.ndarray
    canary: np.ndarray
    champion_threshold: float
    canary_threshold: float
    clusters: np.ndarray
    outcome: np.ndarray  # NaN where no label has arrived
    # Each version's labels where they were logged (a shadow answer logs its own);
    # None: score >= the version's threshold.
    champion_flagged: np.ndarray | None = None
    canary_flagged: np.ndarray | None = None
    task: TaskSpec = field(default_factory=TaskSpec)
    outcome_label: np.ndarray | None = None  # each outcome as the file gave it (None: none)

    def flagged(self) -> tuple[np.ndarray, np.ndarray]:
        """Each version's positive labels on the analysed rows."""
        ch = self.champion_flagged
        ca = self.canary_flagged
        return (
            self.champion >= self.champion_threshold if ch is None else ch.astype(bool),
            self.canary >= self.canary_threshold if ca is None else ca.astype(bool),
        )


class ArmRows(Protocol):
    """One version's logged rows on its arm (what the unpaired label metrics read)."""

    @property
    def rows(self) -> pd.DataFrame: ...


def score_check(
    pairing: Pairing | None, why_unpaired: str, task: TaskSpec | None = None
) -> CanaryCheck:
    """The paired score test as a check (not evaluated without a pairing): the rank
    agreement of scores or predicted values; for a multiclass task, of predicted classes."""
    if (pairing.task if pairing is not None else task or TaskSpec()).task == "multiclass":
        return _label_agreement_check(pairing, why_unpaired)
    least, p = _paired.MIN_RANK_CORRELATION, _paired.SCORE_TEST_P
    threshold = f"Spearman >= {least} (upper {1 - p:.0%} bound, entity-clustered)"
    if pairing is None:
        return CanaryCheck("paired_score", None, None, threshold, None, why_unpaired)
    t = _paired.score_test(pairing.champion, pairing.canary, pairing.clusters)
    return CanaryCheck("paired_score", 1.0, t.spearman, threshold, t.passed, t.detail)


def _label_agreement_check(pairing: Pairing | None, why_unpaired: str) -> CanaryCheck:
    least, p = _paired.MIN_KAPPA, _paired.SCORE_TEST_P
    threshold = f"kappa >= {least} (upper {1 - p:.0%} bound, entity-clustered)"
    if pairing is None:
        return CanaryCheck("paired_classes", None, None, threshold, None, why_unpaired)
    t = _paired.label_test(
        pairing.champion.argmax(axis=1), pairing.canary.argmax(axis=1), pairing.clusters
    )
    return CanaryCheck("paired_classes", 1.0, t.kappa, threshold, t.passed, t.detail)


def _scored(score: np.ndarray, flagged: np.ndarray, y: np.ndarray, c: np.ndarray) -> lm.Scored:
    return lm.Scored(score=score, flagged=flagged, y=y, clusters=c)


def _label_sides(
    pairing: Pairing | None,
    least: int,
    arms: Sequence[ArmRows] = (),
) -> tuple[lm.Scored, lm.Scored, bool] | str:
    """Champion and canary on labelled rows (paired when re-scored), or why not evaluated."""
    if pairing is not None:
        has = ~np.isnan(pairing.outcome)
        y = (pairing.outcome[has] >= 0.5).astype(int)
        c = pairing.clusters[has]
        ch_flagged, ca_flagged = pairing.flagged()
        sides = (
            _scored(pairing.champion[has], ch_flagged[has], y, c),
            _scored(pairing.canary[has], ca_flagged[has], y, c),
        )
        return _too_few(y, least) or (*sides, True)
    sides_of_arms = []
    for arm in arms:
        rows = arm.rows[arm.rows["outcome"].notna()]
        y = (rows["outcome"].to_numpy() >= 0.5).astype(int)
        if why := _too_few(y, least):
            return why
        codes = _paired.entity_codes(rows["entity_key"], rows["request_id"])
        sides_of_arms.append(
            _scored(rows["score"].to_numpy(), rows["label"].to_numpy() == 1, y, codes)
        )
    return sides_of_arms[0], sides_of_arms[1], False


def _too_few(y: np.ndarray, least: int) -> str:
    """Why ``y`` is too few labels to compare on ("" when it is enough)."""
    positives = int(y.sum())
    if len(y) >= least and min(positives, len(y) - positives) >= MIN_POSITIVES:
        return ""
    return (
        f"{len(y)} labelled row(s), {positives} positive: needs >= {least} labelled "
        f"and >= {MIN_POSITIVES} of each class: not evaluated"
    )


def _task_sides(
    pairing: Pairing | None, least: int, task: TaskSpec, arms: Sequence[ArmRows] = ()
) -> tuple[tm.Labelled, tm.Labelled, bool, str] | str:
    """:func:`_label_sides` for a multiclass or regression task (plus a note on labels left
    out)."""
    if pairing is not None:
        truth = tm.task_outcomes(task, pairing.outcome, pairing.outcome_label)
        has, note = truth.labelled, truth.note(task.task)
        y, c = truth.y[has], pairing.clusters[has]
        if len(y) < least:
            return _too_few_task(len(y), least, note)
        sides = tm.Labelled(pairing.champion[has], y, c), tm.Labelled(pairing.canary[has], y, c)
        return (*sides, True, note)
    labelled, notes = [], []
    for arm in arms:
        side, note = _arm_labelled(arm.rows, task)
        notes.append(note)
        if len(side.y) < least:
            return _too_few_task(len(side.y), least, note)
        labelled.append(side)
    return labelled[0], labelled[1], False, "; ".join(n for n in notes if n)


def _arm_labelled(rows: pd.DataFrame, task: TaskSpec) -> tuple[tm.Labelled, str]:
    """An arm's own labelled rows as the task reads them (its logged outputs)."""
    given = rows["outcome_label"].to_numpy() if "outcome_label" in rows else None
    truth = tm.task_outcomes(task, rows["outcome"].to_numpy(dtype=float), given)
    has = truth.labelled
    if task.task == "multiclass":
        has &= rows["probabilities"].notna().to_numpy()
        output = tm.stacked(rows["probabilities"].to_numpy()[has])
    else:
        output = rows["score"].to_numpy(dtype=float)[has]
    part = rows[has]
    codes = _paired.entity_codes(part["entity_key"], part["request_id"])
    return tm.Labelled(output, truth.y[has], codes), truth.note(task.task)


def _too_few_task(labelled: int, least: int, note: str) -> str:
    why = f"{labelled} labelled row(s): needs >= {least}: not evaluated"
    return f"{why}; {note}" if note else why


def label_checks(
    pairing: Pairing | None,
    least_labels: int,
    arms: tuple[ArmRows, ArmRows] | None = None,
    task: TaskSpec | None = None,
) -> list[CanaryCheck]:
    """The task's label metrics of both versions (binary: AUC, recall, precision and log loss;
    see :mod:`._task_metrics` for the others): paired, else the ``arms``' rows."""
    if pairing is None and arms is None:
        raise ValueError("label_checks needs a pairing or the arms")
    spec = pairing.task if pairing is not None else task or TaskSpec()
    if spec.task != "binary":
        return _task_label_checks(pairing, least_labels, spec, arms or ())
    sides = _label_sides(pairing, least_labels, arms or ())
    if isinstance(sides, str):
        return [CanaryCheck(m, None, None, "-", None, sides) for m in lm.METRICS]
    champion, canary, is_paired = sides
    compared = (lm.paired if is_paired else lm.unpaired)(champion, canary)
    how = "paired, same rows" if is_paired else "arms' own rows"
    labelled = len(champion.y) + (0 if is_paired else len(canary.y))
    return [_metric_check(m, how, labelled) for m in compared]


def _task_label_checks(
    pairing: Pairing | None, least: int, task: TaskSpec, arms: Sequence[ArmRows]
) -> list[CanaryCheck]:
    sides = _task_sides(pairing, least, task, arms)
    if isinstance(sides, str):
        return [CanaryCheck(m, None, None, "-", None, sides) for m in tm.METRICS[task.task]]
    champion, canary, is_paired, note = sides
    compared = (tm.paired if is_paired else tm.unpaired)(task.task, champion, canary)
    how = "paired, same rows" if is_paired else "arms' own rows"
    if note:
        how = f"{how}; {note}"
    labelled = len(champion.y) + (0 if is_paired else len(canary.y))
    return [_metric_check(m, how, labelled) for m in compared]


def _metric_check(m: lm.MetricComparison, how: str, labelled: int) -> CanaryCheck:
    side = "upper" if tm.HIGHER_IS_BETTER[m.metric] else "lower"
    sign = ">= -" if tm.HIGHER_IS_BETTER[m.metric] else "<= +"
    what = "|canary| - |champion|" if m.metric == "bias" else "canary - champion"
    threshold = f"{what} {sign}{m.margin:.3g} (95% {side} bound, entity-clustered)"
    detail = f"delta {m.delta:+.4f}, {side} bound {m.bound:+.4f}; {labelled} labelled, {how}"
    if m.worse is None:
        detail = (
            f"not judged: rests on {m.support} entities (< {lm.MIN_SUPPORT}) or is undefined; "
            f"{labelled} labelled, {how}"
        )
    passed = None if m.worse is None else not m.worse
    return CanaryCheck(m.metric, m.baseline, m.candidate, threshold, passed, detail)
