"""``canary analyze``: the canary version vs the champion version → pass / fail / insufficient.

The analysis compares models, not populations. It takes the rows of the
current canary *version* (the newest canary-arm version in the window, or the
one asked for), not every row with the arm name, and the champion version's
rows beside them. Every analysed row is re-scored offline from its logged
features by both versions (loaded verified from the registry), so:

- the **paired score test** compares the two versions' scores row by row
  (:mod:`mlpipe.monitoring._paired`: the rank correlation of the two
  versions' scores, bounded by an entity bootstrap, against a floor);
- the **label metrics** (AUC, recall and precision at each version's
  threshold, log loss) compare both versions on the same labelled rows, with
  entity-clustered bootstrap bounds (:mod:`mlpipe.monitoring._label_metrics`).

Re-scoring is trusted only when it gives the served scores back (else the log
is not what the model saw): then the score test is not evaluated and the label
metrics fall back to comparing the arms' rows (still entity-clustered).
Operational checks compare the arms as before: requests (both arms need
``canary_min_requests``, else insufficient), error rate, p99 latency.
Verdict: fail if any check fails; insufficient if too few requests, or if
neither the score test nor any label metric could be evaluated; pass otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from mlpipe import warehouse
from mlpipe.config import MonitorSettings, Settings
from mlpipe.errors import InvalidInput
from mlpipe.monitoring import _label_metrics as lm
from mlpipe.monitoring import _paired
from mlpipe.monitoring._reports import publish_versus_champion, read_logged, with_entity_keys
from mlpipe.windows import window_ending

if TYPE_CHECKING:
    import pandas as pd

CanaryOutcome = Literal["pass", "fail", "insufficient"]
EXIT_CODES: dict[CanaryOutcome, int] = {"pass": 0, "fail": 1, "insufficient": 1}
MIN_POSITIVES = 10  # labelled positives (and negatives) needed before label metrics count


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
    paired: bool = False
    notes: list[str] = field(default_factory=list)
    report_path: str | None = None
    html_path: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exit_code": self.exit_code}


@dataclass(frozen=True, eq=False)
class _Arm:
    """One version's rows on its arm in the window, and the operational figures."""

    rows: pd.DataFrame
    version: str | None
    requests: int
    error_rate: float
    p50_ms: float
    p99_ms: float

    @classmethod
    def of(cls, rows: pd.DataFrame, version: str | None = None) -> _Arm:
        n = len(rows)
        latency = rows["latency_ms"]
        if version is None and n:
            version = str(rows["version"].iloc[-1])
        return cls(
            rows=rows,
            version=version,
            requests=n,
            error_rate=float((rows["status"] != "ok").mean()) if n else math.nan,
            p50_ms=float(latency.quantile(0.5)) if n else math.nan,
            p99_ms=float(latency.quantile(0.99)) if n else math.nan,
        )


@dataclass(frozen=True)
class Pairing:
    """Every analysed row (champion arm's, then canary arm's) scored by both versions."""

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

    def flagged(self) -> tuple[np.ndarray, np.ndarray]:
        """Each version's positive labels on the analysed rows."""
        ch = self.champion_flagged
        ca = self.canary_flagged
        return (
            self.champion >= self.champion_threshold if ch is None else ch.astype(bool),
            self.canary >= self.canary_threshold if ca is None else ca.astype(bool),
        )


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


def score_check(pairing: Pairing | None, why_unpaired: str) -> CanaryCheck:
    """The paired score test as a check (not evaluated without a pairing)."""
    least, p = _paired.MIN_RANK_CORRELATION, _paired.SCORE_TEST_P
    threshold = f"Spearman >= {least} (upper {1 - p:.0%} bound, entity-clustered)"
    if pairing is None:
        return CanaryCheck("paired_score", None, None, threshold, None, why_unpaired)
    t = _paired.score_test(pairing.champion, pairing.canary, pairing.clusters)
    return CanaryCheck("paired_score", 1.0, t.spearman, threshold, t.passed, t.detail)


def _scored(score: np.ndarray, flagged: np.ndarray, y: np.ndarray, c: np.ndarray) -> lm.Scored:
    return lm.Scored(score=score, flagged=flagged, y=y, clusters=c)


def _label_sides(
    pairing: Pairing | None,
    least: int,
    arms: Sequence[_Arm] = (),
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


def label_checks(
    pairing: Pairing | None, least_labels: int, arms: tuple[_Arm, _Arm] | None = None
) -> list[CanaryCheck]:
    """AUC, recall, precision and log loss of both versions: paired, else the ``arms``' rows."""
    if pairing is None and arms is None:
        raise ValueError("label_checks needs a pairing or the arms")
    sides = _label_sides(pairing, least_labels, arms or ())
    if isinstance(sides, str):
        return [CanaryCheck(m, None, None, "-", None, sides) for m in lm.METRICS]
    champion, canary, is_paired = sides
    compared = (lm.paired if is_paired else lm.unpaired)(champion, canary)
    how = "paired, same rows" if is_paired else "arms' own rows"
    labelled = len(champion.y) + (0 if is_paired else len(canary.y))
    return [_metric_check(m, how, labelled) for m in compared]


def _metric_check(m: lm.MetricComparison, how: str, labelled: int) -> CanaryCheck:
    side = "upper" if lm.HIGHER_IS_BETTER[m.metric] else "lower"
    sign = ">= -" if lm.HIGHER_IS_BETTER[m.metric] else "<= +"
    threshold = f"canary - champion {sign}{m.margin:.3g} (95% {side} bound, entity-clustered)"
    detail = f"delta {m.delta:+.4f}, {side} bound {m.bound:+.4f}; {labelled} labelled, {how}"
    if m.worse is None:
        detail = (
            f"not judged: rests on {m.support} entities (< {lm.MIN_SUPPORT}) or is undefined; "
            f"{labelled} labelled, {how}"
        )
    passed = None if m.worse is None else not m.worse
    return CanaryCheck(m.metric, m.baseline, m.candidate, threshold, passed, detail)


def _checks(
    ch: _Arm,
    ca: _Arm,
    limits: MonitorSettings,
    pairing: Pairing | None = None,
    why_unpaired: str = "no re-scored rows",
) -> tuple[CanaryOutcome, list[CanaryCheck]]:
    """The checks and the verdict over them (see the module docstring)."""
    requests = _requests(ch, ca, limits)
    if not requests.passed:
        return "insufficient", [requests]
    operational = [check(ch, ca, limits) for check in (_error_rate, _p99_latency, _p50_latency)]
    labels = label_checks(pairing, limits.canary_min_labels, (ch, ca))
    models = [score_check(pairing, why_unpaired), *labels]
    checks = [requests, *operational, *models]
    if any(c.passed is False for c in checks):
        return "fail", checks
    if all(c.passed is None for c in models):
        return "insufficient", checks
    return "pass", checks


def _newest_version(rows: pd.DataFrame, arm: str) -> str | None:
    on_arm = rows[rows["arm"] == arm]
    return str(on_arm.sort_values("ts")["version"].iloc[-1]) if len(on_arm) else None


def _pair(
    settings: Settings, model: str, ch: _Arm, ca: _Arm, features: pd.DataFrame
) -> tuple[Pairing | None, str]:
    """Both versions' scores on every analysed row, or None and why not."""
    import pandas as pd

    if ch.version is None or ca.version is None:
        return None, "an arm has no rows: not evaluated"
    rows = pd.concat([ch.rows, ca.rows])
    x = features.loc[rows.index]
    champion = _paired.rescore(settings, model, ch.version, x)
    canary = _paired.rescore(settings, model, ca.version, x)
    for r in (champion, canary):
        if r.scores is None:
            return None, f"not re-scored: {r.reason}"
    assert champion.scores is not None and canary.scores is not None
    n_ch = len(ch.rows)
    for name, own, served in (
        (f"champion v{ch.version}", champion.scores[:n_ch], ch.rows["score"].to_numpy()),
        (f"canary v{ca.version}", canary.scores[n_ch:], ca.rows["score"].to_numpy()),
    ):
        ok, share = _paired.reproduced(served, own)
        if not ok:
            return None, (
                f"re-scoring {name} from the logged features reproduces {share:.1%} of its "
                "served scores: the log is not what it scored; not evaluated"
            )
    codes = _paired.entity_codes(rows["entity_key"], rows["request_id"])
    outcome = rows["outcome"].to_numpy(dtype=float)
    pairing = Pairing(
        champion.scores, canary.scores, champion.threshold, canary.threshold, codes, outcome
    )
    return pairing, ""


def _arms(rows: pd.DataFrame, version: str | None) -> tuple[_Arm, _Arm]:
    """The champion version's and the canary version's rows (the newest of each by default)."""
    canary_version = version or _newest_version(rows, "canary")
    champion_version = _newest_version(rows, "champion")
    champion = rows[(rows["arm"] == "champion") & (rows["version"] == champion_version)]
    canary = rows[(rows["arm"] == "canary") & (rows["version"] == canary_version)]
    return _Arm.of(champion, champion_version), _Arm.of(canary, canary_version)


def analyze(
    settings: Settings,
    model: str,
    window: str = "1h",
    end: datetime | None = None,
    sync_first: bool = True,
    notify: warehouse.Notify | None = None,
    history: warehouse.HistorySource | None = None,
    version: str | None = None,
) -> CanaryAnalysis:
    """Compare the canary version with the champion over the window ending at ``end`` (default now).

    ``version`` is the canary version to analyse (default: the newest on the
    canary arm in the window); rows of other versions are left out. Records
    the analysis in the ``reports`` index (kind ``canary``, with the version),
    which :func:`latest_canary_verdict` and ``promote`` read, and writes
    ``canary.json`` and ``canary.html``. ``history`` is what the sync first
    mirrors into the warehouse (see :func:`mlpipe.warehouse.sync`). Raises
    :class:`InvalidInput` for a bad window and :class:`NotFound` for a model
    without logged predictions.
    """
    current = window_ending(window, end)
    logged = read_logged(
        settings, model, current, sync_first=sync_first, history=history, notify=notify,
        with_entities=True,
    )  # fmt: skip
    champion, canary = _arms(with_entity_keys(logged), version)
    pairing, why = _pair(settings, model, champion, canary, logged.features)
    verdict, checks = _checks(champion, canary, settings.monitor, pairing, why)
    result = CanaryAnalysis(
        model, champion.version, canary.version, current.start, current.end, verdict,
        champion.requests, canary.requests, checks, paired=pairing is not None,
        notes=[why] if why else [],
    )  # fmt: skip
    publish_versus_champion(
        settings, "canary", current, model, result.canary_version, result, notify
    )
    return result


def latest_canary_verdict(settings: Settings, model: str, version: str) -> CanaryOutcome | None:
    """The newest analysis verdict of ``model``/``version`` (pass/fail/insufficient), else None."""
    if not model:
        raise InvalidInput("model name is empty")
    entries = warehouse.list_reports(settings, model=model, kind="canary", version=version, limit=1)
    return cast(CanaryOutcome, entries[0].verdict) if entries else None
