"""mlpipe's judgement of an arm's window: each tested column, and the arm's verdict.

A column drifts when its shift is significant against its calibrated threshold
(:mod:`._calibration`) *and* at least :data:`MIN_EFFECT`. Besides the feature
and prediction columns Evidently tests, a binary version's served positive rate
is tested against its reference's, and a column's share of missing values
against the reference's share (two-proportion z tests, the window's variance
inflated by the entities' design effect). Every drifted column is an alarm, so
is a share of significant feature shifts at the drift-share threshold, and so is
every quality alarm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from mlpipe.monitoring._calibration import MIN_EFFECT, MIN_EFFECTIVE_SIZE, effective_size, severity
from mlpipe.monitoring._evidently import ColumnResult
from mlpipe.monitoring._quality import alarm_text
from mlpipe.monitoring._quality_section import QualitySection
from mlpipe.monitoring._reference import PREDICTION
from mlpipe.monitoring._screen import SkippedColumn

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from mlpipe.monitoring._arm_window import ArmWindow
    from mlpipe.monitoring._calibration import Plan

# no_data: nothing in the window to test; insufficient: too few distinct entities to test any
# column; quality: labelled requests show the version doing worse than it was registered with.
DriftOutcome = Literal["ok", "drift", "quality", "insufficient", "no_data"]
ColumnStatus = Literal["ok", "drift", "insufficient"]
ColumnKind = Literal["feature", "prediction", "missing"]
MISSING_METHOD = "missing share, two-proportion z"
RATE_METHOD = "two-proportion z"
POSITIVE_RATE = "positive_rate"


@dataclass(frozen=True, kw_only=True)
class RateTest:
    """A window's rate of flagged rows against the reference's, with the design effect."""

    window_rate: float
    reference_rate: float
    z: float
    critical: float
    effect: float  # Cohen's h
    significant: bool
    drifted: bool
    severity: str | None


def positive_rate_test(
    flagged: np.ndarray, design: float, reference_rate: float, reference_rows: int, alpha: float
) -> RateTest:
    """Two-proportion z-test (window variance inflated by ``design``), effect Cohen's h."""
    from scipy.stats import norm

    n = len(flagged)
    rate = float(flagged.mean())
    p = min(max(reference_rate, 0.5 / reference_rows), 1 - 0.5 / reference_rows)
    se = math.sqrt(p * (1 - p) * (design / n + 1 / reference_rows))
    z = (rate - reference_rate) / se
    critical = float(norm.isf(alpha / 2))
    h = abs(2 * math.asin(math.sqrt(rate)) - 2 * math.asin(math.sqrt(reference_rate)))
    significant = abs(z) > critical
    drifted = significant and h >= MIN_EFFECT
    return RateTest(
        window_rate=rate, reference_rate=reference_rate, z=z, critical=critical, effect=h,
        significant=significant, drifted=drifted, severity=severity(h) if drifted else None,
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ColumnDrift:
    """One tested column. ``drifted``: significant *and* at least the stated effect size.

    ``score`` is Evidently's statistic (normed Wasserstein, in reference standard
    deviations, or Jensen-Shannon distance), which is also the effect size, or a
    rate test's |z|; ``threshold`` is mlpipe's, calibrated for the column's
    ``effective_size`` (a rate test's: the critical z).
    """

    column: str
    kind: ColumnKind  # missing: the column's share of missing values, not its values
    method: str
    score: float
    threshold: float | None
    drifted: bool
    status: ColumnStatus = "ok"
    significant: bool = False
    effective_size: float | None = None
    severity: str | None = None
    detail: str = ""

    @classmethod
    def untested(
        cls, *, column: str, kind: ColumnKind, method: str, effective_size: float | None,
        why: str, score: float = math.nan,
    ) -> ColumnDrift:  # fmt: skip
        """A column too thin to test: ``insufficient``, with why."""
        return cls(
            column=column, kind=kind, method=method, score=score, threshold=None, drifted=False,
            status="insufficient", effective_size=effective_size, detail=why,
        )  # fmt: skip

    @classmethod
    def of_distance(
        cls, *, column: str, kind: ColumnKind, method: str, score: float, threshold: float,
        effective_size: float | None,
    ) -> ColumnDrift:  # fmt: skip
        """A distance against its calibrated threshold."""
        significant = score > threshold
        drifted = significant and score >= MIN_EFFECT
        return cls(
            column=column, kind=kind, method=method, score=score, threshold=threshold,
            drifted=drifted, status="drift" if drifted else "ok", significant=significant,
            effective_size=effective_size, severity=severity(score) if drifted else None,
        )  # fmt: skip

    @classmethod
    def of_rate_test(
        cls, *, column: str, kind: ColumnKind, method: str, test: RateTest,
        effective_size: float, detail: str,
    ) -> ColumnDrift:  # fmt: skip
        """A rate test's |z| against its critical value."""
        return cls(
            column=column, kind=kind, method=method, score=abs(test.z), threshold=test.critical,
            drifted=test.drifted, status="drift" if test.drifted else "ok",
            significant=test.significant, effective_size=effective_size,
            severity=test.severity, detail=detail,
        )  # fmt: skip

    def alarm(self) -> str:
        """This drifted column's alarm in words."""
        if self.kind == "missing":
            return f"{self.column}: {self.severity} shift in missing share ({self.detail})"
        return f"{self.column}: {self.severity} shift"


@dataclass(frozen=True, kw_only=True)
class ColumnJudgement:
    """The columns judged from Evidently's results, and the ones it gave no score for."""

    columns: list[ColumnDrift]
    skipped: list[SkippedColumn]


def distance_columns(tested: dict[str, ColumnResult], plan: Plan) -> ColumnJudgement:
    """Evidently's statistic per column, judged against mlpipe's calibrated threshold."""
    columns, skipped = [], []
    for col, (method, score, _evidently_threshold, _failed) in sorted(tested.items()):
        if score != score:  # NaN: the test gave no score
            skipped.append(SkippedColumn(column=col, reason=f"{method} gave no score"))
            continue
        kind: ColumnKind = "prediction" if col == PREDICTION else "feature"
        size, threshold = plan.effective.get(col), plan.thresholds.get(col)
        if threshold is None:
            why = plan.insufficient.get(col, "not calibrated")
            columns.append(
                ColumnDrift.untested(
                    column=col, kind=kind, method=method, score=score, effective_size=size,
                    why=why,
                )
            )  # fmt: skip
            continue
        columns.append(
            ColumnDrift.of_distance(
                column=col, kind=kind, method=method, score=score, threshold=threshold,
                effective_size=size,
            )
        )  # fmt: skip
    return ColumnJudgement(columns=columns, skipped=skipped)


def _too_few(distinct: int) -> str:
    return f"{distinct} distinct entities (< {MIN_EFFECTIVE_SIZE}): not tested"


def positive_rate_column(
    win: ArmWindow, reference_rate: float, reference_rows: int, alpha: float
) -> ColumnDrift:
    """The served positive rate (the share of rows labelled 1) against the reference's."""
    flagged = win.rows["label"].to_numpy(dtype=float)
    size, distinct = effective_size(win.rows["label"].astype(float), win.entities)
    if min(size, distinct) < MIN_EFFECTIVE_SIZE:
        return ColumnDrift.untested(
            column=POSITIVE_RATE, kind="prediction", method=RATE_METHOD, effective_size=size,
            why=_too_few(distinct),
        )  # fmt: skip
    design = len(flagged) / max(size, 1.0)
    test = positive_rate_test(flagged, design, reference_rate, reference_rows, alpha)
    detail = (
        f"served {test.window_rate:.2%} vs reference {test.reference_rate:.2%}, "
        f"z={test.z:.2f}, effect h={test.effect:.3f}"
    )
    return ColumnDrift.of_rate_test(
        column=POSITIVE_RATE, kind="prediction", method=RATE_METHOD, test=test,
        effective_size=size, detail=detail,
    )  # fmt: skip


def missing_share_columns(
    win: ArmWindow, reference: pd.DataFrame, columns: list[str], alpha: float
) -> list[ColumnDrift]:
    """Each column's share of missing values against the reference's: the two-proportion z
    test of the positive rate (window variance inflated by the entities' design effect), at
    the report's per-column ``alpha``, alarming only with an effect (Cohen's h) >= MIN_EFFECT.
    """
    out = []
    for col in columns:
        gaps = win.features[col].isna().astype(float).reset_index(drop=True)
        size, distinct = effective_size(gaps, win.entities)
        if min(size, distinct) < MIN_EFFECTIVE_SIZE:
            out.append(
                ColumnDrift.untested(
                    column=col, kind="missing", method=MISSING_METHOD, effective_size=size,
                    why=_too_few(distinct),
                )
            )  # fmt: skip
            continue
        flagged = gaps.to_numpy()
        share = float(reference[col].isna().mean())
        design = len(flagged) / max(size, 1.0)
        test = positive_rate_test(flagged, design, share, len(reference), alpha)
        detail = (
            f"missing {test.window_rate:.1%} vs reference {test.reference_rate:.1%}, "
            f"z={test.z:.2f}, effect h={test.effect:.3f}"
        )
        out.append(
            ColumnDrift.of_rate_test(
                column=col, kind="missing", method=MISSING_METHOD, test=test, effective_size=size,
                detail=detail,
            )
        )  # fmt: skip
    return out


@dataclass(frozen=True, kw_only=True)
class ArmJudgement:
    """An arm's verdict, its share of significant feature shifts (None: no feature tested),
    its alarms in words and a note on why nothing was judged (where so)."""

    verdict: DriftOutcome
    drift_share: float | None
    alarms: list[str]
    notes: list[str]


def judge_arm(
    columns: list[ColumnDrift], quality: QualitySection | None, threshold: float
) -> ArmJudgement:
    """Every drifted column is an alarm; so is a share of significant shifts at ``threshold``,
    and so is each quality alarm (which makes the verdict ``quality``)."""
    tested = [c for c in columns if c.status != "insufficient"]
    features = [c for c in tested if c.kind == "feature"]
    share = sum(c.significant for c in features) / len(features) if features else None
    alarms = [c.alarm() for c in tested if c.drifted]
    if share is not None and share >= threshold:
        alarms.append(f"drift share {share:.2f} >= {threshold:g} (significant shifts)")
    quality_alarms = quality.alarms if quality is not None else []
    alarms.extend(alarm_text(m) for m in quality_alarms)
    verdict, notes = _verdict(bool(quality_alarms), bool(alarms), bool(tested), bool(columns))
    return ArmJudgement(verdict=verdict, drift_share=share, alarms=alarms, notes=notes)


def _verdict(
    quality: bool, alarms: bool, tested: bool, columns: bool
) -> tuple[DriftOutcome, list[str]]:
    if quality:
        return "quality", []
    if alarms:
        return "drift", []
    if tested:
        return "ok", []
    if columns:
        return "insufficient", ["every column has too few distinct entities to test"]
    return "no_data", ["no column could be tested"]


__all__ = [
    "POSITIVE_RATE",
    "ArmJudgement",
    "ColumnDrift",
    "ColumnJudgement",
    "ColumnKind",
    "ColumnStatus",
    "DriftOutcome",
    "RateTest",
    "judge_arm",
    "distance_columns",
    "missing_share_columns",
    "positive_rate_column",
    "positive_rate_test",
]
