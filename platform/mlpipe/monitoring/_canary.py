"""``canary analyze``: the canary version vs the champion version → pass / fail / insufficient.

The analysis compares models, not populations. It takes the rows of the
current canary *version* (the newest canary-arm version in the window, or the
one asked for), not every row with the arm name, and the champion version's
rows beside them. Every analysed row is re-scored offline from its logged
features by both versions (loaded verified from the registry), so:

- the **paired test** compares the two versions' outputs row by row
  (:mod:`mlpipe.monitoring._paired`: the rank correlation of the two
  versions' scores or predicted values, or for a multiclass version Cohen's
  kappa of their predicted classes, bounded by an entity bootstrap, against a
  floor);
- the **label metrics** of the version's task (binary: AUC, recall and
  precision at each version's threshold, log loss; multiclass: accuracy, macro
  F1, log loss; regression: MAE, RMSE, bias) compare both versions on the same
  labelled rows, with entity-clustered bootstrap bounds
  (:mod:`mlpipe.monitoring._model_checks`).

Re-scoring is trusted only when it gives the served scores back (else the log
is not what the model saw): then the score test is not evaluated and the label
metrics fall back to comparing the arms' rows (still entity-clustered).
Operational checks compare the arms as before: requests (both arms need
``canary_min_requests``, else insufficient), error rate, p99 latency (judged
beyond the window's own noise, with an absolute slack: docs/canary.md).
Verdict: fail if any check fails; insufficient if too few requests, or if
neither the score test nor any label metric could be evaluated; pass otherwise.

Beside the checks, a classifier's analysis has per-class tables, classes named
as the version names them (:mod:`._class_tables`): each arm's share of
predictions per class and, where outcomes arrived, its recall and precision per
class on its own rows (the arms serve different customers, so these describe
each arm, they do not compare the versions); and where both versions re-scored
the same rows, their agreement and confusion per class and, multiclass, the
canary − champion probability of each class.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, cast

from mlpipe import warehouse
from mlpipe.config import MonitorSettings, Settings
from mlpipe.errors import InvalidInput
from mlpipe.monitoring import _class_tables as ct
from mlpipe.monitoring import _paired
from mlpipe.monitoring._model_checks import CanaryCheck, Pairing, label_checks, score_check
from mlpipe.monitoring._quality import version_task
from mlpipe.monitoring._reports import (
    pruned_notes,
    publish_versus_champion,
    read_logged,
    with_entity_keys,
)
from mlpipe.tasks import TaskSpec
from mlpipe.windows import window_ending

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

CanaryOutcome = Literal["pass", "fail", "insufficient"]
EXIT_CODES: dict[CanaryOutcome, int] = {"pass": 0, "fail": 1, "insufficient": 1}


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
    task: str = "binary"  # the canary version's task, as TaskSpec.describe() says it
    # classifiers, each arm on its own rows: per class, its share of the arm's predictions,
    # and where outcomes arrived the arm's labelled rows, recall and precision of the class
    arm_classes: list[dict[str, Any]] = field(default_factory=list)
    # classifiers, both versions on the same (re-scored) rows: per class, how often each
    # predicts it and the canary agrees; the confusion table of their predicted classes
    class_agreement: list[dict[str, Any]] = field(default_factory=list)
    confusion: list[dict[str, Any]] = field(default_factory=list)
    # multiclass, same rows: per class, the spread of canary − champion probability
    probability_delta: list[dict[str, Any]] = field(default_factory=list)

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


def _p99_ratio_bound(ch: _Arm, ca: _Arm, draws: int = 400) -> float:
    """The one-sided 95 % lower bound of canary p99 / champion p99, each arm's requests
    resampled (NaN without latencies).

    A p99 over a few hundred requests is their one or two slowest: on a busy
    machine, which arm the stalls land in is chance. The bound is how much slower
    the canary is beyond that chance, measured on the same window.
    """
    import numpy as np

    rng = np.random.default_rng(0)
    sides = [arm.rows["latency_ms"].dropna().to_numpy(float) for arm in (ch, ca)]
    if not all(len(side) for side in sides):
        return math.nan
    champion, canary = (
        np.array([np.quantile(rng.choice(side, len(side)), 0.99) for _ in range(draws)])
        for side in sides
    )
    return float(np.quantile(canary / np.maximum(champion, 1e-9), 0.05))


def _p99_latency(ch: _Arm, ca: _Arm, limits: MonitorSettings) -> CanaryCheck:
    """Fails when the canary's p99 is over the ratio beyond the window's noise, and more
    than the slack over the champion's (a few ms on a fast model is no regression)."""
    most, slack = limits.canary_max_p99_ratio, limits.canary_p99_slack_ms
    ratio = ca.p99_ms / ch.p99_ms if ch.p99_ms > 0 else 1.0
    bound = _p99_ratio_bound(ch, ca)
    slower = bound > most and ca.p99_ms - ch.p99_ms > slack
    return CanaryCheck(
        "p99_latency_ms",
        ch.p99_ms,
        ca.p99_ms,
        f"canary <= {most} x champion (95 % bound) or <= champion + {slack:g} ms",
        not slower,
        f"ratio {ratio:.2f}, lower bound {bound:.2f}",
    )


def _p50_latency(ch: _Arm, ca: _Arm, limits: MonitorSettings) -> CanaryCheck:
    return CanaryCheck("p50_latency_ms", ch.p50_ms, ca.p50_ms, "-", None, "informational")


def _checks(
    ch: _Arm,
    ca: _Arm,
    limits: MonitorSettings,
    pairing: Pairing | None = None,
    why_unpaired: str = "no re-scored rows",
    task: TaskSpec | None = None,
) -> tuple[CanaryOutcome, list[CanaryCheck]]:
    """The checks and the verdict over them (see the module docstring)."""
    requests = _requests(ch, ca, limits)
    if not requests.passed:
        return "insufficient", [requests]
    operational = [check(ch, ca, limits) for check in (_error_rate, _p99_latency, _p50_latency)]
    labels = label_checks(pairing, limits.canary_min_labels, (ch, ca), task)
    models = [score_check(pairing, why_unpaired, task), *labels]
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
    if champion.task != canary.task:
        return None, (
            f"champion v{ch.version} is {champion.task.describe()} with classes "
            f"{list(champion.task.classes)}, canary v{ca.version} is {canary.task.describe()} "
            f"with classes {list(canary.task.classes)}: not paired"
        )
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
    given = rows["outcome_label"].to_numpy() if "outcome_label" in rows else None
    pairing = Pairing(
        champion.scores, canary.scores, champion.threshold, canary.threshold, codes, outcome,
        task=champion.task, outcome_label=given,
    )  # fmt: skip
    return pairing, ""


def _add_class_tables(
    result: CanaryAnalysis,
    arms: tuple[_Arm, _Arm],
    pairing: Pairing | None,
    task: TaskSpec,
    champion_task: TaskSpec,
) -> None:
    """A classifier's per-class tables (:mod:`._class_tables`), class names first: each arm's
    classes on its own rows and, where both versions re-scored the same rows, their
    agreement and confusion per class and (multiclass) probability deltas; a note instead
    where the two versions' classes differ."""
    ch, ca = arms
    if not task.is_classifier:
        return
    if (champion_task.task, champion_task.classes) != (task.task, task.classes):
        result.notes.append(
            f"per-class tables left out: champion v{ch.version} has classes "
            f"{list(champion_task.classes)}, canary v{ca.version} {list(task.classes)}"
        )
        return
    result.arm_classes = ct.arm_classes({"champion": ch.rows, "canary": ca.rows}, task)
    if pairing is not None:
        champion, canary = _predicted_classes(pairing)
        result.class_agreement, result.confusion = ct.agreement_tables(
            champion, canary, task, "canary"
        )
        result.probability_delta = ct.probability_deltas(pairing.champion, pairing.canary, task)


def _predicted_classes(pairing: Pairing) -> tuple[np.ndarray, np.ndarray]:
    """Both versions' predicted class indices on the paired rows."""
    if pairing.task.task == "multiclass":
        return pairing.champion.argmax(axis=1), pairing.canary.argmax(axis=1)
    champion, canary = pairing.flagged()
    return champion.astype(int), canary.astype(int)


def _arms(rows: pd.DataFrame, version: str | None) -> tuple[_Arm, _Arm]:
    """The champion version's and the canary version's rows (the newest of each by default)."""
    canary_version = version or _newest_version(rows, "canary")
    champion_version = _newest_version(rows, "champion")
    champion = rows[(rows["arm"] == "champion") & (rows["version"] == champion_version)]
    canary = rows[(rows["arm"] == "canary") & (rows["version"] == canary_version)]
    return _Arm.of(champion, champion_version), _Arm.of(canary, canary_version)


def left_out(rows: pd.DataFrame, arms: dict[str, str | None]) -> list[str]:
    """Per arm, how many of its rows in the window other versions than ``arms[arm]`` served."""
    notes = []
    for arm, version in arms.items():
        on_arm = rows["arm"] == arm
        other = int((on_arm & (rows["version"].astype(str) != str(version))).sum())
        if other:
            notes.append(f"{other} {arm} row(s) of other versions left out (v{version} only)")
    return notes


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
    task = pairing.task if pairing is not None else version_task(settings, model, canary.version)
    verdict, checks = _checks(champion, canary, settings.monitor, pairing, why, task)
    result = CanaryAnalysis(
        model, champion.version, canary.version, current.start, current.end, verdict,
        champion.requests, canary.requests, checks, paired=pairing is not None,
        notes=[why] if why else [], task=task.describe(),
    )  # fmt: skip
    champion_task = version_task(settings, model, champion.version) if champion.version else task
    _add_class_tables(result, (champion, canary), pairing, task, champion_task)
    versions = {"champion": champion.version, "canary": canary.version}
    result.notes += left_out(logged.rows, versions) + pruned_notes(settings, current)
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
