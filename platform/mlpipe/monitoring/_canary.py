"""``canary analyze``: canary vs champion on the same window → pass / fail / insufficient.

Checks, each with both arms' figures and the threshold used:
requests (both arms need ``canary_min_requests``, else the verdict is
insufficient), error rate (canary − champion ≤ ``canary_max_error_rate_delta``),
p99 latency (canary ≤ ``canary_max_p99_ratio`` × champion), prediction
distribution (two-sample K-S on scores), and, where enough outcomes have
arrived, accuracy (a drop beyond ``canary_max_accuracy_drop`` that is also
significant fails).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, cast

from mlpipe import warehouse
from mlpipe.config import MonitorSettings, Settings
from mlpipe.errors import InvalidInput
from mlpipe.monitoring._reports import Finding, new_report, publish, read_logged
from mlpipe.windows import window_ending

if TYPE_CHECKING:
    import pandas as pd

CanaryOutcome = Literal["pass", "fail", "insufficient"]
EXIT_CODES: dict[CanaryOutcome, int] = {"pass": 0, "fail": 1, "insufficient": 1}


@dataclass(frozen=True)
class CanaryCheck:
    name: str
    champion: float | None
    canary: float | None
    threshold: str
    passed: bool | None  # None: not evaluated (the detail says why)
    detail: str = ""


@dataclass
class CanaryAnalysis:
    """The verdict, the figures behind it and the thresholds used."""

    model: str
    champion_version: str | None
    canary_version: str | None
    window_start: datetime
    window_end: datetime
    verdict: CanaryOutcome
    champion_requests: int
    canary_requests: int
    checks: list[CanaryCheck] = field(default_factory=list)
    report_path: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exit_code": self.exit_code}


@dataclass(frozen=True, eq=False)
class _Arm:
    """One arm's rows in the window and the figures the checks compare."""

    rows: pd.DataFrame
    requests: int
    error_rate: float
    p50_ms: float
    p99_ms: float
    labelled: int
    accuracy: float

    @classmethod
    def of(cls, rows: pd.DataFrame) -> _Arm:
        n = len(rows)
        latency = rows["latency_ms"]
        labelled = rows[rows["outcome"].notna()]
        right = labelled["label"] == labelled["outcome"].round()
        return cls(
            rows=rows,
            requests=n,
            error_rate=float((rows["status"] != "ok").mean()) if n else math.nan,
            p50_ms=float(latency.quantile(0.5)) if n else math.nan,
            p99_ms=float(latency.quantile(0.99)) if n else math.nan,
            labelled=len(labelled),
            accuracy=float(right.mean()) if len(labelled) else math.nan,
        )

    @property
    def version(self) -> str | None:
        """The arm's most frequent version in the window (None: no rows)."""
        return str(self.rows["version"].mode().iloc[0]) if len(self.rows) else None


def _one_sided_p(p_champ: float, n_champ: int, p_can: float, n_can: int) -> float:
    """P-value that the canary's accuracy is lower than the champion's (two-proportion z-test)."""
    pooled = (p_champ * n_champ + p_can * n_can) / (n_champ + n_can)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_champ + 1 / n_can))
    if se == 0:
        return 0.0 if p_can < p_champ else 1.0
    z = (p_champ - p_can) / se
    return 0.5 * math.erfc(z / math.sqrt(2))


def _requests(ch: _Arm, ca: _Arm, limits: MonitorSettings) -> CanaryCheck:
    least = limits.canary_min_requests
    enough = ch.requests >= least and ca.requests >= least
    return CanaryCheck("requests", ch.requests, ca.requests, f">= {least} per arm", enough)


def _error_rate(ch: _Arm, ca: _Arm, limits: MonitorSettings) -> CanaryCheck:
    most = limits.canary_max_error_rate_delta
    delta = ca.error_rate - ch.error_rate
    return CanaryCheck(
        "error_rate",
        ch.error_rate,
        ca.error_rate,
        f"canary - champion <= {most}",
        delta <= most,
        f"delta {delta:+.4f}",
    )


def _p99_latency(ch: _Arm, ca: _Arm, limits: MonitorSettings) -> CanaryCheck:
    most = limits.canary_max_p99_ratio
    ratio = ca.p99_ms / ch.p99_ms if ch.p99_ms > 0 else 1.0
    return CanaryCheck(
        "p99_latency_ms",
        ch.p99_ms,
        ca.p99_ms,
        f"canary <= {most} x champion",
        ratio <= most,
        f"ratio {ratio:.2f}",
    )


def _p50_latency(ch: _Arm, ca: _Arm, limits: MonitorSettings) -> CanaryCheck:
    return CanaryCheck("p50_latency_ms", ch.p50_ms, ca.p50_ms, "-", None, "informational")


def _prediction_drift(ch: _Arm, ca: _Arm, limits: MonitorSettings) -> CanaryCheck:
    from scipy.stats import ks_2samp

    least = limits.canary_prediction_drift_p
    ks = ks_2samp(ch.rows["score"].to_numpy(), ca.rows["score"].to_numpy())
    return CanaryCheck(
        "prediction_drift",
        None,
        float(ks.pvalue),
        f"K-S p_value >= {least}",
        bool(ks.pvalue >= least),
        f"K-S statistic {ks.statistic:.3f}",
    )


def _accuracy(ch: _Arm, ca: _Arm, limits: MonitorSettings) -> CanaryCheck:
    least, most = limits.canary_min_labels, limits.canary_max_accuracy_drop
    labelled = f"labelled {ch.labelled}/{ca.labelled}"
    if ch.labelled < least or ca.labelled < least:
        threshold = f">= {least} labels per arm"
        return CanaryCheck(
            "accuracy", ch.accuracy, ca.accuracy, threshold, None, f"{labelled}: not evaluated"
        )
    drop = ch.accuracy - ca.accuracy
    p = _one_sided_p(ch.accuracy, ch.labelled, ca.accuracy, ca.labelled)
    worse = drop > most and p < 0.05
    return CanaryCheck(
        "accuracy",
        ch.accuracy,
        ca.accuracy,
        f"drop <= {most} (or not significant)",
        not worse,
        f"drop {drop:+.4f}, p={p:.3g}, {labelled}",
    )


# Run in this order once both arms have enough requests.
_CHECKS = (_error_rate, _p99_latency, _p50_latency, _prediction_drift, _accuracy)


def _checks(ch: _Arm, ca: _Arm, limits: MonitorSettings) -> tuple[CanaryOutcome, list[CanaryCheck]]:
    """The checks and the verdict over them: insufficient without enough requests."""
    requests = _requests(ch, ca, limits)
    if not requests.passed:
        return "insufficient", [requests]
    checks = [requests, *(check(ch, ca, limits) for check in _CHECKS)]
    return ("fail" if any(c.passed is False for c in checks) else "pass"), checks


def analyze(
    settings: Settings,
    model: str,
    window: str = "1h",
    end: datetime | None = None,
    sync_first: bool = True,
    notify: warehouse.Notify | None = None,
    history: warehouse.HistorySource | None = None,
) -> CanaryAnalysis:
    """Compare the canary with the champion over the window ending at ``end`` (default now).

    Records the analysis in the ``reports`` index (kind ``canary``), which
    :func:`latest_canary_verdict` and ``promote`` read. ``history`` is what the
    sync first mirrors into the warehouse (see :func:`mlpipe.warehouse.sync`).
    Raises :class:`InvalidInput` for a bad window and :class:`NotFound` for a
    model without logged predictions.
    """
    current = window_ending(window, end)
    logged = read_logged(
        settings, model, current, sync_first=sync_first, history=history, notify=notify
    ).rows
    champion = _Arm.of(logged[logged["arm"] == "champion"])
    canary = _Arm.of(logged[logged["arm"] == "canary"])
    verdict, checks = _checks(champion, canary, settings.monitor)
    result = CanaryAnalysis(
        model,
        champion.version,
        canary.version,
        current.start,
        current.end,
        verdict,
        champion.requests,
        canary.requests,
        checks,
    )
    report = new_report(settings, "canary", model)
    result.report_path = str(report.document)
    data = result.to_dict()
    finding = Finding(verdict, data, arm="canary", version=result.canary_version)
    publish(settings, report, current, data, [finding], notify)
    return result


def latest_canary_verdict(settings: Settings, model: str, version: str) -> CanaryOutcome | None:
    """The newest analysis verdict of ``model``/``version`` (pass/fail/insufficient), else None."""
    if not model:
        raise InvalidInput("model name is empty")
    entries = warehouse.list_reports(settings, model=model, kind="canary", version=version, limit=1)
    return cast(CanaryOutcome, entries[0].verdict) if entries else None
