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
a check fails; pass otherwise. Per task (:mod:`._model_checks`): a classifier's
predicted classes are named by the version's classes (``setosa``, not ``0``),
and its outcomes read from the label text loaded (``outcome_label``), so a
named class is an outcome, not a NaN. A multiclass pair is compared on its
logged class probabilities: agreement per class, the confusion table of the two
versions' predicted classes, and the probability delta of each class (never one
"score delta" between the probabilities of different classes); a regression
pair on its predicted values (no label agreement: a regression has no labels).
One version per side: the shadow version asked for (default the newest) and the
champion version that answered the newest of its requests; rows of other
versions (a promote or rollback inside the window) are left out and counted in
``notes`` (:func:`pair_shadow`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.monitoring import _class_tables as ct
from mlpipe.monitoring import _paired
from mlpipe.monitoring import _task_metrics as tm
from mlpipe.monitoring._canary import EXIT_CODES, CanaryOutcome
from mlpipe.monitoring._model_checks import CanaryCheck, Pairing, label_checks, score_check
from mlpipe.monitoring._quality import version_task
from mlpipe.monitoring._reports import (
    pruned_notes,
    publish_versus_champion,
    read_logged,
    with_entity_keys,
)
from mlpipe.tasks import ClassLabel, TaskSpec
from mlpipe.windows import window_ending

if TYPE_CHECKING:
    import pandas as pd

TOP_DISAGREEMENTS = 10


@dataclass(frozen=True)
class Disagreement:
    """One request the two versions scored far apart."""

    request_id: str
    entity_key: str
    champion_score: float
    shadow_score: float
    delta: float  # shadow − champion
    champion_label: ClassLabel | None  # the predicted class's name; None: a regression
    shadow_label: ClassLabel | None
    outcome: float | str | None  # a multiclass outcome: the label as loaded
    probability_delta: float | None = None  # multiclass: the largest |shadow − champion|
    delta_class: str | None = None  # multiclass: the class of that delta (the scores are its)


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
    label_agreement: float  # NaN for a regression (no labels)
    score_delta: dict[str, float] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    checks: list[CanaryCheck] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    report_path: str | None = None
    html_path: str | None = None
    task: str = "binary"
    # paired requests whose outcome arrived and names a class of the version (regression: a number)
    labelled_requests: int = 0
    # classifiers: per class, how often each version predicts it and the shadow agrees
    class_agreement: list[dict[str, Any]] = field(default_factory=list)
    # classifiers: champion's predicted class (rows) against the shadow's (columns), counts
    confusion: list[dict[str, Any]] = field(default_factory=list)
    # multiclass: per class, the spread of shadow − champion probability of that class
    probability_delta: list[dict[str, Any]] = field(default_factory=list)
    # rows of other versions left out (one shadow version against one champion version)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        """The analysis as JSON data; each check's candidate figure is named ``shadow``."""
        data = asdict(self)
        data["checks"] = [
            {("shadow" if k == "canary" else k): v for k, v in c.items()} for c in data["checks"]
        ]
        return {**data, "exit_code": self.exit_code}


class ShadowPairs(NamedTuple):
    """The paired rows of one shadow version and one champion version, and what was left out."""

    paired: pd.DataFrame  # columns suffixed _ch (champion) and _sh (shadow)
    unpaired: int  # shadow rows of the version with no champion answer in the window
    notes: list[str]  # rows of other versions left out, counted
    version: str | None  # the shadow version paired


def pair_shadow(rows: pd.DataFrame, version: str | None) -> ShadowPairs:
    """Shadow rows of ``version`` (default: the newest) joined to the champion's answers.

    One version on each side: the shadow ``version``, and the champion version
    that answered the newest of its paired requests (after a promote or a
    rollback the champion arm served another version before). Rows of other
    versions are left out and counted in ``notes``. A request is a (request id,
    tenant): request ids are the clients', and two tenants may send the same one.
    """
    on_arm = rows[rows["arm"] == "shadow"]
    if version is None and len(on_arm):
        version = str(on_arm.sort_values("ts")["version"].iloc[-1])
    shadow = on_arm[on_arm["version"].astype(str) == str(version)]
    notes = []
    if other := len(on_arm) - len(shadow):
        notes.append(f"{other} shadow row(s) of other versions left out (v{version} only)")
    champion = rows[rows["arm"] == "champion"]
    paired = champion.merge(shadow, on=["request_id", "tenant"], suffixes=("_ch", "_sh"))
    unpaired = len(shadow) - len(paired)
    if len(paired):
        newest = str(paired.sort_values("ts_ch")["version_ch"].iloc[-1])
        same = paired["version_ch"].astype(str) == newest
        if other := int((~same).sum()):
            notes.append(
                f"{other} paired request(s) the champion answered with other versions left "
                f"out (champion v{newest} only)"
            )
        paired = paired[same]
    return ShadowPairs(paired.reset_index(drop=True), unpaired, notes, version)


def _outputs(paired: pd.DataFrame, side: str, task: TaskSpec) -> np.ndarray:
    """One side's logged outputs: class probabilities (multiclass) or scores."""
    if task.task == "multiclass":
        return tm.stacked(paired[f"probabilities_{side}"].to_numpy())
    scores: np.ndarray = paired[f"score_{side}"].to_numpy(dtype=float)
    return scores


def _pairing(paired: pd.DataFrame, task: TaskSpec | None = None) -> Pairing:
    task = task or TaskSpec()
    codes = _paired.entity_codes(paired["entity_key_ch"], paired["request_id"])
    given = paired["outcome_label_ch"].to_numpy() if "outcome_label_ch" in paired else None
    return Pairing(
        champion=_outputs(paired, "ch", task),
        canary=_outputs(paired, "sh", task),
        champion_threshold=math.nan,
        canary_threshold=math.nan,
        clusters=codes,
        outcome=paired["outcome_ch"].to_numpy(dtype=float),
        champion_flagged=paired["label_ch"].to_numpy() == 1,
        canary_flagged=paired["label_sh"].to_numpy() == 1,
        task=task,
        outcome_label=given,
    )


def _figures(
    paired: pd.DataFrame, task: TaskSpec | None = None
) -> tuple[float, dict[str, float], dict[str, float]]:
    """Label agreement (NaN for a regression), the score-delta distribution and both sides'
    latency."""
    if not len(paired):
        return math.nan, {}, {}
    task = task or TaskSpec()
    # a multiclass score is the probability of whichever class each side predicted: its
    # difference compares different classes, so the deltas are per class (_class_deltas)
    spread = {} if task.task == "multiclass" else ct.spread(paired["score_sh"] - paired["score_ch"])
    latency = {
        f"{side}_{name}": float(paired[f"latency_ms_{suffix}"].quantile(q))
        for side, suffix in (("champion", "ch"), ("shadow", "sh"))
        for name, q in (("p50", 0.5), ("p99", 0.99))
    }
    if task.task == "regression":
        return math.nan, spread, latency
    agreement = float((paired["label_ch"] == paired["label_sh"]).mean())
    return agreement, spread, latency


def _class_deltas(paired: pd.DataFrame, task: TaskSpec) -> list[dict[str, Any]]:
    """Multiclass: per class, the spread of shadow − champion probability of that class."""
    if task.task != "multiclass" or not len(paired):
        return []
    return ct.probability_deltas(_outputs(paired, "ch", task), _outputs(paired, "sh", task), task)


def _class_tables(
    paired: pd.DataFrame, task: TaskSpec
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Classifiers: agreement per class and the confusion table of the predicted classes
    (:func:`._class_tables.agreement_tables`)."""
    if not task.is_classifier or not len(paired):
        return [], []
    ch, sh = _predicted(paired, "ch", task), _predicted(paired, "sh", task)
    return ct.agreement_tables(ch, sh, task, "shadow")


def _predicted(paired: pd.DataFrame, side: str, task: TaskSpec) -> np.ndarray:
    """One side's predicted class indices (multiclass: argmax of its probabilities)."""
    if task.task == "multiclass":
        return np.asarray(_outputs(paired, side, task).argmax(axis=1))
    labels: np.ndarray = paired[f"label_{side}"].to_numpy(dtype=int)
    return labels


def _labelled(paired: pd.DataFrame, task: TaskSpec) -> int:
    """Paired requests whose outcome arrived and reads as the task reads it."""
    given = paired["outcome_label_ch"].to_numpy() if "outcome_label_ch" in paired else None
    outcome = paired["outcome_ch"].to_numpy(dtype=float)
    return int(tm.task_outcomes(task, outcome, given).labelled.sum())


def _label(value: Any, task: TaskSpec) -> ClassLabel | None:
    """A logged label as its class (None or NaN for a regression's rows)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    index = int(value)
    return task.classes[index] if 0 <= index < len(task.classes) else index


def _outcome(row: Any, task: TaskSpec) -> float | str | None:
    """A request's outcome: a multiclass label as loaded (a class name), else its number."""
    text = getattr(row, "outcome_label_ch", None)
    number = float(row.outcome_ch)
    if task.task == "multiclass" and text is not None and text == text:
        return str(text)
    if math.isnan(number):
        return None if text is None or text != text else str(text)
    return number


def _disagreements(
    paired: pd.DataFrame, top: int, task: TaskSpec | None = None
) -> list[Disagreement]:
    """The ``top`` requests scored furthest apart (multiclass: by class probabilities, each
    shown on the class whose probability moved most)."""
    import pandas as pd

    task = task or TaskSpec()
    champion = paired["score_ch"].to_numpy(dtype=float)
    shadow = paired["score_sh"].to_numpy(dtype=float)
    moved: np.ndarray | None = None
    if task.task == "multiclass" and len(paired):
        ch, sh = _outputs(paired, "ch", task), _outputs(paired, "sh", task)
        moved = np.abs(sh - ch).argmax(axis=1)
        rows = np.arange(len(paired))
        champion, shadow = ch[rows, moved], sh[rows, moved]
    distance = pd.Series(np.abs(shadow - champion), index=paired.index)
    order = distance.sort_values(ascending=False, kind="stable").index[:top]
    return [
        Disagreement(
            request_id=str(r.request_id),
            entity_key=str(r.entity_key_ch),
            champion_score=float(champion[i]),
            shadow_score=float(shadow[i]),
            delta=float(shadow[i] - champion[i]),
            champion_label=_label(r.label_ch, task),
            shadow_label=_label(r.label_sh, task),
            outcome=_outcome(r, task),
            probability_delta=None if moved is None else float(distance[i]),
            delta_class=None if moved is None else str(task.classes[moved[i]]),
        )
        for i, r in zip(order, paired.loc[order].itertuples(), strict=True)
    ]


def shadow_checks(
    paired: pd.DataFrame, least_requests: int, least_labels: int, task: TaskSpec | None = None
) -> tuple[CanaryOutcome, list[CanaryCheck]]:
    """The checks on the paired rows and the verdict over them."""
    n = len(paired)
    requests = CanaryCheck("requests", n, n, f">= {least_requests} paired", n >= least_requests)
    if not requests.passed:
        return "insufficient", [requests]
    pairing = _pairing(paired, task)
    models = [
        _as_shadow(c) for c in (score_check(pairing, ""), *label_checks(pairing, least_labels))
    ]
    checks = [requests, *models]
    if any(c.passed is False for c in checks):
        return "fail", checks
    return ("insufficient" if all(c.passed is None for c in models) else "pass"), checks


def _as_shadow(check: CanaryCheck) -> CanaryCheck:
    """A check's wording with the candidate named as what it is here: the shadow."""
    return replace(check, threshold=check.threshold.replace("canary", "shadow"))


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
    paired, unpaired, left_out, version = pair_shadow(with_entity_keys(logged), version)
    limits = settings.monitor
    champion = str(paired["version_ch"].iloc[0]) if len(paired) else None
    task = version_task(settings, model, version)
    verdict, checks = shadow_checks(
        paired, limits.canary_min_requests, limits.canary_min_labels, task
    )
    agreement, spread, latency = _figures(paired, task)
    per_class, confusion = _class_tables(paired, task)
    result = ShadowAnalysis(
        model, champion, version, current.start, current.end, verdict,
        len(paired), unpaired, agreement, spread, latency, checks,
        _disagreements(paired, top, task), task=task.describe(),
        labelled_requests=_labelled(paired, task) if len(paired) else 0,
        class_agreement=per_class, confusion=confusion,
        probability_delta=_class_deltas(paired, task),
        notes=left_out + pruned_notes(settings, current),
    )  # fmt: skip
    publish_versus_champion(
        settings, "shadow", current, model, result.shadow_version, result, notify
    )
    return result
