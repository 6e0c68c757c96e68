"""Drift thresholds calibrated to the window: what a clean window of its size and structure reaches.

A fixed distance threshold (Evidently's 0.1) is too strict for a window of 100
rows and too lax for one of 10,000, and a window whose rows repeat a customer
holds fewer independent draws than rows: a sticky canary arm of 229 requests
from 92 customers is 92 draws of the static profile columns. So, per column:

* the **effective sample size** is the window's rows divided by the design
  effect of its entity clusters, ``1 + (m - 1) * icc`` with ``m = sum(m_i^2)/n``
  (Kish) and the intra-class correlation of the column estimated in the window
  (1 for a column that is constant per customer, ~0 for a per-request one);
* the **null distribution** of the distance (Evidently's own statistic, pinned:
  normed Wasserstein for numbers, Jensen-Shannon for categories) is drawn by
  resampling windows of that size from the reference; the window and the
  reference are independent samples in production, so each null distance is
  scaled by ``sqrt(1 + n/R)`` (the distance grows as ``sqrt(1/n + 1/R)``);
* the **threshold** is the ``1 - alpha`` quantile of that null, with ``alpha``
  the per-column share of the per-report false-alarm rate (Šidák:
  ``1 - (1 - rate)^(1/columns)``); the tail beyond what the resamples reach is
  read off a log-normal fit, never below the largest resampled distance.

Null distributions are cached on disk per (model, version, reference digest,
column, size bucket); a bucket is the largest power of sqrt(2) not above the
effective size, so the threshold errs high, never low.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from mlpipe.monitoring._screen import Screened

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

FALSE_ALARM_RATE = 0.01  # per report, all columns together
MIN_EFFECTIVE_SIZE = 30  # distinct entities (and effective draws) below which nothing is tested
RESAMPLES = 400
NUM_METHOD = "wasserstein"
CAT_METHOD = "jensenshannon"
# The smallest shift worth an alarm, in the statistic's own units: normed
# Wasserstein is a distance in reference standard deviations (0.1 sd), the
# Jensen-Shannon distance of two category mixes is between 0 and 0.83.
MIN_EFFECT = 0.1
SEVERITY_BANDS = ((0.5, "high"), (0.2, "medium"), (0.0, "low"))
NULL_REFERENCE_ROWS = 20_000  # reference rows the null resamples from (a random subset above)
_CELLS_PER_CHUNK = 4_000_000  # resamples x reference rows held at once (32 MB of float64)

Kind = Literal["numerical", "categorical"]


@dataclass(frozen=True)
class NullFit:
    """A null distribution of one column's distance at one window size, summarised."""

    size: int  # the bucket: rows per resampled window
    resamples: int
    log_mean: float
    log_sd: float
    largest: float
    # Categorical columns: 8·n·JS² of a clean window is chi-square with (categories - 1)
    # degrees of freedom, so the tail is read from it, scaled back to a distance.
    chi2_dof: int = 0
    chi2_scale: float = 0.0

    def threshold(self, alpha: float) -> float:
        """The distance a clean window exceeds with probability ``alpha``."""
        from scipy.stats import norm

        if self.chi2_dof:
            from scipy.stats import chi2

            tail = self.chi2_scale * math.sqrt(float(chi2.isf(alpha, self.chi2_dof)))
        else:
            tail = math.exp(self.log_mean + float(norm.isf(alpha)) * self.log_sd)
        return max(tail, self.largest)


def per_column_alpha(rate: float, columns: int) -> float:
    """Šidák: the per-column rate that keeps the per-report rate at ``rate``."""
    alpha: float = 1.0 - (1.0 - rate) ** (1.0 / max(columns, 1))
    return alpha


def size_bucket(effective: float) -> int:
    """The largest power of sqrt(2) (rounded) not above ``effective``; at least 2."""
    k = math.floor(2 * math.log2(max(effective, 2.0)) + 1e-9)
    while k > 2 and round(2 ** (k / 2)) > effective:
        k -= 1
    return max(2, round(2 ** (k / 2)))


def severity(effect: float) -> str:
    return next(name for bound, name in SEVERITY_BANDS if effect >= bound)


def icc(values: pd.Series, entities: pd.Series) -> float:
    """One-way ANOVA intra-class correlation of ``values`` within ``entities`` (0..1).

    Categories are one-hot encoded and their ICCs averaged. A column with no
    spread within entities but some between them has ICC 1.
    """
    import pandas as pd

    present = values.notna().to_numpy()
    v, g = values[present], entities[present].astype(str)
    if g.nunique() == len(g) or len(g) < 3:
        return 0.0
    if pd.api.types.is_numeric_dtype(v):
        return _anova_icc(v.astype(float), g)
    dummies = pd.get_dummies(v.astype(str), dtype=float)
    values_icc = [_anova_icc(dummies[c], g) for c in dummies.columns]
    return float(sum(values_icc) / len(values_icc)) if values_icc else 1.0


def _anova_icc(v: pd.Series, g: pd.Series) -> float:
    grouped = v.groupby(g.to_numpy())
    sizes, means = grouped.size(), grouped.mean()
    n, k = float(sizes.sum()), len(sizes)
    grand = float(v.mean())
    ssb = float((sizes * (means - grand) ** 2).sum())
    ssw = float(((v - grouped.transform("mean")) ** 2).sum())
    msb, msw = ssb / max(k - 1, 1), ssw / max(n - k, 1)
    m0 = (n - float((sizes**2).sum()) / n) / max(k - 1, 1)
    if msw <= 1e-12 * max(msb, 1e-300):
        return 1.0  # constant within every entity (or constant altogether)
    return min(1.0, max(0.0, (msb - msw) / (msb + (m0 - 1) * msw)))


def effective_size(values: pd.Series, entities: pd.Series | None) -> tuple[float, int]:
    """(effective sample size, distinct entities) of one column of the window."""
    present = values.notna().to_numpy()
    n = int(present.sum())
    if entities is None or n == 0:
        return float(n), n
    groups = entities[present].astype(str)
    sizes = groups.value_counts().to_numpy(dtype=float)
    distinct = len(sizes)
    mean_size = float((sizes**2).sum()) / n
    design = 1.0 + (mean_size - 1.0) * icc(values, entities)
    return n / design, distinct


def distance(kind: Kind, reference: np.ndarray, current: np.ndarray) -> float:
    """The statistic Evidently computes with the pinned methods (normed Wasserstein, JS)."""
    import numpy as np
    from scipy import stats
    from scipy.spatial import distance as sp_distance

    if kind == "numerical":
        norm = max(float(np.std(reference)), 0.001)
        return float(stats.wasserstein_distance(reference, current)) / norm
    keys = sorted(set(reference.tolist()) | set(current.tolist()), key=str)
    ref = np.array([np.sum(reference == k) for k in keys], dtype=float) / len(reference)
    cur = np.array([np.sum(current == k) for k in keys], dtype=float) / len(current)
    return float(sp_distance.jensenshannon(ref, cur))


def null_fit(kind: Kind, reference: np.ndarray, size: int, seed: int = 0) -> NullFit:
    """Resample ``RESAMPLES`` windows of ``size`` rows from ``reference``; fit their distances."""
    import numpy as np

    rng = np.random.default_rng(seed)
    full = len(reference)
    if full > NULL_REFERENCE_ROWS:  # the null's shape is set by the window, not a huge reference
        reference = rng.choice(reference, NULL_REFERENCE_ROWS, replace=False)
    if kind == "numerical":
        null = _numerical_null(np.sort(reference.astype(float)), size, rng)
    else:
        null = _categorical_null(reference, size, rng)
    widen = math.sqrt(1.0 + size / full)
    null = null * widen
    logs = np.log(np.maximum(null, 1e-12))
    fit = NullFit(size, RESAMPLES, float(logs.mean()), float(logs.std()), float(null.max()))
    if kind == "categorical":
        # A log-normal fits these discrete, often-zero distances badly: a window matching
        # the reference exactly (distance 0) put thresholds in the millions (never alarming).
        dof = len(np.unique(reference.astype(str))) - 1
        if dof:
            fit = replace(fit, chi2_dof=dof, chi2_scale=widen / math.sqrt(8.0 * size))
    return fit


def _numerical_null(ordered: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Normed W1 of resampled windows: sum |F_window - F_ref| * gap over the reference grid."""
    import numpy as np

    r = len(ordered)
    gaps = np.diff(ordered)
    f_ref = np.arange(1, r) / r
    norm = max(float(np.std(ordered)), 0.001)
    out = np.empty(RESAMPLES)
    chunk = max(1, _CELLS_PER_CHUNK // r)
    for start in range(0, RESAMPLES, chunk):
        b = min(chunk, RESAMPLES - start)
        counts = rng.multinomial(size, np.full(r, 1.0 / r), size=b)
        f_win = np.cumsum(counts, axis=1)[:, :-1] / size
        out[start : start + b] = np.abs(f_win - f_ref) @ gaps / norm
    return out


def _categorical_null(reference: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    import numpy as np
    from scipy.spatial import distance as sp_distance

    _, counts = np.unique(reference.astype(str), return_counts=True)
    p = counts / counts.sum()
    draws = rng.multinomial(size, p, size=RESAMPLES) / size
    return np.array([sp_distance.jensenshannon(p, d) for d in draws])


class NullCache:
    """Null fits on disk: one JSON file per (model, version, reference digest)."""

    def __init__(self, folder: Path, model: str, version: str, reference: pd.DataFrame) -> None:
        digest = reference_digest(reference)
        # "-2": fits of format 2 (chi-square tails for categories); older files are ignored
        self.path = folder / safe_name(model) / safe_name(version) / f"{digest}-2.json"
        self._fits: dict[str, dict[str, NullFit]] | None = None

    def fit(self, column: str, kind: Kind, reference: np.ndarray, size: int) -> NullFit:
        """The cached fit of ``column`` at ``size``, computed (and saved) on first use."""
        fits = self._load()
        found = fits.get(column, {}).get(str(size))
        if found is None:
            found = null_fit(kind, reference, size)
            fits.setdefault(column, {})[str(size)] = found
            self._save(fits)
        return found

    def _load(self) -> dict[str, dict[str, NullFit]]:
        if self._fits is None:
            self._fits = {}
            try:
                raw = json.loads(self.path.read_text())
                self._fits = {
                    col: {size: NullFit(**fit) for size, fit in sizes.items()}
                    for col, sizes in raw.items()
                }
            except (OSError, ValueError, TypeError):
                pass  # no cache yet, or one from another format: recompute
        return self._fits

    def _save(self, fits: dict[str, dict[str, NullFit]]) -> None:
        from dataclasses import asdict

        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        data = {col: {s: asdict(f) for s, f in sizes.items()} for col, sizes in fits.items()}
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)  # atomic: a concurrent reader sees the old file or the new one


def reference_digest(reference: pd.DataFrame) -> str:
    """A short digest of the reference's columns and values (the cache key's last part)."""
    import pandas as pd

    h = hashlib.sha256(",".join(map(str, reference.columns)).encode())
    h.update(pd.util.hash_pandas_object(reference, index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "_"


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """Per screened column of one arm: its effective size and threshold, or why it has none."""

    alpha: float
    entities: int | None
    effective: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    insufficient: dict[str, str] = field(default_factory=dict)


def calibrate(
    screened: Screened,
    entities: pd.Series | None,
    cache: NullCache,
    rate: float,
    extra_tests: int = 0,
) -> Plan:
    """Thresholds for every screened column at the per-column share of ``rate``.

    ``extra_tests`` counts tests outside the screened columns that share the
    report's false-alarm budget (the positive-rate test).
    """
    sizes = {}
    for col in [*screened.numerical, *screened.categorical]:
        sizes[col] = effective_size(screened.current[col], entities)
    distinct = max((d for _, d in sizes.values()), default=0) if entities is not None else None
    testable = [c for c, (n, d) in sizes.items() if min(n, d) >= MIN_EFFECTIVE_SIZE]
    alpha = per_column_alpha(rate, len(testable) + extra_tests)
    thresholds: dict[str, float] = {}
    insufficient: dict[str, str] = {}
    for col, (n_eff, d) in sizes.items():
        if col not in testable:
            insufficient[col] = (
                f"effective sample {n_eff:.0f} from {d} distinct entities "
                f"(< {MIN_EFFECTIVE_SIZE}): not tested"
            )
            continue
        kind: Kind = "numerical" if col in screened.numerical else "categorical"
        values = screened.reference[col].dropna().to_numpy()
        fit = cache.fit(col, kind, values, size_bucket(n_eff))
        thresholds[col] = fit.threshold(alpha)
    return Plan(
        alpha=alpha,
        entities=distinct,
        effective={col: round(n_eff, 1) for col, (n_eff, _) in sizes.items()},
        thresholds=thresholds,
        insufficient=insufficient,
    )
