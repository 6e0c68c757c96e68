"""Shadow vs champion on the same requests, on frames built in memory."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mlpipe.monitoring._shadow import _disagreements, _figures, pair_shadow, shadow_checks


def _rows(n: int, shadow_logit_noise: float | None, seed: int = 0) -> pd.DataFrame:
    """Champion answers for ``n`` requests and a shadow answer for each (None: same model)."""
    rng = np.random.default_rng(seed)
    logit = rng.normal(-3.5, 1.5, n)
    outcome = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    shadow_logit = logit if shadow_logit_noise is None else rng.normal(-3.5, shadow_logit_noise, n)
    frames = []
    for arm, version, z, latency in (
        ("champion", "1", logit, 4.0),
        ("shadow", "2", shadow_logit, 9.0),
    ):
        score = 1 / (1 + np.exp(-z))
        frames.append(
            pd.DataFrame(
                {
                    "request_id": [f"r{i}" for i in range(n)], "tenant": "t",
                    "ts": pd.Timestamp("2026-01-01") + pd.to_timedelta(np.arange(n), unit="s"),
                    "arm": arm, "version": version, "score": score,
                    "label": (score >= 0.5).astype(int), "latency_ms": latency, "status": "ok",
                    "outcome": outcome, "entity_key": [f"customer_id={i % 150}" for i in range(n)],
                }
            )
        )  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def test_the_same_model_in_shadow_agrees_everywhere_and_passes() -> None:
    paired, unpaired, *_ = pair_shadow(_rows(3000, None), None)
    assert len(paired) == 3000 and unpaired == 0
    verdict, checks = shadow_checks(paired, 200, 100)
    assert verdict == "pass", [c for c in checks if c.passed is False]
    agreement, spread, latency = _figures(paired)
    assert agreement == 1.0 and spread["max_abs"] == 0.0
    assert latency == {
        "champion_p50": 4.0,
        "champion_p99": 4.0,
        "shadow_p50": 9.0,
        "shadow_p99": 9.0,
    }


def test_a_blind_shadow_fails_and_names_the_requests_it_disagrees_on_most() -> None:
    paired, *_ = pair_shadow(_rows(3000, 0.3), None)
    verdict, checks = shadow_checks(paired, 200, 100)
    failed = {c.name for c in checks if c.passed is False}
    assert verdict == "fail" and {"paired_score", "auc"} <= failed
    top = _disagreements(paired, 3)
    deltas = (paired["score_sh"] - paired["score_ch"]).abs()
    assert [d.request_id for d in top] == list(paired.loc[deltas.nlargest(3).index, "request_id"])
    assert abs(top[0].delta) == deltas.max()


def test_two_tenants_sending_the_same_ids_pair_each_with_its_own_answers() -> None:
    """Request ids are the clients': a pair is a (tenant, request id), never across tenants."""
    a, b = _rows(200, None, seed=0), _rows(200, None, seed=1)  # same ids, other answers
    rows = pd.concat([a, b.assign(tenant="other")], ignore_index=True)
    paired, unpaired, *_ = pair_shadow(rows, None)
    assert len(paired) == 400 and unpaired == 0
    assert (paired["score_sh"] == paired["score_ch"]).all()  # each shadow met its own champion
    assert sorted(paired.groupby("tenant").size().tolist()) == [200, 200]


def test_only_the_asked_shadow_version_pairs_and_too_few_is_insufficient() -> None:
    rows = _rows(300, None)
    rows.loc[(rows["arm"] == "shadow") & (rows.index % 2 == 0), "version"] = "3"
    paired, unpaired, *_ = pair_shadow(rows, "3")
    assert set(paired["version_sh"]) == {"3"} and len(paired) == 150 and unpaired == 0
    verdict, checks = shadow_checks(paired, 200, 100)
    assert verdict == "insufficient" and [(c.name, c.passed) for c in checks] == [
        ("requests", False)
    ]


def _regression_rows(n: int, shadow_bias: float) -> pd.DataFrame:
    """A regressor's answers and a shadow's (the same predictions + ``shadow_bias``)."""
    rng = np.random.default_rng(1)
    value = rng.normal(50, 10, n)
    outcome = value + rng.normal(0, 1, n)
    frames = [
        pd.DataFrame(
            {
                "request_id": [f"r{i}" for i in range(n)], "tenant": "t",
                "ts": pd.Timestamp("2026-01-01") + pd.to_timedelta(np.arange(n), unit="s"),
                "arm": arm, "version": version, "score": value + bias, "label": None,
                "probabilities": None, "latency_ms": 4.0, "status": "ok", "outcome": outcome,
                "outcome_label": None, "entity_key": [f"customer_id={i % 150}" for i in range(n)],
            }
        )
        for arm, version, bias in (("champion", "1", 0.0), ("shadow", "2", shadow_bias))
    ]  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def test_a_biased_regression_shadow_fails_on_bias_and_has_no_label_agreement() -> None:
    from mlpipe.tasks import TaskSpec

    task = TaskSpec("regression")
    paired, *_ = pair_shadow(_regression_rows(1000, 1.0), None)
    verdict, checks = shadow_checks(paired, 200, 100, task)
    by_name = {c.name: c for c in checks}
    assert verdict == "fail" and by_name["bias"].passed is False
    assert by_name["paired_score"].passed is True
    agreement, spread, _ = _figures(paired, task)
    assert np.isnan(agreement)
    assert spread["mean_abs"] == pytest.approx(1.0) and spread["max_abs"] == pytest.approx(1.0)
    (top,) = _disagreements(paired, 1, task)
    assert top.champion_label is None and top.probability_delta is None
    same, *_ = pair_shadow(_regression_rows(1000, 0.0), None)
    assert shadow_checks(same, 200, 100, task)[0] == "pass"
