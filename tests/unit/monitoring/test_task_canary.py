"""Canary checks of multiclass and regression versions, on arms and pairings built in memory.

An iris-like population (3 classes named by text, customers repeating across
requests) and a regression population (a value per request) are split into
sticky arms by a salted hash of the customer, as the router does. The champion
is a good model; a clean canary is another good model (retrained: its own small
errors); a broken canary shuffles its predictions over the rows, or (regression)
adds a bias. ``simulate`` is also what the figures in docs/canary.md come from.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from mlpipe.config import MonitorSettings
from mlpipe.monitoring import _task_metrics as tm
from mlpipe.monitoring._canary import CanaryCheck, Pairing, _Arm, _checks
from mlpipe.monitoring._paired import entity_codes, label_test
from mlpipe.tasks import TaskSpec

LIMITS = MonitorSettings()
CUSTOMERS = 2000
IRIS = TaskSpec("multiclass", ("setosa", "versicolor", "virginica"))
REGRESSION = TaskSpec("regression")


def _bucket(customer: int, salt: int) -> float:
    digest = hashlib.sha256(f"m:{salt}:customer_id={customer}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10_000 / 100


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def _requests(rows: int, seed: int, canary_pct: float = 20.0) -> pd.DataFrame:
    """``rows`` requests of repeat customers, each with its sticky arm."""
    rng = np.random.default_rng(seed)
    who = rng.integers(0, CUSTOMERS, rows)
    arm = ["canary" if _bucket(int(c), seed) < canary_pct else "champion" for c in who]
    return pd.DataFrame(
        {
            "request_id": [f"r{seed}-{i}" for i in range(rows)],
            "arm": arm,
            "version": ["2" if a == "canary" else "1" for a in arm],
            "status": "ok",
            "latency_ms": 4.0,
            "entity_key": [f"customer_id={c}" for c in who],
            "customer": who,
        }
    )


def multiclass_window(rows: int, seed: int, canary: str = "clean") -> tuple[_Arm, _Arm, Pairing]:
    """Class logits per request from its customer; the champion sees them with some noise,
    a clean canary with its own noise; ``canary``: clean, shuffled, majority (favours the
    first class by 2 in logit) or leaning (by 0.7)."""
    frame = _requests(rows, seed)
    rng = np.random.default_rng(seed + 1)
    people = np.random.default_rng(0).normal(0, 1.5, (CUSTOMERS, 3))
    logits = people[frame["customer"].to_numpy()] + rng.normal(0, 0.7, (rows, 3))
    truth = np.array([rng.choice(3, p=p) for p in _softmax(logits)])
    champion = _softmax(logits + rng.normal(0, 0.3, (rows, 3)))
    other = _softmax(logits + rng.normal(0, 0.3, (rows, 3)))
    if canary == "shuffled":
        other = other[rng.permutation(rows)]
    elif canary in ("majority", "leaning"):
        lean = 2.0 if canary == "majority" else 0.7
        other = _softmax(np.log(other) + np.array([lean, 0.0, 0.0]))
    names = np.array(IRIS.classes, dtype=object)
    frame = frame.assign(outcome=np.nan, outcome_label=names[truth])
    return _arms_and_pairing(frame, champion, other, IRIS)


def regression_window(rows: int, seed: int, canary: str = "clean") -> tuple[_Arm, _Arm, Pairing]:
    """A value per request; the champion predicts it with error sd 1, a clean canary with its
    own error sd 1; ``canary``: clean, shuffled, biased (+1, the error's sd) or slightly
    biased (+0.3)."""
    frame = _requests(rows, seed)
    rng = np.random.default_rng(seed + 1)
    people = np.random.default_rng(0).normal(50, 10, CUSTOMERS)
    signal = people[frame["customer"].to_numpy()] + rng.normal(0, 5, rows)
    truth = signal + rng.normal(0, 1, rows)
    champion = signal + rng.normal(0, 0.3, rows)
    other = signal + rng.normal(0, 0.3, rows)
    if canary == "shuffled":
        other = other[rng.permutation(rows)]
    elif canary in ("biased", "slightly"):
        other = other + (1.0 if canary == "biased" else 0.3)
    frame = frame.assign(outcome=truth, outcome_label=None)
    return _arms_and_pairing(frame, champion, other, REGRESSION)


def _arms_and_pairing(
    frame: pd.DataFrame, champion: np.ndarray, canary: np.ndarray, task: TaskSpec
) -> tuple[_Arm, _Arm, Pairing]:
    on_canary = (frame["arm"] == "canary").to_numpy()
    served = np.where(on_canary[:, None] if champion.ndim == 2 else on_canary, canary, champion)
    if task.task == "multiclass":
        frame = frame.assign(
            score=served.max(axis=1),
            label=served.argmax(axis=1),
            probabilities=[list(p) for p in served],
        )
    else:
        frame = frame.assign(score=served, label=None, probabilities=None)
    ch, ca = frame[~on_canary], frame[on_canary]
    order = np.r_[np.flatnonzero(~on_canary), np.flatnonzero(on_canary)]
    ordered = frame.iloc[order]
    pairing = Pairing(
        champion=champion[order],
        canary=canary[order],
        champion_threshold=0.5,
        canary_threshold=0.5,
        clusters=entity_codes(ordered["entity_key"], ordered["request_id"]),
        outcome=ordered["outcome"].to_numpy(dtype=float),
        task=task,
        outcome_label=ordered["outcome_label"].to_numpy(),
    )
    return _Arm.of(ch, "1"), _Arm.of(ca, "2"), pairing


WINDOWS = {"multiclass": multiclass_window, "regression": regression_window}


def _by_name(checks: list[CanaryCheck]) -> dict[str, CanaryCheck]:
    return {c.name: c for c in checks}


def simulate(task: str, rows: int, canary: str, seeds: range, paired: bool = True) -> float:
    """The share of windows whose verdict is fail."""
    fails = 0
    for seed in seeds:
        ch, ca, pairing = WINDOWS[task](rows, seed, canary)
        verdict, _ = _checks(ch, ca, LIMITS, pairing if paired else None, "", pairing.task)
        fails += verdict == "fail"
    return fails / len(seeds)


@pytest.mark.parametrize("task", ["multiclass", "regression"])
@pytest.mark.parametrize("rows", [1500, 6000])
def test_a_clean_canary_passes_at_a_small_and_a_large_window(task: str, rows: int) -> None:
    for seed in range(5):
        ch, ca, pairing = WINDOWS[task](rows, seed)
        verdict, checks = _checks(ch, ca, LIMITS, pairing, "", pairing.task)
        assert verdict == "pass", [c for c in checks if c.passed is False]


@pytest.mark.parametrize("task", ["multiclass", "regression"])
@pytest.mark.parametrize("rows", [1500, 6000])
def test_a_shuffled_canary_fails_paired_and_on_its_metrics(task: str, rows: int) -> None:
    ch, ca, pairing = WINDOWS[task](rows, 3, "shuffled")
    verdict, checks = _checks(ch, ca, LIMITS, pairing, "", pairing.task)
    by_name = _by_name(checks)
    assert verdict == "fail"
    paired_test = "paired_classes" if task == "multiclass" else "paired_score"
    assert by_name[paired_test].passed is False
    worse = {"multiclass": "accuracy", "regression": "mae"}[task]
    assert by_name[worse].passed is False


def test_multiclass_checks_are_accuracy_macro_f1_log_loss_and_kappa() -> None:
    ch, ca, pairing = multiclass_window(1000, 1)
    _, checks = _checks(ch, ca, LIMITS, pairing, "", pairing.task)
    assert [c.name for c in checks][4:] == ["paired_classes", "accuracy", "macro_f1", "log_loss"]
    assert "kappa" in _by_name(checks)["paired_classes"].threshold


def test_a_canary_favouring_one_class_fails_on_its_metrics() -> None:
    ch, ca, pairing = multiclass_window(4000, 2, "majority")
    verdict, checks = _checks(ch, ca, LIMITS, pairing, "", pairing.task)
    assert verdict == "fail"
    assert _by_name(checks)["macro_f1"].passed is False


def test_a_biased_regression_canary_fails_on_bias_though_it_orders_rows_alike() -> None:
    ch, ca, pairing = regression_window(4000, 2, "biased")
    verdict, checks = _checks(ch, ca, LIMITS, pairing, "", pairing.task)
    by_name = _by_name(checks)
    assert verdict == "fail"
    assert by_name["paired_score"].passed is True
    assert by_name["bias"].passed is False
    assert "|canary| - |champion|" in by_name["bias"].threshold


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_without_re_scoring_the_arms_own_rows_still_catch_a_shuffled_canary(task: str) -> None:
    ch, ca, pairing = WINDOWS[task](4000, 4, "shuffled")
    verdict, checks = _checks(ch, ca, LIMITS, None, "not re-scored", pairing.task)
    assert verdict == "fail"
    assert "arms' own rows" in checks[-1].detail
    ch, ca, pairing = WINDOWS[task](4000, 4)
    assert _checks(ch, ca, LIMITS, None, "not re-scored", pairing.task)[0] == "pass"


def test_labels_that_name_no_class_are_counted_not_crashed_on() -> None:
    ch, ca, pairing = multiclass_window(1500, 5)
    labels = pairing.outcome_label
    assert labels is not None
    labels = labels.copy()
    labels[:25] = "rose"
    odd = Pairing(**{**pairing.__dict__, "outcome_label": labels})
    verdict, checks = _checks(ch, ca, LIMITS, odd, "", IRIS)
    assert verdict == "pass"
    assert "25 outcome label(s) name no class of the version: left out" in checks[-1].detail


def test_too_few_labels_is_insufficient_not_a_verdict_on_metrics() -> None:
    ch, ca, pairing = regression_window(1500, 6)
    unlabelled = Pairing(**{**pairing.__dict__, "outcome": np.full(len(pairing.outcome), np.nan)})
    _, checks = _checks(ch, ca, LIMITS, unlabelled, "", REGRESSION)
    by_name = _by_name(checks)
    assert by_name["mae"].passed is None
    assert by_name["mae"].detail.startswith("0 labelled row(s): needs >= ")
    assert by_name["paired_score"].passed is True


def test_metrics_agree_with_scikit_learn() -> None:
    from sklearn.metrics import (
        accuracy_score,
        f1_score,
        log_loss,
        mean_absolute_error,
        root_mean_squared_error,
    )

    rng = np.random.default_rng(0)
    probs, y = rng.dirichlet([1, 1, 1], 300), rng.integers(0, 3, 300)
    got = tm.point_metrics("multiclass", tm.Labelled(probs, y, np.arange(300)))
    assert got["accuracy"] == pytest.approx(accuracy_score(y, probs.argmax(axis=1)))
    assert got["macro_f1"] == pytest.approx(f1_score(y, probs.argmax(axis=1), average="macro"))
    assert got["log_loss"] == pytest.approx(log_loss(y, probs, labels=[0, 1, 2]))
    value, truth = rng.normal(size=300), rng.normal(size=300)
    got = tm.point_metrics("regression", tm.Labelled(value, truth, np.arange(300)))
    assert got["mae"] == pytest.approx(mean_absolute_error(truth, value))
    assert got["rmse"] == pytest.approx(root_mean_squared_error(truth, value))
    assert got["bias"] == pytest.approx(float(np.mean(value - truth)))


def test_class_labels_map_by_name_number_or_text() -> None:
    numbered = TaskSpec("multiclass", (0, 1, 2))
    truth = tm.task_outcomes(
        numbered, np.array([2.0, np.nan, np.nan, 7.0]), np.array(["2", "1.0", None, "7"])
    )
    assert truth.y[:2].tolist() == [2.0, 1.0]
    assert np.isnan(truth.y[2:]).all() and truth.unusable == 1
    named = tm.task_outcomes(IRIS, np.array([np.nan, np.nan]), np.array(["setosa", " virginica"]))
    assert named.y.tolist() == [0.0, 2.0]


def test_kappa_of_one_model_with_itself_is_one_and_never_fails() -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, 500)
    t = label_test(labels, labels, rng.integers(0, 100, 500))
    assert (t.kappa, t.passed) == (1.0, True)
