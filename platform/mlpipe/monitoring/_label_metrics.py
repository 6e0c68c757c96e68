"""Label metrics that catch a useless classifier on imbalanced data, with entity-clustered CIs.

Accuracy cannot tell a fraud model from one that never says fraud at a 2.5 %
fraud rate. AUC, recall and precision at the version's threshold, and log loss
can. Rows of one entity (a customer) are not independent, so every confidence
interval comes from a cluster bootstrap: whole entities are drawn with
replacement, as multinomial weights on their rows, so one weight matrix gives
every metric of every resample at once (vectorized, no Python loop per draw).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

METRICS = ("auc", "recall", "precision", "log_loss")
HIGHER_IS_BETTER = {"auc": True, "recall": True, "precision": True, "log_loss": False}
# How much worse the candidate may be before it counts as worse (log loss: relative).
MARGINS = {"auc": 0.02, "recall": 0.05, "precision": 0.05, "log_loss": 0.10}
# A baseline register measured on the version's own (training) data is optimistic: clean
# traffic scores worse than it, an overfit model's log loss several times worse. Against
# such a baseline only a collapse is called: margins × 5 where they are absolute (AUC or
# accuracy down 0.10, recall, precision or macro F1 down 0.25) and × 20 where they are a
# share of the baseline (log loss, MAE or RMSE up 200 %), not a small decline.
TRAINING_MARGIN_FACTOR = 5.0
TRAINING_RELATIVE_FACTOR = 20.0
_RELATIVE = {"log_loss", "mae", "rmse", "bias"}


def training_factor(metric: str) -> float:
    """How much wider a margin is against a baseline measured on the training data."""
    return TRAINING_RELATIVE_FACTOR if metric in _RELATIVE else TRAINING_MARGIN_FACTOR


BOOTSTRAP_DRAWS = 200
# Distinct entities a metric rests on (positives for recall, flagged rows for precision,
# both classes for AUC and log loss) below which it is not judged: a bootstrap over a
# handful of entities is degenerate (one flagged customer gives precision 0 or 1 in every
# draw; with one model on both arms that failed precision in 8 % of sticky splits).
MIN_SUPPORT = 10
_EPS = 1e-7


@dataclass(frozen=True)
class Scored:
    """One model on rows with outcomes: its scores, its labels (score at or above its
    threshold), the outcomes ``y`` (0/1) and the entity of each row (``clusters``)."""

    score: np.ndarray
    flagged: np.ndarray
    y: np.ndarray
    clusters: np.ndarray


def cluster_weights(clusters: np.ndarray, draws: int, seed: int = 0) -> np.ndarray:
    """Row weights of ``draws`` cluster-bootstrap resamples, shape (draws, rows)."""
    _, inverse = np.unique(clusters, return_inverse=True)
    k = int(inverse.max()) + 1 if len(inverse) else 0
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(k, np.full(k, 1.0 / k), size=draws) if k else np.zeros((draws, 0))
    return counts[:, inverse].astype(float)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _auc(score: np.ndarray, positive: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted ROC AUC per row of ``w`` (ties count one half)."""
    order = np.argsort(score, kind="stable")
    ranked = score[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    wo, pos = w[:, order], positive[order]
    wp = np.add.reduceat(wo * pos, starts, axis=1)
    wn = np.add.reduceat(wo * ~pos, starts, axis=1)
    below = np.cumsum(wn, axis=1) - wn
    wins = (wp * (below + 0.5 * wn)).sum(axis=1)
    return _ratio(wins, wp.sum(axis=1) * wn.sum(axis=1))


def weighted_metrics(s: Scored, w: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric of :data:`METRICS` per row of ``w`` (shape (draws, rows))."""
    positive = s.y == 1
    flagged = s.flagged.astype(bool)
    tp = w[:, positive & flagged].sum(axis=1)
    fn = w[:, positive & ~flagged].sum(axis=1)
    fp = w[:, ~positive & flagged].sum(axis=1)
    p = np.clip(s.score, _EPS, 1 - _EPS)
    loss = -(s.y * np.log(p) + (1 - s.y) * np.log(1 - p))
    return {
        "auc": _auc(s.score, positive, w),
        "recall": _ratio(tp, tp + fn),
        "precision": _ratio(tp, tp + fp),
        "log_loss": _ratio(w @ loss, w.sum(axis=1)),
    }


def point_metrics(s: Scored) -> dict[str, float]:
    """The metrics on the rows as they are (weight one each)."""
    return {k: float(v[0]) for k, v in weighted_metrics(s, np.ones((1, len(s.y)))).items()}


@dataclass(frozen=True)
class MetricComparison:
    """Candidate minus baseline for one metric, its one-sided CI bound and the verdict on it."""

    metric: str
    baseline: float
    candidate: float
    delta: float
    bound: float  # the delta's one-sided CI bound on the candidate's side of better
    margin: float
    worse: bool | None  # None: too few entities behind it on either side (see ``support``)
    support: int = 0  # the fewer distinct entities the metric rests on, of the two sides


def support(s: Scored) -> dict[str, int]:
    """Distinct entities each metric rests on."""
    positive, flagged = s.y == 1, s.flagged.astype(bool)
    pos, neg = len(np.unique(s.clusters[positive])), len(np.unique(s.clusters[~positive]))
    both = min(pos, neg)
    flagged_entities = len(np.unique(s.clusters[flagged]))
    return {"auc": both, "recall": pos, "precision": flagged_entities, "log_loss": both}


def compare(
    deltas: dict[str, np.ndarray],
    baseline: dict[str, float],
    candidate: dict[str, float],
    supports: dict[str, int],
    alpha: float = 0.05,
    widen: Collection[str] = (),
) -> list[MetricComparison]:
    """Non-inferiority per metric: worse when the whole one-sided CI is beyond the margin.

    ``deltas`` holds candidate − baseline per bootstrap draw. An equally good
    candidate sits inside the margin, so it is never called worse by chance more
    often than ``alpha``; a paired comparison of one model with itself has
    every delta zero and is never worse. A metric in ``widen`` (a baseline measured
    on the training data, optimistic) gets :func:`training_factor` × its margin.
    """
    out = []
    for metric in METRICS:
        base, cand = baseline[metric], candidate[metric]
        margin = MARGINS[metric] * (abs(base) if metric == "log_loss" else 1.0)
        margin *= training_factor(metric) if metric in widen else 1.0
        out.append(
            judge(
                metric,
                base,
                cand,
                cand - base,
                deltas[metric],
                margin,
                supports[metric],
                HIGHER_IS_BETTER[metric],
                alpha,
            )
        )
    return out


def judge(
    metric: str,
    base: float,
    cand: float,
    delta: float,
    deltas: np.ndarray,
    margin: float,
    n: int,
    higher_is_better: bool,
    alpha: float,
) -> MetricComparison:
    """One metric's non-inferiority verdict from its bootstrap ``deltas`` (NaN draws dropped):
    not judged (``worse`` None) below ``MIN_SUPPORT`` entities, with a figure or the margin
    missing, or when more than half the draws are NaN."""
    draws = deltas[~np.isnan(deltas)]
    if (
        n < MIN_SUPPORT
        or np.isnan(base)
        or np.isnan(cand)
        or np.isnan(margin)
        or len(draws) < len(deltas) // 2
    ):
        return MetricComparison(metric, base, cand, delta, np.nan, margin, None, n)
    if higher_is_better:
        bound = float(np.quantile(draws, 1 - alpha))
        worse = bound < -margin
    else:
        bound = float(np.quantile(draws, alpha))
        worse = bound > margin
    return MetricComparison(metric, base, cand, delta, bound, margin, bool(worse), n)


def paired(baseline: Scored, candidate: Scored, seed: int = 0) -> list[MetricComparison]:
    """Two models on the same rows: one set of cluster weights for both."""
    w = cluster_weights(baseline.clusters, BOOTSTRAP_DRAWS, seed)
    b, c = weighted_metrics(baseline, w), weighted_metrics(candidate, w)
    deltas = {k: c[k] - b[k] for k in METRICS}
    return compare(
        deltas, point_metrics(baseline), point_metrics(candidate), _least(baseline, candidate)
    )


def unpaired(
    baseline: Scored, candidate: Scored, seed: int = 0, alpha: float = 0.01
) -> list[MetricComparison]:
    """Two models on different rows (no re-scoring): each side resampled on its own.

    The two sides hold different entities, so a difference may be the
    population's, not the model's: the bound is stricter (``alpha`` 1 %). One
    model on both arms of 100 sticky 20 % splits of 10,000 rows failed 1 of them
    this way (tests/unit/monitoring/test_canary.py's population); paired, none can.
    """
    b = weighted_metrics(baseline, cluster_weights(baseline.clusters, BOOTSTRAP_DRAWS, seed))
    c = weighted_metrics(candidate, cluster_weights(candidate.clusters, BOOTSTRAP_DRAWS, seed + 1))
    deltas = {k: c[k] - b[k] for k in METRICS}
    least = _least(baseline, candidate)
    return compare(deltas, point_metrics(baseline), point_metrics(candidate), least, alpha)


def _least(baseline: Scored, candidate: Scored) -> dict[str, int]:
    b, c = support(baseline), support(candidate)
    return {k: min(b[k], c[k]) for k in METRICS}


__all__ = [
    "METRICS",
    "MetricComparison",
    "Scored",
    "cluster_weights",
    "compare",
    "paired",
    "point_metrics",
    "support",
    "unpaired",
    "weighted_metrics",
]
