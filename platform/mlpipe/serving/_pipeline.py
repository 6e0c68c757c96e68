"""The request pipeline, with the batch as its unit.

For a batch of validated requests: route each (sticky canary split, shadow
sample) → fetch features for the whole batch, one online-store call per
feature service → build each request's input vector in its version's order
(defaults for missing store features, flagged) → prediction cache → score the
misses, one vectorized call per version → read the output by the version's
task (:class:`~mlpipe.tasks.TaskSpec`: P(class 1) labelled at the threshold,
class probabilities, or a predicted value) → append every row to the
prediction log in one write → answer with the task's fields. Shadow versions
are scored afterwards on a background thread, logged with arm ``shadow`` and
never returned.

A model that raises (or returns an output its task cannot read: a wrong
shape, a non-finite value, a probability outside [0, 1]) for a version group is
retried row by row, so a poison request fails alone: it gets an error body
(422 when the model rejected the input with a ``ValueError``, else 500), no
log row, and the rest of the batch is answered as usual. The rows of one
Open Inference Protocol request are scored as one batch ``together``: one
failed row fails them all, and none is logged as answered.

A request still unanswered ``serving.request_timeout_s`` after it arrived
(it queued too long) gets 504 and is logged with status ``timeout``, never as
an answer. When the log write fails (disk full), ``predlog.on_write_error``
decides: ``fail_closed`` answers the batch with 503, ``fail_open`` answers it
and counts the lost rows; both are logged and counted in ``/metrics``.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from threading import Lock
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.features import check_join_key
from mlpipe.predlog import Arm, GroupCommitter, PiiHasher, PredictionRecord
from mlpipe.registry import missing_refused, number_from_text
from mlpipe.routing import entity_key
from mlpipe.serving._caches import LRUCache, normalized_vector
from mlpipe.serving._error_bodies import (
    ModelFailure,
    ModelUnavailable,
    TimedOut,
    error_for,
    model_error,
)
from mlpipe.serving._generations import GenerationLoader, ServingModel, VersionPlan
from mlpipe.serving._log_failures import LogFailurePolicy
from mlpipe.serving._online_features import FeatureFetcher, OnlineFeatureFetcher
from mlpipe.serving._schema import PredictRequest
from mlpipe.serving._vectors import build_vector
from mlpipe.tasks import OutputError, Prediction

if TYPE_CHECKING:
    from mlpipe.config import Settings
    from mlpipe.predlog import PredictionSink
    from mlpipe.serving._metrics import ServingMetrics

logger = logging.getLogger("mlpipe.serving")

MAX_SHADOW_BACKLOG = 256  # batches; beyond it shadow work is dropped (and counted)


@dataclass(slots=True)
class _Item:
    """One request on its way through a batch."""

    req: PredictRequest
    index: int
    served: ServingModel
    plan: VersionPlan
    arm: Arm
    key: str
    shadow: str | None = None
    vector: list[Any] | None = None
    missing: list[str] | None = None
    feature_hit: bool = False
    prediction: Prediction | None = None
    cache_hit: bool = False
    error: dict[str, Any] | None = None  # set when the model could not score this request
    status: Literal["ok", "timeout"] = "ok"  # the log row's status; "timeout" for a 504


def _unserved(loader: GenerationLoader, name: str) -> dict[str, Any]:
    """The error body for a model this worker holds no generation of (it went meanwhile)."""
    failure = loader.failures.get(name)
    if failure is not None:
        return error_for(ModelUnavailable(failure.message(name)))
    return error_for(NotFound(f"model {name!r} is not deployed here"))


def _join_entity(served: ServingModel, req: PredictRequest) -> dict[str, Any]:
    """The request's entity cut to the join keys of the feature services the model's
    answering versions read: the only keys that route and are logged. Any other key a
    client adds is ignored, so it can neither pick the arm nor grow the log.

    A model that reads no feature service has no join keys: its entity is the
    client's own identity for the request (sticky routing, outcomes matched by
    ``entity_key``) and is kept whole, as the request id would be.
    """
    specs = [plan.spec for plan in served.primary_versions() if plan.spec is not None]
    if not specs:
        return dict(req.entity)
    names = {k for spec in specs for k in spec.join_keys}
    return {k: v for k, v in req.entity.items() if k in names}


def _routing_key(served: ServingModel, req: PredictRequest) -> str:
    """The sticky routing (and log) key: the join keys, else the request id."""
    entity = _join_entity(served, req)
    return entity_key(entity) if entity else f"request_id={req.request_id}"


class ScoringPipeline:
    """Scores batches of :class:`PredictRequest` against the loaded generation."""

    def __init__(
        self,
        settings: Settings,
        loader: GenerationLoader,
        sink: PredictionSink,
        *,
        fetch_features: FeatureFetcher | None = None,
        metrics: ServingMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.loader = loader
        self.sink = sink
        self.metrics = metrics
        self._fetch = fetch_features or OnlineFeatureFetcher(settings)
        self._cache: LRUCache[Prediction] = LRUCache(settings.serving.prediction_cache_size)
        self._pii = PiiHasher(settings.pii_fields, settings.pii_key)
        self._shadow_pool = ThreadPoolExecutor(1, thread_name_prefix="mlpipe-shadow")
        # the log writes of a sink that waits for acks (_log): in batch order, those
        # queued while one waits for its acks written together
        self._log_group = GroupCommitter(sink) if sink.waits_for_acks else None
        self._shadow_backlog = 0
        self._shadow_lock = Lock()
        self._timeout_ns = int(settings.serving.request_timeout_s * 1e9)
        self._log_failures = LogFailurePolicy(settings.predlog.on_write_error)

    # -- validation (the gateway calls this before a request joins a batch) --

    def check(self, req: PredictRequest) -> None:
        """Raise NotFound for an unknown model, ModelUnavailable for one deployed but not
        loaded, InvalidInput naming a missing or unreadable input.

        A join key must fit its entity's Feast type (:func:`~mlpipe.features.check_join_key`).
        A missing input (omitted, ``null`` or NaN) is taken only where the version
        scores one (``plan.nullable``); a boolean only for a boolean input.
        """
        served = self.loader.models.get(req.model)
        if served is None:
            failure = self.loader.failures.get(req.model)
            if failure is not None:
                raise ModelUnavailable(failure.message(req.model))
            known = ", ".join(sorted(self.loader.models)) or "none"
            raise NotFound(f"model {req.model!r} is not deployed here (serving: {known})")
        for plan in served.primary_versions():
            if plan.spec is not None:
                for key in plan.spec.join_keys:
                    if key not in req.entity:
                        raise InvalidInput(f"entity.{key}: required by {plan.spec.name}")
                    check_join_key(key, req.entity[key], plan.spec.join_key_types.get(key))
            for name in plan.request_features:
                if name not in req.features and name not in plan.nullable:
                    raise InvalidInput(missing_refused(name))
            # Typed inputs, or anything but finite floats: every value held to its input.
            if plan.frame_inputs is not None or not _finite_floats(req.features):
                _check_values(plan, req.features)

    # -- the batch --

    def predict_batch(
        self, requests: Sequence[PredictRequest], *, together: bool = False
    ) -> list[dict[str, Any]]:
        """One response (or error body with ``status``) per request, in order.

        The rows of every answered request are in the prediction log (an OS
        write) before this returns; if that write fails, it raises and no
        request of the batch is answered. ``together``: the requests are the
        rows of one client request (an Open Inference Protocol infer), answered
        all or not at all: when one cannot be answered, none is, and none is
        logged as answered.
        """
        results, items = self._score_batch(requests, together)
        self._append(items)
        return self._answer(results, items)

    async def predict_batch_async(
        self, requests: Sequence[PredictRequest], *, together: bool = False
    ) -> list[dict[str, Any]]:
        """:meth:`predict_batch` on the event loop, the log written by :meth:`_log`.

        The batch is scored on the loop as before; with a sink that waits on the
        network (Kafka's acks) the loop scores the next batch while the log thread
        waits. The contract is the same: nothing is answered before its row is logged.
        """
        results, items = self._score_batch(requests, together)
        await self._log(items)
        return self._answer(results, items)

    async def _log(
        self, items: Sequence[_Item], records: list[PredictionRecord] | None = None
    ) -> None:
        """:meth:`_append` through the group committer's thread for a sink that waits
        for acks (Kafka: the batches queued meanwhile share one wait, decision 034), in
        place for one that writes to the OS (segment files: the hop would cost a
        context switch a batch, decision 019)."""
        import asyncio

        if self._log_group is None:
            self._append(items, records)
            return
        logged = _logged(items)
        try:
            await asyncio.wrap_future(
                self._log_group.submit(records if records is not None else self._records(logged))
            )
        except Exception as exc:
            self._refuse(exc, logged)

    async def predict_together_async(
        self, requests: Sequence[PredictRequest], *, chunk: int
    ) -> list[dict[str, Any]]:
        """:meth:`predict_batch` with ``together``, ``chunk`` requests at a time, the event
        loop free between chunks.

        For the rows of one Open Inference Protocol request (up to 1,024): scored in
        one go they held the worker's loop, and every other tenant's requests, for as
        long as the whole request took (issue 29, item 8). Every chunk is scored
        against the generation loaded when the request began; the rows are logged in
        one write after the last chunk (on the log thread for a sink that waits for
        acks, as :meth:`predict_batch_async`), so still none is logged unless all are
        answered. ``mlpipe_pipeline_batch_size`` sees the chunks.
        """
        import asyncio

        models = self.loader.models  # replaced whole on a reload: one generation throughout
        results: list[dict[str, Any]] = []
        items: list[_Item] = []
        for start in range(0, len(requests), chunk):
            if start:
                await asyncio.sleep(0)  # let the loop serve what came meanwhile
            part, scored = self._score_batch(requests[start : start + chunk], False, models)
            for it in scored:
                it.index += start
            results += part
            items += scored
        unserved = next((r for r in results if r), None)  # the model went: no row answers
        for it in items:
            if unserved is not None and it.error is None:
                it.error = unserved
        _fail_together(items)
        records: list[PredictionRecord] = []  # a chunk at a time too: 1,024 took ~6 ms
        for start in range(0, len(items), chunk):
            await asyncio.sleep(0)
            records += self._records(items[start : start + chunk])
        await self._log(items, records)
        await asyncio.sleep(0)
        return self._answer(results, items)

    def _score_batch(
        self,
        requests: Sequence[PredictRequest],
        together: bool,
        models: Mapping[str, ServingModel] | None = None,
    ) -> tuple[list[dict[str, Any]], list[_Item]]:
        """Route, fetch features and score: (a result slot per request, the items scored)."""
        results: list[dict[str, Any]] = [{} for _ in requests]
        items: list[_Item] = []
        models = self.loader.models if models is None else models
        for i, req in enumerate(requests):
            served = models.get(req.model)
            if served is None:
                results[i] = _unserved(self.loader, req.model)
                continue
            key = _routing_key(served, req)
            d = served.router.route(key, req.pin)
            items.append(_Item(req, i, served, served.versions[d.version], d.arm, key, d.shadow))
        if self.metrics:
            self.metrics.batch_size.observe(len(requests))
        self._features(items)
        self._score(items)
        self._expire(items)
        if together:
            _fail_together(items)
        return results, items

    def _answer(self, results: list[dict[str, Any]], items: list[_Item]) -> list[dict[str, Any]]:
        """Fill each request's slot with its answer or error; count, and shadow the answered."""
        answered = [it for it in items if it.error is None]
        for it in items:
            if it.error is not None:
                results[it.index] = {**it.error, "request_id": it.req.request_id}
                continue
            results[it.index] = _response(it)
        self._count(answered)
        shadows = [it for it in answered if it.shadow is not None]
        if shadows:
            self._submit_shadow(shadows)
        return results

    def close(self) -> None:
        if self._log_group is not None:
            self._log_group.close()
        self._shadow_pool.shutdown(wait=True)

    # -- the log, and what must not be answered --

    def _expire(self, items: Sequence[_Item]) -> None:
        """504 for every scored request that has outlived ``serving.request_timeout_s``."""
        now = time.time_ns()
        for it in items:
            received = it.req.received_ns
            if it.error is None and received and now - received > self._timeout_ns:
                limit = self.settings.serving.request_timeout_s
                late = TimedOut(f"request timed out: not answered within {limit:g} s")
                it.error = error_for(late)
                it.status = "timeout"

    def _records(self, items: Sequence[_Item]) -> list[PredictionRecord]:
        """The log rows of the answered and timed-out requests among ``items``."""
        return [
            self._record(it, it.arm) for it in items if it.error is None or it.status == "timeout"
        ]

    def _append(
        self, items: Sequence[_Item], records: list[PredictionRecord] | None = None
    ) -> None:
        """Log answered and timed-out requests (``records``, when already built from
        ``items``) in one write; apply the write-error policy."""
        logged = _logged(items)
        try:
            self.sink.append(records if records is not None else self._records(logged))
        except Exception as exc:
            self._refuse(exc, logged)

    def _refuse(self, exc: Exception, logged: Sequence[_Item]) -> None:
        """Apply the write-error policy to the ``logged`` items a failed log write held."""
        refusal = self._log_failures.record(exc, len(logged))
        if self.metrics:
            self.metrics.predlog_errors.labels(self._log_failures.policy).inc(len(logged))
        if refusal is not None:
            for it in logged:
                if it.error is None:
                    it.error = refusal

    # -- stages --

    def _features(self, items: Sequence[_Item]) -> None:
        by_service: dict[str, list[_Item]] = defaultdict(list)
        for it in items:
            if it.plan.spec is None:
                self._vector(it, None)
            else:
                by_service[it.plan.spec.name].append(it)
        for service, group in by_service.items():
            spec = group[0].plan.spec
            assert spec is not None  # grouped by it above
            entities = [{k: it.req.entity[k] for k in spec.join_keys} for it in group]
            try:
                rows: list[Any] = self._fetch(service, entities)
            except InvalidInput:  # one request's keys; the gateway's check lets none through
                rows = self._fetch_each(service, group, entities)
            except Exception:  # the online path never fails a request over features
                logger.exception("feature fetch for %s failed; serving defaults", service)
                rows = [None] * len(group)
            for it, row in zip(group, rows, strict=True):
                self._vector(it, row)

    def _fetch_each(
        self, service: str, group: list[_Item], entities: list[dict[str, Any]]
    ) -> list[Any]:
        """Fetch entity by entity: a request whose keys the store refuses fails alone (422)."""
        rows: list[Any] = []
        for it, entity in zip(group, entities, strict=True):
            try:
                (row,) = self._fetch(service, [entity])
            except InvalidInput as exc:
                it.error = error_for(exc)
                row = None
            except Exception:
                logger.exception("feature fetch for %s failed; serving defaults", service)
                row = None
            rows.append(row)
        return rows

    def _vector(self, it: _Item, row: Any) -> None:
        """The item's input vector from its request and the store's ``row`` (None: none)."""
        plan = it.plan
        defaults = plan.spec.defaults if plan.spec is not None else {}
        v = build_vector(plan.vector_slots, plan.store_features, defaults, it.req.features, row)
        it.vector, it.missing, it.feature_hit = v.values, v.missing, v.feature_hit
        if v.error is not None:
            it.error = error_for(v.error)

    def _score(self, items: Sequence[_Item]) -> None:
        pending: dict[tuple[str, str], list[tuple[_Item, tuple[Any, ...]]]] = defaultdict(list)
        plans: dict[tuple[str, str], VersionPlan] = {}
        for it in items:
            plan = it.plan
            key = (
                it.served.name,
                it.served.generation,
                plan.version,
                normalized_vector(it.vector or ()),
            )
            cached = self._cache.get(key)
            if cached is not None:
                it.prediction, it.cache_hit = cached, True
            else:
                group = (it.served.name, plan.version)
                pending[group].append((it, key))
                plans[group] = plan
        for group, todo in pending.items():
            plan = plans[group]
            x = _model_inputs(plan, [it.vector for it, _ in todo])
            try:
                predictions = _predictions_of(plan, x)
            except Exception:
                logger.exception(
                    "scoring %d rows of %s/%s failed; retrying row by row", len(todo), *group
                )
                self._score_rows(todo, plan)
                continue
            for (it, key), prediction in zip(todo, predictions, strict=True):
                it.prediction = prediction
                self._cache.put(key, prediction)

    def _score_rows(self, todo: list[tuple[_Item, tuple[Any, ...]]], plan: VersionPlan) -> None:
        """Score each row alone; a row the model cannot score gets ``error`` and no prediction."""
        for it, key in todo:
            try:
                (prediction,) = _predictions_of(plan, _model_inputs(plan, [it.vector]))
            except Exception as exc:
                it.error = model_error(exc)
                logger.warning(
                    "request %s: %s/%s cannot score it (%s): %s",
                    it.req.request_id,
                    it.served.name,
                    it.plan.version,
                    it.error["status"],
                    exc,
                )
                continue
            it.prediction = prediction
            self._cache.put(key, prediction)

    def _record(self, it: _Item, arm: Arm) -> PredictionRecord:
        plan = it.plan
        req = it.req
        vector = it.vector or []
        features: dict[str, Any] = {
            k: (None if v != v else v)  # only NaN (missing) differs from itself
            for k, v in zip(plan.model.features, vector, strict=True)
        }
        entity = _join_entity(it.served, req)
        key = it.key
        if self._pii:
            features = self._pii.redact(features)
            key = self._pii.redact_key(entity, key) if entity else key
            entity = self._pii.redact(entity)
        now = time.time_ns()
        latency = (now - req.received_ns) / 1e6 if req.received_ns else 0.0
        p = it.prediction
        assert p is not None  # only scored items are logged
        return PredictionRecord(
            request_id=req.request_id or "",
            ts=now / 1e9,
            tenant=req.tenant,
            model=it.served.name,
            version=plan.version,
            arm=arm,
            generation=it.served.generation,
            entity_key=key,
            entity=entity,
            features=features,
            score=p.score,
            label=p.label,
            latency_ms=latency,
            feature_cache_hit=it.feature_hit,
            prediction_cache_hit=it.cache_hit,
            features_missing=list(it.missing or ()),
            status=it.status,
            probabilities=None if p.probabilities is None else list(p.probabilities),
        )

    def _count(self, items: Sequence[_Item]) -> None:
        m = self.metrics
        if m is None:
            return
        answered = Counter((it.served.name, it.plan.version, it.arm) for it in items)
        for labels, n in answered.items():
            m.predictions.labels(*labels).inc(n)
        fc = Counter((it.served.name, it.feature_hit) for it in items if it.plan.spec)
        for (model, hit), n in fc.items():
            m.feature_cache.labels(model, "hit" if hit else "miss").inc(n)
        pc = Counter((it.served.name, it.cache_hit) for it in items)
        for (model, hit), n in pc.items():
            m.prediction_cache.labels(model, "hit" if hit else "miss").inc(n)
        missing = Counter((it.served.name, f) for it in items for f in it.missing or ())
        for (model, feature), n in missing.items():
            m.features_missing.labels(model, feature).inc(n)

    # -- shadow, off the response path --

    def _submit_shadow(self, items: list[_Item]) -> None:
        with self._shadow_lock:
            if self._shadow_backlog >= MAX_SHADOW_BACKLOG:
                if self.metrics:
                    for it in items:
                        self.metrics.shadow.labels(it.served.name, it.shadow, "dropped").inc()
                return
            self._shadow_backlog += 1
        self._shadow_pool.submit(self._run_shadow, items)

    def _run_shadow(self, items: list[_Item]) -> None:
        try:
            shadow_items = [
                _Item(it.req, it.index, it.served, it.served.versions[it.shadow], "shadow", it.key)
                for it in items
                if it.shadow is not None
            ]
            self._features(shadow_items)
            self._score(shadow_items)
            self.sink.append([self._record(it, "shadow") for it in shadow_items if not it.error])
            result = "scored"
        except Exception:
            logger.exception("shadow scoring failed for %d requests", len(items))
            result = "failed"
        finally:
            with self._shadow_lock:
                self._shadow_backlog -= 1
        if self.metrics:
            for labels, n in Counter((it.served.name, it.shadow) for it in items).items():
                self.metrics.shadow.labels(*labels, result).inc(n)


def _response(it: _Item) -> dict[str, Any]:
    """The answer to a scored request: who answered, then its task's fields
    (:meth:`~mlpipe.tasks.TaskSpec.answer`; binary ``score`` and ``label`` as ever).

    A binary answer is filled in place, as before tasks: :meth:`TaskSpec.answer` and
    merging its dict cost about 1 µs a request on the hot path.
    """
    p = it.prediction
    assert p is not None  # an item without an error was scored
    answer: dict[str, Any] = {
        "request_id": it.req.request_id,
        "model": it.served.name,
        "version": it.plan.version,
        "arm": it.arm,
        "generation": it.served.generation,
    }
    task = it.plan.task
    if task.task == "binary":
        answer["score"] = p.score
        answer["label"] = p.label
    else:
        answer.update(task.answer(p))
    answer["features_missing"] = it.missing
    answer["cache_hit"] = it.cache_hit
    return answer


def _logged(items: Sequence[_Item]) -> list[_Item]:
    """The items whose rows go to the log: the answered and the timed out."""
    return [it for it in items if it.error is None or it.status == "timeout"]


def _fail_together(items: Sequence[_Item]) -> None:
    """When one item of a request answered together failed, fail every item with its error."""
    failed = next((it for it in items if it.error is not None), None)
    if failed is None:
        return
    for it in items:
        if it.error is None:
            it.error = failed.error  # not logged: only answers (and timeouts) are


_FLOAT = frozenset({float})


def _finite_floats(features: dict[str, Any]) -> bool:
    """Whether every value is a finite float (the fast path's common case: nothing to check).

    A sum that overflows to inf only sends finite values to the full check.
    """
    values = features.values()
    return set(map(type, values)) <= _FLOAT and math.isfinite(sum(values))


def _check_values(plan: VersionPlan, features: dict[str, Any]) -> None:
    """Hold each request-time value to its typed input (InvalidInput naming the field).

    Without typed inputs (a float-array version) every input is a number, and a
    string is one only if it reads as one (``"1.5"``, as ``/predict`` always took).
    An omitted input reaches here only where the version takes a missing value.
    """
    inputs = plan.frame_inputs
    for name in plan.request_features:
        value = features.get(name)
        if inputs is not None:
            inputs.check(name, value)
        else:
            _check_number(plan, name, value)


def _check_number(plan: VersionPlan, name: str, value: Any) -> None:
    """A float-array version's input: a finite number (or a string that reads as one),
    a boolean only for a boolean input, a missing value only where the model takes one."""
    if value is None or value != value:  # only NaN differs from itself
        if name not in plan.nullable:
            raise InvalidInput(missing_refused(name))
    elif type(value) is str:
        number_from_text(name, value)
    elif type(value) is bool:
        column = plan.inputs.column(name) if plan.inputs is not None else None
        if column is None or column.kind != "boolean":
            expected = column.expected if column is not None else "a number"
            raise InvalidInput(
                f"features.{name}: expected {expected}, got a boolean ({str(value).lower()})"
            )
    elif not math.isfinite(value):
        raise InvalidInput(f"features.{name}: expected a finite number, got {value!r}")


def _model_inputs(plan: VersionPlan, rows: list[Any]) -> Any:
    """The rows as the version's model takes them: a float array, or a typed DataFrame."""
    if plan.frame_inputs is None:
        return np.asarray(rows, dtype=np.float64)
    return plan.frame_inputs.to_frame(rows)


def _predictions_of(plan: VersionPlan, x: Any) -> list[Prediction]:
    """One Prediction per row of ``x``, read by the version's task; raises whatever the
    model raised, or ModelFailure for an output the task cannot read."""
    task = plan.task
    try:
        output = task.check_output(plan.model.predict_scores(x), x.shape[0])
    except OutputError as exc:
        raise ModelFailure(str(exc)) from exc
    return task.predictions(output)


__all__ = ["ScoringPipeline"]
