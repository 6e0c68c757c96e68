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
from typing import TYPE_CHECKING, Any

from mlpipe import warehouse
from mlpipe.errors import InvalidInput
from mlpipe.monitoring._reports import entry, report_dir, require_logged, write_json
from mlpipe.windows import utcnow, window_ending

if TYPE_CHECKING:
    import pandas as pd

    from mlpipe.config import Settings

EXIT_CODES = {"pass": 0, "fail": 1, "insufficient": 1}


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
    verdict: str  # "pass" | "fail" | "insufficient"
    champion_requests: int
    canary_requests: int
    checks: list[CanaryCheck] = field(default_factory=list)
    report_path: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exit_code": self.exit_code}


def _arm_figures(rows: pd.DataFrame) -> dict[str, float]:
    n = len(rows)
    latency = rows["latency_ms"]
    labelled = rows[rows["outcome"].notna()]
    return {
        "requests": n,
        "error_rate": float((rows["status"] != "ok").mean()) if n else math.nan,
        "p50_ms": float(latency.quantile(0.5)) if n else math.nan,
        "p99_ms": float(latency.quantile(0.99)) if n else math.nan,
        "labelled": len(labelled),
        "accuracy": float((labelled["label"] == labelled["outcome"].round()).mean())
        if len(labelled)
        else math.nan,
    }


def _one_sided_p(p_champ: float, n_champ: int, p_can: float, n_can: int) -> float:
    """P-value that the canary's accuracy is lower than the champion's (two-proportion z-test)."""
    pooled = (p_champ * n_champ + p_can * n_can) / (n_champ + n_can)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_champ + 1 / n_can))
    if se == 0:
        return 0.0 if p_can < p_champ else 1.0
    z = (p_champ - p_can) / se
    return 0.5 * math.erfc(z / math.sqrt(2))


def analyze(
    settings: Settings,
    model: str,
    window: str = "1h",
    end: datetime | None = None,
    sync_first: bool = True,
    notify: warehouse.Notify | None = None,
) -> CanaryAnalysis:
    """Compare the canary with the champion over the window ending at ``end`` (default now).

    Records the analysis in the ``reports`` index (kind ``canary``), which
    :func:`latest_canary_verdict` and ``promote`` read. Raises :class:`InvalidInput`
    for a bad window and :class:`NotFound` for a model without logged predictions.
    """
    from scipy.stats import ks_2samp

    current = window_ending(window, end)
    require_logged(settings, model, sync_first, notify)
    win = warehouse.prediction_window(settings, model, current.start, current.end, notify=notify)
    rows = win.rows
    champ = rows[rows["arm"] == "champion"]
    can = rows[rows["arm"] == "canary"]
    f_ch, f_ca = _arm_figures(champ), _arm_figures(can)
    min_requests = settings.monitor.canary_min_requests
    max_err = settings.monitor.canary_max_error_rate_delta
    max_p99 = settings.monitor.canary_max_p99_ratio
    max_drop = settings.monitor.canary_max_accuracy_drop
    min_labels = settings.monitor.canary_min_labels
    drift_p = settings.monitor.canary_prediction_drift_p
    checks: list[CanaryCheck] = []
    enough = f_ch["requests"] >= min_requests and f_ca["requests"] >= min_requests
    checks.append(
        CanaryCheck(
            "requests", f_ch["requests"], f_ca["requests"], f">= {min_requests} per arm", enough
        )
    )
    if enough:
        delta = f_ca["error_rate"] - f_ch["error_rate"]
        checks.append(
            CanaryCheck(
                "error_rate",
                f_ch["error_rate"],
                f_ca["error_rate"],
                f"canary - champion <= {max_err}",
                delta <= max_err,
                f"delta {delta:+.4f}",
            )
        )
        ratio = f_ca["p99_ms"] / f_ch["p99_ms"] if f_ch["p99_ms"] > 0 else 1.0
        checks.append(
            CanaryCheck(
                "p99_latency_ms",
                f_ch["p99_ms"],
                f_ca["p99_ms"],
                f"canary <= {max_p99} x champion",
                ratio <= max_p99,
                f"ratio {ratio:.2f}",
            )
        )
        checks.append(
            CanaryCheck(
                "p50_latency_ms", f_ch["p50_ms"], f_ca["p50_ms"], "-", None, "informational"
            )
        )
        ks = ks_2samp(champ["score"].to_numpy(), can["score"].to_numpy())
        checks.append(
            CanaryCheck(
                "prediction_drift",
                None,
                float(ks.pvalue),
                f"K-S p_value >= {drift_p}",
                bool(ks.pvalue >= drift_p),
                f"K-S statistic {ks.statistic:.3f}",
            )
        )
        if f_ch["labelled"] >= min_labels and f_ca["labelled"] >= min_labels:
            drop = f_ch["accuracy"] - f_ca["accuracy"]
            p = _one_sided_p(
                f_ch["accuracy"], int(f_ch["labelled"]), f_ca["accuracy"], int(f_ca["labelled"])
            )
            worse = drop > max_drop and p < 0.05
            checks.append(
                CanaryCheck(
                    "accuracy",
                    f_ch["accuracy"],
                    f_ca["accuracy"],
                    f"drop <= {max_drop} (or not significant)",
                    not worse,
                    f"drop {drop:+.4f}, p={p:.3g}, labelled {f_ch['labelled']}/{f_ca['labelled']}",
                )
            )
        else:
            checks.append(
                CanaryCheck(
                    "accuracy",
                    f_ch["accuracy"],
                    f_ca["accuracy"],
                    f">= {min_labels} labels per arm",
                    None,
                    f"labelled {f_ch['labelled']}/{f_ca['labelled']}: not evaluated",
                )
            )
    if not enough:
        verdict = "insufficient"
    elif any(c.passed is False for c in checks):
        verdict = "fail"
    else:
        verdict = "pass"
    version = lambda frame: str(frame["version"].mode().iloc[0]) if len(frame) else None  # noqa: E731
    result = CanaryAnalysis(
        model,
        version(champ),
        version(can),
        current.start,
        current.end,
        verdict,
        int(f_ch["requests"]),
        int(f_ca["requests"]),
        checks,
    )
    now = utcnow()
    path = report_dir(settings, model, now) / "canary.json"
    write_json(path, result.to_dict())
    result.report_path = str(path)
    row = entry(
        "canary",
        model,
        current,
        now,
        verdict,
        path,
        result.to_dict(),
        arm="canary",
        version=result.canary_version,
    )
    warehouse.record_reports(settings, [row], notify)
    return result


def latest_canary_verdict(settings: Settings, model: str, version: str) -> str | None:
    """The newest analysis verdict of ``model``/``version`` (pass/fail/insufficient), else None."""
    if not model:
        raise InvalidInput("model name is empty")
    entries = warehouse.list_reports(settings, model=model, kind="canary", version=version, limit=1)
    return entries[0].verdict if entries else None
