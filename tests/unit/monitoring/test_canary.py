"""The canary checks and the verdict over them, on arms and pairings built in memory.

A synthetic fraud population (2.5 % positives, customers repeating across
requests) is split into sticky arms by a salted hash of the customer, as the
router does; the scores of each version come from functions of the features.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from mlpipe.config import MonitorSettings
from mlpipe.monitoring._canary import Pairing, _Arm, _checks
from mlpipe.monitoring._paired import entity_codes

LIMITS = MonitorSettings()
CUSTOMERS = 3000


def _population(seed: int = 0) -> pd.DataFrame:
    """One row per customer: a risk logit (the good model's view) and a fraud tendency."""
    rng = np.random.default_rng(seed)
    risk = rng.normal(-4.6, 1.6, CUSTOMERS)
    return pd.DataFrame({"customer": np.arange(CUSTOMERS), "risk": risk})


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def _bucket(customer: int, salt: int) -> float:
    digest = hashlib.sha256(f"fraud:{salt}:customer_id={customer}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10_000 / 100


def _window(rows: int, split_seed: int, canary_pct: float = 20.0) -> pd.DataFrame:
    """``rows`` requests from repeat customers, each labelled, each with its sticky arm."""
    people = _population()
    rng = np.random.default_rng(split_seed)
    who = people.sample(rows, replace=True, random_state=split_seed).reset_index(drop=True)
    request_logit = who["risk"].to_numpy() + rng.normal(0, 0.5, rows)
    outcome = (rng.random(rows) < _sigmoid(request_logit)).astype(float)
    arm = ["canary" if _bucket(c, split_seed) < canary_pct else "champion" for c in who["customer"]]
    return pd.DataFrame(
        {
            "request_id": [f"r{split_seed}-{i}" for i in range(rows)],
            "arm": arm,
            "version": ["2" if a == "canary" else "1" for a in arm],
            "status": "ok",
            "latency_ms": 4.0,
            "entity_key": [f"customer_id={c}" for c in who["customer"]],
            "logit": request_logit,
            "outcome": outcome,
        }
    )


def _arms_and_pairing(
    frame: pd.DataFrame, canary_logit: np.ndarray | None = None
) -> tuple[_Arm, _Arm, Pairing]:
    """Champion scores = the good model; canary scores = ``canary_logit`` (default: the same)."""
    champion_score = _sigmoid(frame["logit"].to_numpy())
    canary_score = champion_score if canary_logit is None else _sigmoid(canary_logit)
    served = np.where(frame["arm"] == "canary", canary_score, champion_score)
    frame = frame.assign(score=served, label=(served >= 0.5).astype(int))
    ch = frame[frame["arm"] == "champion"]
    ca = frame[frame["arm"] == "canary"]
    ordered = pd.concat([ch, ca])
    pairing = Pairing(
        champion=_sigmoid(ordered["logit"].to_numpy()),
        canary=canary_score[ordered.index.to_numpy()],
        champion_threshold=0.5,
        canary_threshold=0.5,
        clusters=entity_codes(ordered["entity_key"], ordered["request_id"]),
        outcome=ordered["outcome"].to_numpy(),
    )
    return _Arm.of(ch, "1"), _Arm.of(ca, "2"), pairing


@pytest.mark.parametrize("rows", [100, 300, 1000])
def test_an_equally_good_canary_never_fails_over_50_sticky_splits(rows: int) -> None:
    verdicts = set()
    for split in range(50):
        champion, canary, pairing = _arms_and_pairing(_window(rows, split))
        verdict, checks = _checks(champion, canary, LIMITS, pairing)
        assert verdict != "fail", [c for c in checks if c.passed is False]
        verdicts.add(verdict)
    assert verdicts <= {"pass", "insufficient"}
    if rows >= 1000:  # enough canary requests (200 at a 20 % arm) for a verdict
        assert "pass" in verdicts


def test_a_retrained_equally_good_canary_passes_the_paired_score_test() -> None:
    frame = _window(1000, 7)
    noise = np.random.default_rng(1).normal(0, 0.15, len(frame))  # a reseeded retrain
    champion, canary, pairing = _arms_and_pairing(frame, frame["logit"].to_numpy() + noise)
    verdict, checks = _checks(champion, canary, LIMITS, pairing)
    by_name = {c.name: c for c in checks}
    assert by_name["paired_score"].passed is True
    assert verdict == "pass", [c for c in checks if c.passed is False]


def test_a_recalibrated_canary_that_orders_rows_alike_passes_the_paired_score_test() -> None:
    frame = _window(1000, 8)
    # Same ordering, other calibration (more trees, class weights): the label metrics judge it.
    champion, canary, pairing = _arms_and_pairing(frame, 2.0 * frame["logit"].to_numpy() + 1.5)
    verdict, checks = _checks(champion, canary, LIMITS, pairing)
    score = next(c for c in checks if c.name == "paired_score")
    assert score.passed is True and score.canary == pytest.approx(1.0)


@pytest.mark.parametrize("rows", [1000, 10_000])
def test_a_label_shuffled_canary_fails_on_label_metrics_and_the_paired_score_test(
    rows: int,
) -> None:
    frame = _window(rows, 3)
    # A model trained on shuffled labels: scores near the base rate, blind to the inputs.
    blind = np.log(0.025 / 0.975) + np.random.default_rng(2).normal(0, 0.3, len(frame))
    champion, canary, pairing = _arms_and_pairing(frame, blind)
    verdict, checks = _checks(champion, canary, LIMITS, pairing)
    failed = {c.name for c in checks if c.passed is False}
    assert verdict == "fail"
    assert {"paired_score", "auc"} <= failed
    auc = next(c for c in checks if c.name == "auc")
    assert auc.champion is not None and auc.champion > 0.8
    assert auc.canary is not None and abs(auc.canary - 0.5) < 0.1
    assert "paired, same rows" in auc.detail


def test_without_re_scored_rows_label_metrics_compare_the_arms_and_still_catch_a_blind_model() -> (
    None
):
    frame = _window(10_000, 4, canary_pct=50)
    blind = np.log(0.025 / 0.975) + np.random.default_rng(2).normal(0, 0.3, len(frame))
    champion, canary, _ = _arms_and_pairing(frame, blind)
    verdict, checks = _checks(champion, canary, LIMITS, None, "not re-scored: because")
    by_name = {c.name: c for c in checks}
    assert by_name["paired_score"].passed is None
    assert by_name["paired_score"].detail == "not re-scored: because"
    assert verdict == "fail" and by_name["auc"].passed is False
    assert "arms' own rows" in by_name["auc"].detail


def test_without_labels_or_pairing_the_verdict_is_insufficient() -> None:
    frame = _window(2000, 5).assign(outcome=np.nan)
    champion, canary, _ = _arms_and_pairing(frame)
    verdict, checks = _checks(champion, canary, LIMITS, None, "not re-scored: because")
    assert verdict == "insufficient"
    auc = next(c for c in checks if c.name == "auc")
    assert auc.passed is None and "0 labelled row(s)" in auc.detail


def test_too_few_requests_is_insufficient_and_checks_nothing_else() -> None:
    champion, canary, pairing = _arms_and_pairing(_window(100, 1))
    verdict, checks = _checks(champion, canary, LIMITS, pairing)
    assert verdict == "insufficient"
    assert [(c.name, c.passed) for c in checks] == [("requests", False)]


def test_errors_and_latency_fail_the_canary() -> None:
    frame = _window(2000, 6)
    bad = frame["arm"] == "canary"
    frame.loc[bad, "latency_ms"] = 60.0  # 56 ms over the champion's 4: past the slack
    frame.loc[frame.index[bad][:40], "status"] = "error"
    champion, canary, pairing = _arms_and_pairing(frame)
    verdict, checks = _checks(champion, canary, LIMITS, pairing)
    assert verdict == "fail"
    assert [c.name for c in checks if c.passed is False] == ["error_rate", "p99_latency_ms"]
    assert [c.name for c in checks] == [
        "requests", "error_rate", "p99_latency_ms", "p50_latency_ms",
        "paired_score", "auc", "recall", "precision", "log_loss",
    ]  # fmt: skip


def _busy(n: int, rng: np.random.Generator, slower: float = 1.0) -> np.ndarray:
    """Latencies on a busy machine: a few ms, and one request in 100 stalled 20-400 ms longer
    (the p99 sits where the stalls begin: the most chancy place)."""
    base = rng.gamma(4.0, 1.0, n)
    stalled = rng.random(n) < 0.01
    return np.where(stalled, base + rng.uniform(20, 400, n), base) * slower


def _p99_check(frame: pd.DataFrame) -> bool | None:
    champion, canary, pairing = _arms_and_pairing(frame)
    _, checks = _checks(champion, canary, LIMITS, pairing)
    return next(c for c in checks if c.name == "p99_latency_ms").passed


def test_equally_fast_models_on_a_busy_machine_pass_the_latency_check() -> None:
    """Stalls hit both arms alike; which arm's few slowest requests land in its top 1 % is
    chance, and a p99 over a few hundred requests is one or two of them."""
    failed = []
    for seed in range(30):
        frame = _window(1500, seed)
        frame["latency_ms"] = _busy(len(frame), np.random.default_rng(seed))
        if _p99_check(frame) is False:
            failed.append(seed)
    assert failed == []


@pytest.mark.parametrize(
    ("why", "latency"),
    [
        ("60 ms more on each request", lambda n, rng, slow: rng.gamma(4.0, 1.0, n) + 60 * slow),
        ("ten times slower", lambda n, rng, slow: rng.gamma(4.0, 1.0, n) * (1 + 9 * slow)),
    ],
)
def test_a_canary_slower_beyond_the_noise_fails_the_latency_check(why: str, latency) -> None:  # type: ignore[no-untyped-def]
    for seed in range(10):
        frame = _window(1500, seed)
        slow = (frame["arm"] == "canary").to_numpy()
        frame["latency_ms"] = latency(len(frame), np.random.default_rng(seed), slow)
        assert _p99_check(frame) is False, (why, seed)
