"""The request pipeline, with the batch as its unit: the stages of a ``/predict`` in order.

1. parse: ``_gateway.py``, the request body into a
   :class:`~mlpipe.serving.PredictRequest` (400, 422).
2. admit: ``_gateway.py`` calls :meth:`ScoringPipeline.check` (404, 503, and 422
   from the input checks in ``_input_checks.py``); then the request joins a batch.
3. route: here, :meth:`ScoringPipeline._score_batch`: the sticky canary split, a
   tenant's pin, the shadow sample; each request becomes an
   :class:`~mlpipe.serving._item.Item` (``_item.py``) that the stages below fill in.
4. features: ``_feature_stage.py``, one online-store call per feature service.
5. vector: ``_feature_stage.py``, each request's inputs in its version's order.
6. score: ``_scorer.py``, the prediction cache, then one vectorized call per
   version, retried row by row when it fails; then the 504 for a request that
   queued too long (here, :meth:`ScoringPipeline._expire`).
7. post-process: ``_answers.py``, the answer body, read by the version's task.
8. log: ``_log_rows.py`` builds each row (PII hashed); here, every row of the batch
   goes to the log in one write before anything is answered.
9. shadow: ``_shadow.py``, shadow versions scored afterwards on a thread, logged
   with arm ``shadow``, never returned.

A request that fails at a stage carries its error (``Item.error``, an
:class:`~mlpipe.errors.MlpipeError`) to the end: it is answered with that error's
body (:func:`~mlpipe.serving._error_bodies.error_for`, the one table from class to
status) and not logged. The rows of one Open Inference Protocol
request (:class:`~mlpipe.serving._item.Together`) are scored in these batches
beside other requests, then answered and logged as one by
:meth:`ScoringPipeline.finish_together`: one failed row fails them all, and none
is logged as answered.

A request still unanswered ``serving.request_timeout_s`` after it arrived
(it queued too long) gets 504 and is logged with status ``timeout``, never as
an answer. When the log write fails (disk full), ``predlog.on_write_error``
decides: ``fail_closed`` answers the batch with 503, ``fail_open`` answers it
and counts the lost rows; both are logged and counted in ``/metrics``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mlpipe.errors import MlpipeError, NotFound
from mlpipe.predlog import GroupCommitter, PiiHasher, PredictionRecord
from mlpipe.serving._answers import response
from mlpipe.serving._caches import LRUCache
from mlpipe.serving._error_bodies import ModelUnavailable, TimedOut, error_for
from mlpipe.serving._feature_stage import FeatureStage
from mlpipe.serving._generations import GenerationLoader
from mlpipe.serving._input_checks import check_inputs
from mlpipe.serving._item import Item, Scored, fail_together, logged, routing_key
from mlpipe.serving._log_failures import LogFailurePolicy
from mlpipe.serving._log_rows import LogRows
from mlpipe.serving._online_features import FeatureFetcher, OnlineFeatureFetcher
from mlpipe.serving._schema import PredictRequest
from mlpipe.serving._scorer import Scorer
from mlpipe.serving._shadow import ShadowRunner

if TYPE_CHECKING:
    from mlpipe.config import Settings
    from mlpipe.predlog import PredictionSink
    from mlpipe.serving._metrics import ServingMetrics


_ROW_CHUNK = 64  # log rows built at a time by finish_together, the event loop free between


def _unserved(loader: GenerationLoader, name: str) -> MlpipeError:
    """The error for a model this worker holds no generation of (it went meanwhile)."""
    failure = loader.failures.get(name)
    if failure is not None:
        return ModelUnavailable(failure.message(name))
    return NotFound(f"model {name!r} is not deployed here")


def _own_and_rows(items: list[Item]) -> tuple[list[Item], list[Item]]:
    """(the batch's requests of their own, the rows of client requests) among ``items``."""
    own = [it for it in items if it.req.together is None]
    if len(own) == len(items):
        return own, []
    return own, [it for it in items if it.req.together is not None]


def _handing_back(answers: list[dict[str, Any]], rows: list[Item]) -> list[Scored]:
    """``answers``, with each row of a client request handed back as its scored item."""
    scored: list[Scored] = list(answers)
    for it in rows:
        scored[it.index] = it
    return scored


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
        self._features = FeatureStage(fetch_features or OnlineFeatureFetcher(settings))
        self._scorer = Scorer(LRUCache(settings.serving.prediction_cache_size))
        self._rows = LogRows(PiiHasher(settings.pii_fields, settings.pii_key))
        self._shadow = ShadowRunner(self._features, self._scorer, self._rows, sink, metrics)
        # the log writes of a sink that waits for acks (_log): in batch order, those
        # queued while one waits for its acks written together
        self._log_group = GroupCommitter(sink) if sink.waits_for_acks else None
        self._timeout_ns = int(settings.serving.request_timeout_s * 1e9)
        self._log_failures = LogFailurePolicy(settings.predlog.on_write_error)

    # -- admission (the gateway calls this before a request joins a batch) --

    def check(self, req: PredictRequest) -> None:
        """Raise NotFound for an unknown model, ModelUnavailable for one deployed but not
        loaded, InvalidInput naming a missing or unreadable input
        (:func:`~mlpipe.serving._input_checks.check_inputs`, for each answering version).
        """
        served = self.loader.models.get(req.model)
        if served is None:
            failure = self.loader.failures.get(req.model)
            if failure is not None:
                raise ModelUnavailable(failure.message(req.model))
            known = ", ".join(sorted(self.loader.models)) or "none"
            raise NotFound(f"model {req.model!r} is not deployed here (serving: {known})")
        for plan in served.primary_versions():
            check_inputs(plan, req)

    # -- the batch --

    def predict_batch(self, requests: Sequence[PredictRequest]) -> list[Scored]:
        """One response (or error body with ``status``) per request, in order; for a row
        of a client request (``req.together``), its scored :class:`Item` instead, which
        :meth:`finish_together` answers and logs with the request's other rows.

        The rows of every answered request are in the prediction log (an OS
        write) before this returns; if that write fails, it raises and no
        request of the batch is answered.
        """
        unserved, items = self._score_batch(requests)
        own, rows = _own_and_rows(items)
        self._append(own)
        return _handing_back(self._answer(unserved, own), rows)

    async def predict_batch_async(self, requests: Sequence[PredictRequest]) -> list[Scored]:
        """:meth:`predict_batch` on the event loop, the log written by :meth:`_log`.

        The batch is scored on the loop as before; with a sink that waits on the
        network (Kafka's acks) the loop scores the next batch while the log thread
        waits. The contract is the same: nothing is answered before its row is logged.
        """
        unserved, items = self._score_batch(requests)
        own, rows = _own_and_rows(items)
        await self._log(own)
        return _handing_back(self._answer(unserved, own), rows)

    async def finish_together(self, scored: Sequence[Scored]) -> list[dict[str, Any]]:
        """Answer the rows of one client request, scored by the batches (:meth:`predict_batch`
        hands each back as its :class:`Item`), and log them in one write: all or none.

        A row that failed (or a model gone meanwhile: its error body) fails every row,
        and none is logged. The log rows are built ``_ROW_CHUNK`` at a time, the event
        loop free between chunks (1,024 rows took ~6 ms in one go).
        """
        import asyncio

        gone = next((s for s in scored if not isinstance(s, Item)), None)
        if gone is not None:
            return [gone for _ in scored]
        items = [s for s in scored if isinstance(s, Item)]
        for i, it in enumerate(items):
            it.index = i
        fail_together(items)
        records: list[PredictionRecord] = []
        for start in range(0, len(items), _ROW_CHUNK):
            await asyncio.sleep(0)
            records += self._rows.of(items[start : start + _ROW_CHUNK])
        await self._log(items, records)
        await asyncio.sleep(0)
        return self._answer([None] * len(items), items)

    def _score_batch(
        self, requests: Sequence[PredictRequest]
    ) -> tuple[list[MlpipeError | None], list[Item]]:
        """Route, fetch features and score: (for each request, the error when no model of
        its name is served here, else None; the items scored). A row of a client request
        is routed in the generation that request began with."""
        unserved: list[MlpipeError | None] = [None] * len(requests)
        items: list[Item] = []
        for i, req in enumerate(requests):
            together = req.together
            served = (self.loader.models if together is None else together.models).get(req.model)
            if served is None:
                unserved[i] = _unserved(self.loader, req.model)
                continue
            key = routing_key(served, req)
            d = served.router.route(key, req.pin)
            items.append(Item(req, i, served, served.versions[d.version], d.arm, key, d.shadow))
        if self.metrics:
            self.metrics.batch_size.observe(len(requests))
        self._features.fill(items)
        self._scorer.score(items)
        self._expire(items)
        return unserved, items

    def _answer(
        self, unserved: list[MlpipeError | None], items: list[Item]
    ) -> list[dict[str, Any]]:
        """Each request's answer, or its error's body; count, and shadow the answered."""
        results = [{} if exc is None else error_for(exc) for exc in unserved]
        answered = [it for it in items if it.error is None]
        for it in items:
            if it.error is not None:
                results[it.index] = {**error_for(it.error), "request_id": it.req.request_id}
                continue
            results[it.index] = response(it)
        self._count(answered)
        shadows = [it for it in answered if it.shadow is not None]
        if shadows:
            self._shadow.submit(shadows)
        return results

    def close(self) -> None:
        if self._log_group is not None:
            self._log_group.close()
        self._shadow.close()

    # -- the log, and what must not be answered --

    def _expire(self, items: Sequence[Item]) -> None:
        """504 for every scored request that has outlived ``serving.request_timeout_s``."""
        now = time.time_ns()
        for it in items:
            received = it.req.received_ns
            if it.error is None and received and now - received > self._timeout_ns:
                limit = self.settings.serving.request_timeout_s
                late = TimedOut(f"request timed out: not answered within {limit:g} s")
                it.error = late
                it.status = "timeout"

    async def _log(
        self, items: Sequence[Item], records: list[PredictionRecord] | None = None
    ) -> None:
        """:meth:`_append` through the group committer's thread for a sink that waits
        for acks (Kafka: the batches queued meanwhile share one wait, decision 034), in
        place for one that writes to the OS (segment files: the hop would cost a
        context switch a batch, decision 019)."""
        import asyncio

        if self._log_group is None:
            self._append(items, records)
            return
        held = logged(items)
        if not held:
            return
        try:
            await asyncio.wrap_future(
                self._log_group.submit(records if records is not None else self._rows.of(held))
            )
        except Exception as exc:
            self._refuse(exc, held)

    def _append(self, items: Sequence[Item], records: list[PredictionRecord] | None = None) -> None:
        """Log answered and timed-out requests (``records``, when already built from
        ``items``) in one write; apply the write-error policy."""
        held = logged(items)
        if not held:  # a batch of rows of client requests only, or of refusals
            return
        try:
            self.sink.append(records if records is not None else self._rows.of(held))
        except Exception as exc:
            self._refuse(exc, held)

    def _refuse(self, exc: Exception, held: Sequence[Item]) -> None:
        """Apply the write-error policy to the items a failed log write ``held``."""
        refusal = self._log_failures.record(exc, len(held))
        if self.metrics:
            self.metrics.predlog_errors.labels(self._log_failures.policy).inc(len(held))
        if refusal is not None:
            for it in held:
                if it.error is None:
                    it.error = refusal

    def _count(self, items: Sequence[Item]) -> None:
        """Count the answered ``items`` in ``/metrics``: by arm, by cache, missing inputs."""
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


__all__ = ["ScoringPipeline"]
