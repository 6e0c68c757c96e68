"""The batch pipeline, the generation loader and the gateway, without a server."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from mlpipe.config import load_settings
from mlpipe.errors import IntegrityError, InvalidInput, NotFound
from mlpipe.serving import (
    GenerationLoader,
    InferenceProtocol,
    PredictGateway,
    PredictRequest,
    RequestIntake,
    RuntimeSlot,
    ServingRuntime,
    serving_metrics,
)
from mlpipe.serving._item import Item, Together


@dataclass(frozen=True)
class FakeModel:
    name: str
    version: str
    features: list[str]
    feature_service: str | None = "fraud_v1"
    threshold: float = 0.5
    offset: float = 0.0

    def predict_scores(self, x: np.ndarray) -> np.ndarray:
        if (x[:, 0] == CURSED_AMOUNT).any():
            raise ValueError(f"amount {CURSED_AMOUNT:g} is not a real amount")
        # a deterministic function of the row, so a mix-up inside a batch shows
        return (np.tanh(x.sum(axis=1) / 1000.0) + 1) / 2 * 0.5 + self.offset


CURSED_AMOUNT = 666.0  # FakeModel rejects a row with it (ValueError), as a strict model would
SPEC = SimpleNamespace(
    name="fraud_v1",
    features=["txn_count_1h", "avg_amount_7d"],
    join_keys=["customer_id"],
    join_key_types={"customer_id": "INT64"},
    defaults={"txn_count_1h": 0.0, "avg_amount_7d": 50.0},
)


@dataclass
class FakeFeatures:
    calls: list[int] = field(default_factory=list)
    down: bool = False

    def __call__(self, service: str, entities: list[dict[str, Any]]) -> list[Any]:
        self.calls.append(len(entities))
        if self.down:
            raise RuntimeError("store down")
        rows = []
        for e in entities:
            cid = int(e["customer_id"])
            if cid < 0:  # an entity the store does not know: defaults, flagged
                rows.append(
                    SimpleNamespace(
                        values=dict(SPEC.defaults), missing=SPEC.features, cache_hit=False
                    )
                )
            else:
                rows.append(
                    SimpleNamespace(
                        values={"txn_count_1h": float(cid % 7), "avg_amount_7d": float(cid)},
                        missing=[],
                        cache_hit=cid % 2 == 0,
                    )
                )
        return rows


class ListSink:
    waits_for_acks = False

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def append(self, records: Any) -> None:
        self.rows.extend(records)

    def close(self) -> None:
        pass


class FakeControl:
    def __init__(self) -> None:
        self.records: dict[str, Any] = {}
        self.tampered: set[str] = set()
        self.loads: list[str] = []

    def set(
        self,
        model: str,
        generation: int,
        champion: str,
        canary: str | None = None,
        weight: float = 0.0,
        shadow: str | None = None,
        sample: float = 0.0,
    ) -> None:
        arms = {"champion": champion, "canary": canary, "shadow": shadow}
        self.records[model] = SimpleNamespace(
            model=model,
            generation=generation,
            champion=champion,
            canary=canary,
            canary_weight=weight,
            shadow=shadow,
            shadow_sample=sample,
            arms=lambda arms=arms: {k: v for k, v in arms.items() if v},
        )

    def generations(self, _s: Any) -> dict[str, int]:
        return {m: r.generation for m, r in self.records.items()}

    def current(self, _s: Any, model: str) -> Any:
        return self.records.get(model)

    def load(self, _s: Any, name: str, version: str) -> FakeModel:
        self.loads.append(version)
        if version in self.tampered:
            raise IntegrityError(f"artifact of {name}/{version} hashes to abc…; refusing")
        return FakeModel(
            name,
            version,
            ["amount", "txn_count_1h", "avg_amount_7d"],
            offset=0.4 if version == "2" else 0.0,
        )


def fake_runtime(settings: Any, sink: Any, control: FakeControl | None = None) -> SimpleNamespace:
    """A real ServingRuntime over the fakes above, generation 1 (champion "1") loaded."""
    if control is None:
        control = FakeControl()
        control.set("fraud", 1, "1")
    metrics = serving_metrics(CollectorRegistry())
    loader = GenerationLoader(
        settings,
        metrics=metrics,
        load_model=control.load,
        describe_service=lambda _s, _n: SPEC,
        generations=control.generations,
        current=control.current,
        retry_after_s=0,
    )
    loader.refresh()
    feats = FakeFeatures()
    rt = ServingRuntime(settings, loader=loader, sink=sink, fetch_features=feats, metrics=metrics)
    return SimpleNamespace(
        rt=rt,
        control=control,
        sink=sink,
        feats=feats,
        loader=loader,
        pipeline=rt.pipeline,
        metrics=metrics,
    )


@pytest.fixture
def env(tmp_path: Path) -> Any:
    built = fake_runtime(load_settings(home=tmp_path, pii_fields=["customer_id"]), ListSink())
    yield built
    built.pipeline.close()


def _req(cid: int, amount: float = 10.0, rid: str | None = None) -> PredictRequest:
    return PredictRequest(
        model="fraud",
        entity={"customer_id": cid},
        features={"amount": amount},
        request_id=rid or f"r{cid}-{amount}",
    )


def test_batch_answers_each_request_with_its_own_score(env: Any) -> None:
    reqs = [_req(i, amount=float(i * 3)) for i in range(64)]
    out = env.pipeline.predict_batch(reqs)
    assert env.feats.calls == [64]  # one online-store call for the batch
    for req, res in zip(reqs, out, strict=True):
        x = np.array(
            [[req.features["amount"], req.entity["customer_id"] % 7, req.entity["customer_id"]]],
            dtype=float,
        )
        assert res["request_id"] == req.request_id
        assert res["score"] == pytest.approx(FakeModel("f", "1", []).predict_scores(x)[0])
        assert (res["version"], res["arm"], res["generation"]) == ("1", "champion", 1)
        assert res["label"] == int(res["score"] >= 0.5)
    assert len(env.sink.rows) == 64


def test_prediction_cache_hit_then_miss_after_new_generation(env: Any) -> None:
    first = env.pipeline.predict_batch([_req(5)])[0]
    second = env.pipeline.predict_batch([_req(5)])[0]
    assert (first["cache_hit"], second["cache_hit"]) == (False, True)
    assert first["score"] == second["score"]
    assert env.sink.rows[-1].prediction_cache_hit
    env.control.set("fraud", 2, "1")
    env.loader.refresh()
    third = env.pipeline.predict_batch([_req(5)])[0]
    assert (third["generation"], third["cache_hit"]) == (2, False)


def test_missing_features_get_defaults_and_are_flagged(env: Any) -> None:
    res = env.pipeline.predict_batch([_req(-1)])[0]
    assert res["features_missing"] == ["txn_count_1h", "avg_amount_7d"]
    row = env.sink.rows[-1]
    assert row.features_missing == res["features_missing"]
    assert row.features["avg_amount_7d"] == 50.0
    env.feats.down = True
    res = env.pipeline.predict_batch([_req(3)])[0]
    assert res["features_missing"] == ["txn_count_1h", "avg_amount_7d"]
    assert env.metrics.features_missing.labels("fraud", "avg_amount_7d")._value.get() == 2


def test_canary_split_and_shadow_rows(env: Any) -> None:
    env.control.set("fraud", 2, "1", canary="2", weight=30, shadow="3", sample=100)
    env.loader.refresh()
    out = env.pipeline.predict_batch([_req(i) for i in range(400)])
    share = sum(r["arm"] == "canary" for r in out) / len(out)
    assert 0.2 < share < 0.4
    assert {r["version"] for r in out if r["arm"] == "canary"} == {"2"}
    assert all(r["arm"] != "shadow" and r["version"] != "3" for r in out)
    env.pipeline.close()  # waits for the shadow thread
    shadow = [r for r in env.sink.rows if r.arm == "shadow"]
    assert len(shadow) == 400 and {r.version for r in shadow} == {"3"}


def test_a_tenant_pinned_to_the_canary_always_gets_it(env: Any) -> None:
    env.control.set("fraud", 2, "1", canary="2", weight=10)
    env.loader.refresh()
    pinned = [
        r.model_copy(update={"tenant": "acme", "pin": "canary"}) for r in map(_req, range(50))
    ]
    out = env.pipeline.predict_batch([*pinned, *map(_req, range(50, 100))])
    assert {r["version"] for r in out[:50]} == {"2"}
    assert sum(r["version"] == "2" for r in out[50:]) < 20
    assert {r.tenant for r in env.sink.rows if r.version == "2"} >= {"acme"}


def test_pii_is_hashed_in_the_log_only(env: Any) -> None:
    env.pipeline.predict_batch([_req(42)])
    row = env.sink.rows[-1]
    assert row.entity["customer_id"] != 42 and "42" not in row.entity_key
    assert row.request_id == "r42-10.0" and row.tenant == "default"


def test_check_rejects_unknown_model_and_missing_inputs(env: Any) -> None:
    with pytest.raises(NotFound):
        env.pipeline.check(PredictRequest(model="nope", entity={"customer_id": 1}))
    with pytest.raises(InvalidInput, match="entity.customer_id"):
        env.pipeline.check(PredictRequest(model="fraud", entity={"x": 1}, features={"amount": 1.0}))
    with pytest.raises(InvalidInput, match="features.amount"):
        env.pipeline.check(PredictRequest(model="fraud", entity={"customer_id": 1}))
    env.pipeline.check(_req(1))


def test_tampered_generation_is_refused_and_old_keeps_serving(
    env: Any, caplog: pytest.LogCaptureFixture
) -> None:
    env.control.tampered.add("2")
    env.control.set("fraud", 2, "2")
    env.loader.refresh()
    assert env.loader.models["fraud"].generation == 1
    assert "refused generation 2 of fraud: IntegrityError" in caplog.text
    assert "generation 1 keeps serving" in caplog.text
    assert env.pipeline.predict_batch([_req(1)])[0]["version"] == "1"
    env.control.set("fraud", 3, "1", canary="4", weight=10)
    env.loader.refresh()
    assert env.loader.models["fraud"].generation == 3
    assert env.control.loads.count("1") == 1  # already-loaded versions are reused


def test_ready_once_every_model_was_loaded_or_refused(tmp_path: Path) -> None:
    """A refused model does not hold the others back; it is reported (test_unloadable.py)."""
    control = FakeControl()
    control.tampered.add("1")
    control.set("fraud", 1, "1")
    loader = GenerationLoader(
        load_settings(home=tmp_path),
        load_model=control.load,
        describe_service=lambda _s, _n: SPEC,
        generations=control.generations,
        current=control.current,
        retry_after_s=0,
    )
    assert not loader.ready
    loader.refresh()
    assert loader.ready and set(loader.unloadable()) == {"fraud"}
    control.tampered.clear()
    loader.refresh()
    assert loader.ready and loader.unloadable() == {}


# -- the gateway (ASGI middleware) in front of a stand-in for BentoML's batch endpoint --


def _batch_of(rt: ServingRuntime, size: int = 16) -> Any:
    """The service's batcher without BentoML: the requests in batches of ``size`` (as
    BentoML's splits a call over its ``max_batch_size``), straight to the pipeline."""

    async def batch(reqs: Sequence[PredictRequest]) -> list[Any]:
        scored: list[Any] = []
        for start in range(0, len(reqs), size):
            scored += await rt.pipeline.predict_batch_async(reqs[start : start + size])
        return scored

    return batch


async def _not_found(scope: Any, receive: Any, send: Any) -> None:
    """What the gateway wraps: BentoML's app in the service, nothing the tests call."""
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def gateway(rt: ServingRuntime, **kw: Any) -> RequestIntake:
    """The gateway behind the intake, as in the service's stack (the intake holds the 413)."""
    slot = RuntimeSlot(rt)
    batch = kw.pop("batch", None) or _batch_of(rt)
    predict = PredictGateway(_not_found, runtime=slot, batch=batch, **kw)
    return RequestIntake(predict, max_body_bytes=2048, timeout_s=10.0, runtime=slot)


def protocol(rt: ServingRuntime) -> InferenceProtocol:
    """The Open Inference Protocol layer in front of the gateway, as in the service's stack."""
    return InferenceProtocol(gateway(rt), runtime=RuntimeSlot(rt), batch=_batch_of(rt))


@pytest.fixture
def client(env: Any) -> Any:
    return gateway(env.rt)


def _post(app: Any, content: bytes | str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post(
                "/predict", content=content, headers={"content-type": "application/json"}
            )

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ('{"model": "fraud", "features": {"amount": 1}}', 422, "entity.customer_id"),
        (
            '{"model": "fraud", "entity": {"customer_id": 1}, "features": {"amount": "x"}}',
            422,
            "features.amount",
        ),
        ('{"model": 3, "entity": {"customer_id": 1}}', 422, "model"),
        ('{"model": "nope", "entity": {"customer_id": 1}}', 404, "model"),
        ('{"model": "fraud", "entity": {"customer_id": 1}}', 422, "features.amount"),
        ('{"model": "fraud", "entity": ', 400, None),
        (
            '{"model": "fraud", "entity": {"customer_id": 9223372036854775808}, '
            '"features": {"amount": 1}}',
            422,
            "entity.customer_id",
        ),
        (
            '{"model": "fraud", "entity": {"customer_id": "7x"}, "features": {"amount": 1}}',
            422,
            "entity.customer_id",
        ),
        (
            '{"model": "fraud", "entity": {"customer_id": 1}, "features": {"amount": 1}, '
            '"request_id": "a\\u0000b"}',
            400,
            "request_id",
        ),
        (
            '{"model": "fraud", "entity": {"customer_id": 1, "note": "\\u001b[31m"}, '
            '"features": {"amount": 1}}',
            400,
            "entity.note",
        ),
        (
            '{"model": "fraud", "entity": {"customer_id": 1}, "features": {"amount": 1}, '
            '"request_id": "a\\u0085"}',
            400,
            "request_id",
        ),
        ("[1, 2]", 422, "body"),
        ("x" * 5000, 413, None),
    ],
)
def test_gateway_rejects_bad_requests(
    env: Any, client: Any, body: str, status: int, field: str | None
) -> None:
    resp = _post(client, body)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]
    assert resp.json().get("field") == field
    assert env.sink.rows == []


def test_gateway_answers_one_object(env: Any, client: Any) -> None:
    resp = _post(client, '{"model":"fraud","entity":{"customer_id":7},"features":{"amount":2}}')
    assert resp.status_code == 200
    data = resp.json()
    assert set(data) >= {
        "request_id",
        "model",
        "version",
        "arm",
        "generation",
        "score",
        "label",
        "features_missing",
    }
    assert len(data["request_id"]) == 32
    assert env.sink.rows[-1].request_id == data["request_id"]
    assert env.sink.rows[-1].latency_ms > 0
    assert env.metrics.latency.labels("fraud", "champion")._sum.get() > 0


class _Refused(Exception):
    """What BentoML's batcher raises when it sheds a queued request (ServiceUnavailable)."""

    error_code = 503


async def _refusing(reqs: Sequence[PredictRequest]) -> list[Any]:
    raise _Refused("process is overloaded")


async def _failing(reqs: Sequence[PredictRequest]) -> list[Any]:
    raise RuntimeError("disk on fire")


@pytest.mark.parametrize(
    ("batch", "status", "message"),
    [(_refusing, 503, "process is overloaded"), (_failing, 500, "the batch failed")],
)
def test_gateway_answers_a_failed_batch_with_its_status_and_logs_nothing(
    env: Any, batch: Any, status: int, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    body = '{"model":"fraud","request_id":"r-1","entity":{"customer_id":7},'
    body += '"features":{"amount":2}}'
    resp = _post(gateway(env.rt, batch=batch), body)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"].startswith(message)
    assert resp.json()["request_id"] == "r-1"
    assert "disk on fire" not in resp.text  # the cause goes to the server log, not the client
    assert ("disk on fire" in caplog.text) == (status == 500)
    assert env.metrics.rejected.labels(str(status))._value.get() == 1
    assert env.sink.rows == []


def test_gateway_adds_the_response_headers_it_is_given(env: Any) -> None:
    app = gateway(env.rt, response_headers=lambda: [(b"x-bentoml-request-id", b"00ab")])
    resp = _post(app, '{"model":"fraud","entity":{"customer_id":7},"features":{"amount":2}}')
    assert resp.status_code == 200
    assert resp.headers["x-bentoml-request-id"] == "00ab"
    assert resp.json()["model"] == "fraud"


def _rows(env: Any, reqs: list[PredictRequest]) -> list[PredictRequest]:
    """``reqs`` as the rows of one client request, in the generation loaded now."""
    together = Together(env.pipeline.loader.models)
    return [r.joining(together) for r in reqs]


def test_rows_of_a_client_request_come_back_scored_not_answered_or_logged(env: Any) -> None:
    """In a batch beside a request of its own, each row of a client request is handed
    back as its scored item; only the request of its own is answered and logged."""
    rows = _rows(env, [_req(i, amount=5.0) for i in range(3)])
    own = _req(9, amount=5.0, rid="own")
    scored = env.pipeline.predict_batch([rows[0], own, rows[1], rows[2]])
    assert [type(s).__name__ for s in scored] == ["Item", "dict", "Item", "Item"]
    assert scored[1]["request_id"] == "own" and "score" in scored[1]
    assert [r.request_id for r in env.sink.rows] == ["own"]
    assert [s.req.request_id for s in scored if isinstance(s, Item)] == [r.request_id for r in rows]
    assert PredictRequest.model_validate(rows[0].model_dump()).together is None  # not wire


def test_rows_scored_over_batches_are_answered_in_order_and_logged_in_one_write(
    env: Any,
) -> None:
    """A client request's rows, scored in batches (as BentoML's batcher splits them) and
    finished together: the answers of one batch of them all, in order, one log write."""
    reqs = [_req(i, amount=float(i)) for i in range(10)]
    whole = env.pipeline.predict_batch(reqs)
    env.sink.rows.clear()
    writes: list[int] = []
    append = env.sink.append
    env.sink.append = lambda records: (writes.append(len(records)), append(records))

    async def main() -> list[dict[str, Any]]:
        batch = _batch_of(env.rt, size=4)
        return await env.pipeline.finish_together(await batch(_rows(env, reqs)))

    answers = asyncio.run(main())
    assert [r["score"] for r in answers] == pytest.approx([r["score"] for r in whole])
    assert [r["request_id"] for r in answers] == [r.request_id for r in reqs]
    assert writes == [10] and len(env.sink.rows) == 10


def test_one_failed_row_fails_every_row_and_logs_nothing(env: Any) -> None:
    reqs = [_req(i, amount=CURSED_AMOUNT if i == 9 else 5.0) for i in range(10)]

    async def main() -> list[dict[str, Any]]:
        batch = _batch_of(env.rt, size=4)
        return await env.pipeline.finish_together(await batch(_rows(env, reqs)))

    answers = asyncio.run(main())
    assert {r["status"] for r in answers} == {422}  # the last batch's failure fails the first's
    assert all("not a real amount" in r["error"] for r in answers)
    assert env.sink.rows == []
    alone = env.pipeline.predict_batch(reqs)  # the same requests, each of its own
    assert [r.get("status") for r in alone].count(422) == 1 and len(env.sink.rows) == 9


def test_rows_are_scored_in_the_generation_their_request_began_with(env: Any) -> None:
    """A reload between a client request's batches does not split its rows over two
    generations: every row routes in the one loaded when the request began."""
    rows = _rows(env, [_req(i, amount=5.0) for i in range(4)])
    first = env.pipeline.predict_batch(rows[:2])
    env.control.set("fraud", 2, "1", canary="2", weight=100)  # every request to v2 now
    env.loader.refresh()
    assert env.pipeline.predict_batch([_req(1, amount=5.0)])[0]["version"] == "2"
    rest = env.pipeline.predict_batch(rows[2:])
    answers = asyncio.run(env.pipeline.finish_together([*first, *rest]))
    assert {(a["version"], a["generation"]) for a in answers} == {("1", 1)}


def test_only_join_keys_route_and_are_logged(tmp_path: Path) -> None:
    """Extra entity keys neither pick the arm nor reach the log (issue 29, item 11)."""
    built = fake_runtime(load_settings(home=tmp_path), ListSink())
    try:
        built.control.set("fraud", 2, "1", canary="2", weight=50)
        built.loader.refresh()
        plain = built.pipeline.predict_batch([_req(i) for i in range(200)])
        junk = {f"junk{j}": "x" * 900 for j in range(15)}
        padded = [
            r.model_copy(update={"entity": {**r.entity, **junk}}) for r in map(_req, range(200))
        ]
        out = built.pipeline.predict_batch(padded)
        assert [r["arm"] for r in out] == [r["arm"] for r in plain]
        rows = built.sink.rows[-200:]
        assert all(row.entity == {"customer_id": i} for i, row in enumerate(rows))
        assert all(row.entity_key == f"customer_id={i}" for i, row in enumerate(rows))
    finally:
        built.pipeline.close()


class NoFeaturesControl(FakeControl):
    """Versions that read no feature service: every input comes with the request."""

    def load(self, _s: Any, name: str, version: str) -> FakeModel:
        self.loads.append(version)
        return FakeModel(name, version, ["amount"], feature_service=None)


def test_entity_is_optional_when_no_version_reads_features(tmp_path: Path) -> None:
    """No entity, or ``{}``, is taken by a model that reads no feature service; sticky
    routing and the log then key on the request id (issue 28, item 8)."""
    control = NoFeaturesControl()
    control.set("plain", 1, "1", canary="2", weight=50)
    built = fake_runtime(load_settings(home=tmp_path), ListSink(), control)
    try:
        bodies = [
            '{"model": "plain", "features": {"amount": 3}, "request_id": "a1"}',
            '{"model": "plain", "entity": {}, "features": {"amount": 3}, "request_id": "a1"}',
        ]
        answers = [_post(gateway(built.rt), body) for body in bodies]
        assert [a.status_code for a in answers] == [200, 200], answers[0].text
        assert answers[0].json()["arm"] == answers[1].json()["arm"]
        ids = [f"r{i}" for i in range(200)]
        reqs = [PredictRequest(model="plain", features={"amount": 1.0}, request_id=r) for r in ids]
        first = built.pipeline.predict_batch(reqs)
        again = built.pipeline.predict_batch(reqs)
        assert [r["arm"] for r in first] == [r["arm"] for r in again]
        assert {r["arm"] for r in first} == {"champion", "canary"}
        rows = built.sink.rows[-200:]
        assert [row.entity_key for row in rows] == [f"request_id={r}" for r in ids]
        assert all(row.entity == {} for row in rows)
    finally:
        built.pipeline.close()
