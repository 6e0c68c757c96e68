"""``shadow analyze``: the shadow version against the champion on the same requests.

A shadow answer is logged under the request id of the answer the client got
(arm ``shadow``), so the two versions are paired by request id with no
re-scoring: the same checks as a canary analysis run on them (the paired score
test and the label metrics, entity-clustered; see :mod:`mlpipe.monitoring._canary`),
beside what a shadow is for: how often the labels agree, the distribution of
score differences, the requests they disagree on most (with their ids, to
replay them), and each side's latency (the shadow's is measured off the
response path, so it is shown, not judged). Verdict: insufficient below
``canary_min_requests`` paired requests or with nothing to compare; fail when
a check fails; pass otherwise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.monitoring import _paired
from mlpipe.monitoring._canary import (
    EXIT_CODES,
    CanaryCheck,
    CanaryOutcome,
    Pairing,
    label_checks,
    score_check,
)
from mlpipe.monitoring._reports import publish_versus_champion, read_logged, with_entity_keys
from mlpipe.windows import window_ending

if TYPE_CHECKING:
    import pandas as pd

TOP_DISAGREEMENTS = 10
_QUANTILES = (0.01, 0.05, 0.5, 0.95, 0.99)


@dataclass(frozen=True)
class Disagreement:
    """One request the two versions scored far apart."""

    request_id: str
    entity_key: str
    champion_score: float
    shadow_score: float
    delta: float  # shadow − champion
    champion_label: int
    shadow_label: int
    outcome: float | None


@dataclass
class ShadowAnalysis:
    """The verdict, the paired figures behind it, and the largest disagreements."""

    model: str
    champion_version: str | None
    shadow_version: str | None
    window_start: datetime
    window_end: datetime
    verdict: CanaryOutcome
    paired_requests: int
    unpaired_shadow_rows: int
    label_agreement: float
    score_delta: dict[str, float] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    checks: list[CanaryCheck] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    report_path: str | None = None
    html_path: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exit_code": self.exit_code}


def pair_shadow(rows: pd.DataFrame, version: str | None) -> tuple[pd.DataFrame, int]:
    """Shadow rows of ``version`` (default: the newest) joined to the champion's answers.

    Columns suffixed ``_ch`` (champion) and ``_sh`` (shadow); also the count of
    shadow rows with no champion answer in the window.
    """
    shadow = rows[rows["arm"] == "shadow"]
    if version is None and len(shadow):
        version = str(shadow.sort_values("ts")["version"].iloc[-1])
    shadow = shadow[shadow["version"] == version]
    champion = rows[rows["arm"] == "champion"]
    paired = champion.merge(shadow, on="request_id", suffixes=("_ch", "_sh"))
    if len(paired):
        newest = str(paired.sort_values("ts_ch")["version_ch"].iloc[-1])
        paired = paired[paired["version_ch"] == newest]
    return paired.reset_index(drop=True), len(shadow) - len(paired)


def _pairing(paired: pd.DataFrame) -> Pairing:
    codes = _paired.entity_codes(paired["entity_key_ch"], paired["request_id"])
    return Pairing(
        champion=paired["score_ch"].to_numpy(dtype=float),
        canary=paired["score_sh"].to_numpy(dtype=float),
        champion_threshold=math.nan,
        canary_threshold=math.nan,
        clusters=codes,
        outcome=paired["outcome_ch"].to_numpy(dtype=float),
        champion_flagged=paired["label_ch"].to_numpy() == 1,
        canary_flagged=paired["label_sh"].to_numpy() == 1,
    )


def _figures(paired: pd.DataFrame) -> tuple[float, dict[str, float], dict[str, float]]:
    """Label agreement, the score-delta distribution and both sides' latency."""
    if not len(paired):
        return math.nan, {}, {}
    delta = (paired["score_sh"] - paired["score_ch"]).to_numpy(dtype=float)
    spread = {f"p{round(q * 100)}": float(np.quantile(delta, q)) for q in _QUANTILES}
    spread.update(mean=float(delta.mean()), mean_abs=float(np.abs(delta).mean()))
    spread["max_abs"] = float(np.abs(delta).max())
    latency = {
        f"{side}_{name}": float(paired[f"latency_ms_{suffix}"].quantile(q))
        for side, suffix in (("champion", "ch"), ("shadow", "sh"))
        for name, q in (("p50", 0.5), ("p99", 0.99))
    }
    agreement = float((paired["label_ch"] == paired["label_sh"]).mean())
    return agreement, spread, latency


def _disagreements(paired: pd.DataFrame, top: int) -> list[Disagreement]:
    delta = paired["score_sh"] - paired["score_ch"]
    order = delta.abs().sort_values(ascending=False, kind="stable").index[:top]
    return [
        Disagreement(
            request_id=str(r.request_id),
            entity_key=str(r.entity_key_ch),
            champion_score=float(r.score_ch),
            shadow_score=float(r.score_sh),
            delta=float(r.score_sh - r.score_ch),
            champion_label=int(r.label_ch),
            shadow_label=int(r.label_sh),
            outcome=None if math.isnan(r.outcome_ch) else float(r.outcome_ch),
        )
        for r in paired.loc[order].itertuples()
    ]


def shadow_checks(
    paired: pd.DataFrame, least_requests: int, least_labels: int
) -> tuple[CanaryOutcome, list[CanaryCheck]]:
    """The checks on the paired rows and the verdict over them."""
    n = len(paired)
    requests = CanaryCheck("requests", n, n, f">= {least_requests} paired", n >= least_requests)
    if not requests.passed:
        return "insufficient", [requests]
    pairing = _pairing(paired)
    models = [score_check(pairing, ""), *label_checks(pairing, least_labels)]
    checks = [requests, *models]
    if any(c.passed is False for c in checks):
        return "fail", checks
    return ("insufficient" if all(c.passed is None for c in models) else "pass"), checks


def analyze_shadow(
    settings: Settings,
    model: str,
    window: str = "1h",
    end: datetime | None = None,
    version: str | None = None,
    top: int = TOP_DISAGREEMENTS,
    sync_first: bool = True,
    notify: warehouse.Notify | None = None,
    history: warehouse.HistorySource | None = None,
) -> ShadowAnalysis:
    """Compare the shadow version (default: the newest in the window) with the champion.

    Writes ``shadow.json`` and ``shadow.html`` and indexes the verdict (kind
    ``shadow``, with the version). Raises :class:`InvalidInput` for a bad
    window and :class:`NotFound` for a model without logged predictions.
    """
    current = window_ending(window, end)
    logged = read_logged(
        settings, model, current, sync_first=sync_first, history=history, notify=notify,
        with_entities=True,
    )  # fmt: skip
    paired, unpaired = pair_shadow(with_entity_keys(logged), version)
    limits = settings.monitor
    verdict, checks = shadow_checks(paired, limits.canary_min_requests, limits.canary_min_labels)
    agreement, spread, latency = _figures(paired)
    versions = [
        str(paired[c].iloc[0]) if len(paired) else None for c in ("version_ch", "version_sh")
    ]
    result = ShadowAnalysis(
        model, versions[0], versions[1] or version, current.start, current.end, verdict,
        len(paired), unpaired, agreement, spread, latency, checks, _disagreements(paired, top),
    )  # fmt: skip
    publish_versus_champion(
        settings, "shadow", current, model, result.shadow_version, result, notify
    )
    return result
