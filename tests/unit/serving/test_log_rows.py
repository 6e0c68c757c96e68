"""The log row of a scored request: what the version scored, the entity cut to its join
keys, and PII hashed in the row only."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from mlpipe.config import load_settings
from mlpipe.predlog import PiiHasher
from mlpipe.serving import PredictRequest
from mlpipe.serving._item import Item, routing_key
from mlpipe.serving._log_rows import LogRows
from mlpipe.tasks import Prediction
from tests.unit.serving.test_pipeline import ListSink, fake_runtime


@pytest.fixture
def fraud(tmp_path: Path) -> Any:
    built = fake_runtime(load_settings(home=tmp_path), ListSink())
    yield built.loader.models["fraud"]
    built.pipeline.close()


def _item(served: Any, cid: int = 42, **kw: Any) -> Item:
    req = PredictRequest(
        model="fraud",
        entity={"customer_id": cid, "junk": "x"},
        features={"amount": 12.5},
        request_id="r1",
        tenant="acme",
        received_ns=time.time_ns() - 5_000_000,
    )
    fields: dict[str, Any] = {
        "vector": [12.5, math.nan, 50.0],
        "missing": ["txn_count_1h"],
        "prediction": Prediction(0.25, 0),
        **kw,
    }
    return Item(
        req, 0, served, served.versions["1"], "champion", routing_key(served, req), **fields
    )


def test_the_row_holds_what_the_version_scored_and_who_answered(fraud: Any) -> None:
    row = LogRows(PiiHasher([], "k")).row(_item(fraud, cache_hit=True), "champion")
    assert (row.request_id, row.tenant, row.model, row.version, row.arm) == (
        "r1",
        "acme",
        "fraud",
        "1",
        "champion",
    )
    assert row.generation == fraud.generation
    assert row.features == {"amount": 12.5, "txn_count_1h": None, "avg_amount_7d": 50.0}
    assert row.entity == {"customer_id": 42} and row.entity_key == "customer_id=42"
    assert (row.score, row.label, row.probabilities) == (0.25, 0, None)
    assert row.features_missing == ["txn_count_1h"] and row.prediction_cache_hit
    assert row.status == "ok" and row.latency_ms >= 5.0


def test_pii_is_hashed_in_the_row_and_left_in_the_item(fraud: Any) -> None:
    pii = PiiHasher(["customer_id", "amount"], "secret")
    it = _item(fraud)
    row = LogRows(pii).row(it, "shadow")
    hashed = pii.hash_value(42)
    assert row.entity == {"customer_id": hashed}
    assert row.entity_key == f"customer_id={hashed}" and "42" not in row.entity_key
    assert row.features["amount"] == pii.hash_value(12.5)
    assert row.features["avg_amount_7d"] == 50.0
    assert row.arm == "shadow"
    assert it.req.entity["customer_id"] == 42 and it.key == "customer_id=42"


def test_rows_are_built_for_the_answered_and_the_timed_out_only(fraud: Any) -> None:
    answered = _item(fraud, 1)
    failed = _item(fraud, 2, error={"status": 422})
    late = _item(fraud, 3, error={"status": 504}, status="timeout")
    rows = LogRows(PiiHasher([], "k")).of([answered, failed, late])
    assert [(r.entity_key, r.status) for r in rows] == [
        ("customer_id=1", "ok"),
        ("customer_id=3", "timeout"),
    ]
