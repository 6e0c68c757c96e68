"""Two versions on the same rows: ranks and entities, the paired score and label tests, the
re-scoring of logged features and whether it reproduces the served scores (the canary
analyses on top are in test_canary.py and test_task_canary.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlpipe.config import Settings
from mlpipe.monitoring._paired import (
    MIN_ENTITIES,
    entity_codes,
    label_test,
    percentile_ranks,
    reproduced,
    rescore,
    score_test,
    served_scores,
)
from mlpipe.registry import client, tag_names
from mlpipe.registry._lineage import tree_sha256


def test_percentile_ranks_share_ties_and_end_at_one() -> None:
    assert percentile_ranks(np.array([0.3, 0.1, 0.3, 0.9])).tolist() == [0.625, 0.25, 0.625, 1.0]
    assert percentile_ranks(np.array([])).tolist() == []


def test_a_row_without_an_entity_key_is_its_own_entity() -> None:
    keys = pd.Series(["customer_id=1", None, "", "customer_id=1", "customer_id=2"])
    ids = pd.Series(["r1", "r2", "r3", "r4", "r5"])
    codes = entity_codes(keys, ids)
    assert codes[0] == codes[3]
    assert len(set(codes.tolist())) == 4


def _rows(entities: int, per_entity: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random(entities * per_entity), np.repeat(np.arange(entities), per_entity)


def test_one_model_on_both_sides_agrees_exactly_and_passes() -> None:
    scores, clusters = _rows(MIN_ENTITIES)
    test = score_test(scores, scores.copy(), clusters)
    assert (test.entities, test.spearman, test.upper_bound, test.median_abs) == (20, 1.0, 1.0, 0.0)
    assert test.passed is True
    assert test.detail == (
        "20 entities: Spearman 1.000 (upper 99% bound 1.000); median |rank delta| per entity 0.000"
    )


def test_a_model_that_orders_rows_otherwise_fails() -> None:
    scores, clusters = _rows(60)
    reversed_ = score_test(scores, 1 - scores, clusters)
    assert reversed_.spearman == pytest.approx(-1.0) and reversed_.passed is False
    unrelated = score_test(scores, _rows(60, seed=1)[0], clusters)
    assert unrelated.passed is False and unrelated.upper_bound < 0.5  # type: ignore[operator]


@pytest.mark.parametrize("entities", [30, 200])
def test_a_model_scoring_every_row_alike_orders_nothing(entities: int) -> None:
    # its ranks' variance is rounding error, not 0: it must not divide a draw by ~0
    scores, clusters = _rows(entities)
    flat = score_test(scores, np.full(len(scores), 0.5), clusters)
    assert flat.passed is False
    assert flat.spearman == 0.0 and flat.upper_bound == 0.0


def test_too_few_entities_is_no_verdict() -> None:
    scores, clusters = _rows(MIN_ENTITIES - 1, per_entity=10)
    test = score_test(scores, 1 - scores, clusters)
    assert (test.passed, test.upper_bound) == (None, None)
    assert test.detail == "19 entities < 20: not evaluated"


def test_label_test_is_kappa_not_agreement() -> None:
    clusters = np.arange(100)
    majority = np.zeros(100, dtype=int)
    mostly = majority.copy()
    mostly[:5] = 1  # agrees on 95 % of rows, but only by predicting the majority class
    test = label_test(majority, mostly, clusters)
    assert test.agreement == 0.95 and test.kappa == 0.0 and test.passed is False
    same = label_test(majority, majority.copy(), clusters)
    assert (same.kappa, same.passed) == (1.0, True)
    assert same.detail == (
        "100 entities: kappa 1.000 (upper 99% bound 1.000); same class on 100.0% of rows"
    )


def test_label_test_of_two_close_classifiers_passes_and_a_thin_one_is_no_verdict() -> None:
    rng = np.random.default_rng(0)
    classes = rng.integers(0, 3, 200)
    close = classes.copy()
    close[:10] = (close[:10] + 1) % 3
    test = label_test(classes, close, np.repeat(np.arange(100), 2))
    assert test.kappa > 0.9 and test.passed is True
    thin = label_test(classes[:19], close[:19], np.arange(19))
    assert (thin.passed, thin.detail) == (None, "19 entities < 20: not evaluated")


def test_served_scores_are_the_predicted_class_s_probability() -> None:
    assert served_scores(np.array([[0.2, 0.7, 0.1], [0.5, 0.1, 0.4]])).tolist() == [0.7, 0.5]
    assert served_scores(np.array([0.3, 12.5])).tolist() == [0.3, 12.5]


def test_reproduced_within_a_tolerance_relative_to_large_values() -> None:
    assert reproduced(np.array([]), np.array([])) == (True, 1.0)
    logged = np.array([0.5, 2000.0] * 50)
    assert reproduced(logged, logged + np.array([0.0009, 1.9] * 50)) == (True, 1.0)
    off = logged.copy()
    off[0] += 0.01  # one row in 100 off: 0.99 still reproduces
    assert reproduced(logged, off) == (True, 0.99)
    off[2] += 0.01
    assert reproduced(logged, off) == (False, 0.98)


FEATURES = ["amount", "count"]


@pytest.fixture
def store(home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``fraud`` v1: a two-tree LightGBM Booster, on an MLflow file store."""
    import lightgbm

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    settings = Settings(home=home, registry_uri=(home / "mlruns").as_uri())
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 2))
    params = {"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5}
    data = lightgbm.Dataset(x, (x[:, 0] > 0).astype(int), feature_name=FEATURES)
    (home / "artifact").mkdir()
    lightgbm.train(params, data, num_boost_round=2).save_model(str(home / "artifact/model.lgb"))
    c = client(settings)
    c.create_registered_model("fraud")
    tags = {
        tag_names.FLAVOR: "lightgbm",
        tag_names.ARTIFACT_SHA256: tree_sha256(home / "artifact"),
        tag_names.FEATURES: json.dumps(FEATURES),
        tag_names.THRESHOLD: "0.4",
    }
    c.create_model_version("fraud", (home / "artifact").as_uri(), tags=tags)
    return settings


def test_rescore_scores_the_logged_features_with_the_version(store: Settings) -> None:
    features = pd.DataFrame({"count": [1.0, 1.0], "amount": [-2.0, 2.0], "other": ["x", "y"]})
    result = rescore(store, "fraud", "1", features)
    assert (result.reason, result.threshold, result.task.task) == ("", 0.4, "binary")
    assert result.scores is not None and result.scores.shape == (2,)
    assert result.scores[0] < result.scores[1]


def test_rescore_says_why_it_cannot_score(store: Settings) -> None:
    logged = pd.DataFrame({"amount": [1.0, None], "count": [1.0, 2.0]})
    gaps = rescore(store, "fraud", "1", logged)
    assert (gaps.scores, gaps.reason) == (None, "logged features hold missing values")
    lacking = rescore(store, "fraud", "1", logged[["amount"]])
    assert lacking.reason == "the log lacks inputs of v1: ['count']"
    unknown = rescore(store, "fraud", "7", logged)
    assert (unknown.scores, unknown.threshold) == (None, 0.5)
    assert unknown.reason == "v7 could not be loaded: fraud has no version 7 (versions: 1)"
