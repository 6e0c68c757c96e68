"""A request that makes the model raise fails alone; the rest of its batch is answered."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlpipe.config import load_settings
from tests.unit.serving.test_pipeline import (
    FakeControl,
    FakeModel,
    ListSink,
    _post,
    _req,
    fake_runtime,
    gateway,
)

REJECTED = -999.0  # an amount the model refuses (ValueError): the input is the cause
CRASH = -1000.0  # an amount the model falls over on (RuntimeError): the server's fault
NAN = -1001.0  # an amount the model answers with NaN


@dataclass(frozen=True)
class PoisonModel(FakeModel):
    def predict_scores(self, x: np.ndarray) -> np.ndarray:
        amounts = x[:, 0]
        if (amounts == REJECTED).any():
            raise ValueError("amount out of range [0, 1e6]")
        if (amounts == CRASH).any():
            raise RuntimeError("segfault-ish internals at 0xdeadbeef")
        scores = super().predict_scores(x)
        return np.where(amounts == NAN, np.nan, scores)  # type: ignore[no-any-return]


class PoisonControl(FakeControl):
    def load(self, _s: Any, name: str, version: str) -> FakeModel:
        self.loads.append(version)
        return PoisonModel(name, version, ["amount", "txn_count_1h", "avg_amount_7d"])


@pytest.fixture
def env(tmp_path: Path) -> Any:
    control = PoisonControl()
    control.set("fraud", 1, "1", shadow="2", sample=100)
    built = fake_runtime(load_settings(home=tmp_path), ListSink(), control)
    yield built
    built.pipeline.close()


@pytest.mark.parametrize(
    ("poison", "status", "says"),
    [
        (REJECTED, 422, "the model rejected this input: amount out of range"),
        (CRASH, 500, "the model failed on this input (RuntimeError)"),
        (NAN, 500, "the model returned a non-finite output for this input"),
    ],
)
def test_poison_request_fails_alone(env: Any, poison: float, status: int, says: str) -> None:
    reqs = [_req(i, amount=float(i)) for i in range(1, 16)]
    reqs.insert(7, _req(99, amount=poison, rid="poison"))
    out = env.pipeline.predict_batch(reqs)

    bad = out[7]
    assert bad == {**bad, "request_id": "poison", "status": status}
    assert bad["error"].startswith(says)
    assert "deadbeef" not in bad["error"]  # internals stay in the server log
    clean = PoisonModel("fraud", "1", [])
    for req, res in zip(reqs[:7] + reqs[8:], out[:7] + out[8:], strict=True):
        x = np.array(
            [[req.features["amount"], req.entity["customer_id"] % 7, req.entity["customer_id"]]]
        )
        assert res["request_id"] == req.request_id
        assert res["score"] == pytest.approx(clean.predict_scores(x)[0])
    env.pipeline.close()  # waits for the shadow thread
    logged = [(r.request_id, r.arm) for r in env.sink.rows]
    assert not any(rid == "poison" for rid, _ in logged)  # no row claims a prediction for it
    assert sorted(logged) == sorted(
        (r.request_id, arm)
        for r in reqs
        if r.request_id != "poison"
        for arm in ("champion", "shadow")
    )
    assert env.metrics.predictions.labels("fraud", "1", "champion")._value.get() == 15


def test_failed_row_is_not_cached_and_scores_once_fixed(env: Any) -> None:
    out = env.pipeline.predict_batch([_req(5, amount=REJECTED, rid="a")])
    assert out[0]["status"] == 422
    out = env.pipeline.predict_batch([_req(5, amount=REJECTED, rid="b")])
    assert out[0]["status"] == 422  # a failure is never served from the prediction cache
    out = env.pipeline.predict_batch([_req(5, amount=1.0, rid="c")])
    assert out[0]["score"] > 0 and not out[0]["cache_hit"]


def test_gateway_answers_the_poison_request_with_its_status(env: Any) -> None:
    body = '{"model":"fraud","entity":{"customer_id":7},"features":{"amount":-999}}'
    resp = _post(gateway(env.rt), body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"].startswith("the model rejected this input")
    assert len(resp.json()["request_id"]) == 32
    assert env.metrics.rejected.labels("422")._value.get() == 1
    env.pipeline.close()
    assert env.sink.rows == []
