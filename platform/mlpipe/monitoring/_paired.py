"""Two versions on the same rows: re-scoring logged features, and the paired score test.

A sticky canary split puts different customers on each arm, so comparing the
arms' score distributions compares populations, not models (with one model on
both arms a K-S test failed 19 % of random splits). Scoring every analysed row
with both versions removes the population from the comparison: the test looks
at the per-row difference between the two versions' scores.

The score test asks whether the two versions order the requests alike: the
rank (Spearman) correlation of their scores over the same rows, with a
bootstrap over entities; it fails when even the upper 99 % bound is below
``MIN_RANK_CORRELATION``. Ranks make it blind to calibration (more trees,
class weights), which the label metrics judge: two equally good LightGBMs of
40 and 150 trees (AUC 0.848 / 0.846) differ by a median 0.59 in logit but
correlate at 0.95, and two noisy 20-tree models of the integration tests at
0.63; a model trained on shuffled labels correlates at 0.02. One model on both
arms correlates at exactly 1 and can never fail. A regression's predicted
values are ranked the same way. A multiclass version's logged score (the
probability of whichever class it predicted) orders nothing, so two of them
are compared on their predicted classes instead: Cohen's kappa, bounded the
same way, against ``MIN_KAPPA`` (:func:`label_test`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from mlpipe import registry
from mlpipe.config import Settings
from mlpipe.errors import MlpipeError
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    import pandas as pd

MIN_RANK_CORRELATION = 0.5
SCORE_TEST_P = 0.01
MIN_ENTITIES = 20
# A served score is "reproduced" by offline re-scoring within this; else the log is not
# what the model scored (features rounded, a different artifact) and pairing is refused.
REPRODUCE_TOLERANCE = 1e-3
REPRODUCE_SHARE = 0.99


def percentile_ranks(score: np.ndarray) -> np.ndarray:
    """Each score's rank among ``score`` in (0, 1] (ties share their average rank)."""
    from scipy.stats import rankdata

    return np.asarray(rankdata(score), dtype=float) / max(len(score), 1)


def entity_codes(entity_keys: pd.Series, request_ids: pd.Series) -> np.ndarray:
    """One integer per entity (a row without an entity key is its own entity)."""
    keys = entity_keys.fillna("").astype(str)
    keys = keys.where(keys != "", "request:" + request_ids.astype(str))
    return np.unique(keys.to_numpy(), return_inverse=True)[1]


@dataclass(frozen=True)
class ScoreTest:
    """The paired score test: entities compared, the rank agreement, and the verdict."""

    entities: int
    spearman: float  # rank correlation of the two versions' scores over the rows
    upper_bound: float | None  # its one-sided upper bound (entity bootstrap)
    median_abs: float  # median over entities of their mean |candidate − baseline| rank
    least: float
    passed: bool | None  # None: too few entities
    detail: str


# Below this a variance of ranks in (0, 1] is rounding error: every row ranked alike
# (a non-constant ranking of n rows has a variance of at least ~1/(4n)).
_FLAT_VARIANCE = 1e-12


def _weighted_corr(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pearson correlation of ``x`` and ``y`` under each row of weights ``w``; NaN where
    either is flat (every row alike orders nothing: its rounding error is no variance)."""
    total = w.sum(axis=1)
    mx, my = (w @ x) / total, (w @ y) / total
    cov = (w @ (x * y)) / total - mx * my
    vx, vy = (w @ (x * x)) / total - mx**2, (w @ (y * y)) / total - my**2
    flat = (vx < _FLAT_VARIANCE) | (vy < _FLAT_VARIANCE)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(flat, np.nan, cov / np.sqrt(np.where(flat, 1.0, vx * vy)))


def score_test(
    baseline: np.ndarray,
    candidate: np.ndarray,
    clusters: np.ndarray,
    least: float = MIN_RANK_CORRELATION,
    p_fail: float = SCORE_TEST_P,
) -> ScoreTest:
    """Whether ``candidate`` orders the rows like ``baseline`` (see the module docstring)."""
    from mlpipe.monitoring._label_metrics import BOOTSTRAP_DRAWS, cluster_weights

    rb, rc = percentile_ranks(baseline), percentile_ranks(candidate)
    counts = np.bincount(clusters)
    present = counts > 0
    per_entity = np.bincount(clusters, weights=np.abs(rc - rb))[present] / counts[present]
    n = len(per_entity)
    typical = float(np.median(per_entity)) if n else math.nan
    if np.array_equal(baseline, candidate):
        spearman, draws = 1.0, np.ones(1)
    else:
        # NaN: a version scoring every row alike orders nothing, so no agreement (0).
        spearman = float(np.nan_to_num(_weighted_corr(rb, rc, np.ones((1, len(rb))))[0]))
        weights = cluster_weights(clusters, BOOTSTRAP_DRAWS)
        draws = np.nan_to_num(_weighted_corr(rb, rc, weights))
    if n < MIN_ENTITIES:
        detail = f"{n} entities < {MIN_ENTITIES}: not evaluated"
        return ScoreTest(n, spearman, None, typical, least, None, detail)
    bound = float(np.quantile(draws, 1 - p_fail))
    detail = (
        f"{n} entities: Spearman {spearman:.3f} (upper {1 - p_fail:.0%} bound {bound:.3f}); "
        f"median |rank delta| per entity {typical:.3f}"
    )
    return ScoreTest(n, spearman, bound, typical, least, bound >= least, detail)


MIN_KAPPA = 0.5


def _weighted_kappa(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Cohen's kappa of labels ``a`` and ``b`` under each row of weights ``w``."""
    total = w.sum(axis=1)
    agree = (w @ (a == b).astype(float)) / total
    chance = np.zeros_like(agree)
    for k in np.union1d(a, b):
        chance += ((w @ (a == k).astype(float)) / total) * ((w @ (b == k).astype(float)) / total)
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = (agree - chance) / (1 - chance)
    # one class on both sides: full agreement is agreement, anything else is none
    return np.asarray(np.where(chance >= 1 - 1e-12, np.where(agree >= 1, 1.0, 0.0), kappa))


@dataclass(frozen=True)
class LabelTest:
    """The paired label test of two classifiers of many classes: Cohen's kappa of their
    predicted classes over the same rows, with an entity-bootstrap upper bound."""

    entities: int
    kappa: float
    agreement: float  # share of rows where both predict the same class
    upper_bound: float | None
    least: float
    passed: bool | None  # None: too few entities
    detail: str


def label_test(
    baseline: np.ndarray,
    candidate: np.ndarray,
    clusters: np.ndarray,
    least: float = MIN_KAPPA,
    p_fail: float = SCORE_TEST_P,
) -> LabelTest:
    """Whether ``candidate`` predicts the classes ``baseline`` predicts beyond chance.

    Kappa, not the agreement rate: two models that both predict the majority
    class agree often and say nothing. A model on shuffled labels has kappa
    near 0 with any other, one model on both arms exactly 1 (it never fails).
    """
    from mlpipe.monitoring._label_metrics import BOOTSTRAP_DRAWS, cluster_weights

    n = len(np.unique(clusters))
    agreement = float(np.mean(baseline == candidate)) if len(baseline) else math.nan
    if np.array_equal(baseline, candidate):
        kappa, draws = 1.0, np.ones(1)
    else:
        kappa = float(_weighted_kappa(baseline, candidate, np.ones((1, len(baseline))))[0])
        draws = np.nan_to_num(
            _weighted_kappa(baseline, candidate, cluster_weights(clusters, BOOTSTRAP_DRAWS))
        )
    if n < MIN_ENTITIES:
        detail = f"{n} entities < {MIN_ENTITIES}: not evaluated"
        return LabelTest(n, kappa, agreement, None, least, None, detail)
    bound = float(np.quantile(draws, 1 - p_fail))
    detail = (
        f"{n} entities: kappa {kappa:.3f} (upper {1 - p_fail:.0%} bound {bound:.3f}); "
        f"same class on {agreement:.1%} of rows"
    )
    return LabelTest(n, kappa, agreement, bound, least, bound >= least, detail)


@dataclass(frozen=True)
class Rescored:
    """Scores of one version on logged feature rows, or why there are none."""

    scores: np.ndarray | None
    threshold: float
    reason: str = ""
    task: TaskSpec = field(default_factory=TaskSpec)


def rescore(settings: Settings, model: str, version: str, features: pd.DataFrame) -> Rescored:
    """Score logged ``features`` with ``model``/``version``, loaded verified from the registry."""
    try:
        loaded = registry.load_verified(settings, model, version)
    except MlpipeError as exc:
        return Rescored(None, 0.5, f"v{version} could not be loaded: {exc}")
    missing = [f for f in loaded.features if f not in features.columns]
    if missing:
        return Rescored(None, loaded.threshold, f"the log lacks inputs of v{version}: {missing}")
    if features[loaded.features].isna().to_numpy().any():
        return Rescored(None, loaded.threshold, "logged features hold missing values")
    scores = np.asarray(loaded.predict_scores(loaded.inputs_from(features)), dtype=float)
    return Rescored(scores, loaded.threshold, task=loaded.task)


def served_scores(output: np.ndarray) -> np.ndarray:
    """The score a version logs for its output: P(predicted class) for class probabilities,
    the output itself otherwise (see :mod:`mlpipe.tasks`)."""
    return output.max(axis=1) if output.ndim == 2 else output


def reproduced(logged: np.ndarray, rescored: np.ndarray) -> tuple[bool, float]:
    """Whether re-scoring gives the served scores back, and the share of rows that agree.

    ``rescored`` may be class probabilities (their largest is what was logged); a
    regression value agrees within the tolerance relative to its size.
    """
    if not len(logged):
        return True, 1.0
    own = served_scores(rescored)
    tolerance = REPRODUCE_TOLERANCE * np.maximum(1.0, np.abs(logged))
    share = float(np.mean(np.abs(logged - own) <= tolerance))
    return share >= REPRODUCE_SHARE, share


__all__ = [
    "MIN_ENTITIES",
    "MIN_KAPPA",
    "LabelTest",
    "Rescored",
    "ScoreTest",
    "entity_codes",
    "label_test",
    "percentile_ranks",
    "rescore",
    "reproduced",
    "score_test",
    "served_scores",
]
