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
request are scored as one batch ``together``: one failed row fails them all, and
none is logged as answered.

A request still unanswered ``serving.request_timeout_s`` after it arrived
(it queued too long) gets 504 and is logged with status ``timeout``, never as
an answer. When the log write fails (disk full), ``predlog.on_write_error``
decides: ``fail_closed`` answers the batch with 503, ``fail_open`` answers it
and counts the lost rows; both are logged and counted in ``/metrics``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mlpipe.errors import MlpipeError, NotFound
from mlpipe.predlog import GroupCommitter, PiiHasher, PredictionRecord
from mlpipe.serving._answers import response
from mlpipe.serving._caches import LRUCache
from mlpipe.serving._error_bodies import ModelUnavailable, TimedOut, error_for
from mlpipe.serving._feature_stage import FeatureStage
from mlpipe.serving._generations import GenerationLoader, ServingModel
from mlpipe.serving._input_checks import check_inputs
from mlpipe.serving._item import Item, fail_together, logged, routing_key
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


def _unserved(loader: GenerationLoader, name: str) -> MlpipeError:
    """The error for a model this worker holds no generation of (it went meanwhile)."""
    failure = loader.failures.get(name)
    if failure is not None:
        return ModelUnavailable(failure.message(name))
    return NotFound(f"model {name!r} is not deployed here")


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
        unserved, items = self._score_batch(requests, together)
        self._append(items)
        return self._answer(unserved, items)

    async def predict_batch_async(
        self, requests: Sequence[PredictRequest], *, together: bool = False
    ) -> list[dict[str, Any]]:
        """:meth:`predict_batch` on the event loop, the log written by :meth:`_log`.

        The batch is scored on the loop as before; with a sink that waits on the
        network (Kafka's acks) the loop scores the next batch while the log thread
        waits. The contract is the same: nothing is answered before its row is logged.
        """
        unserved, items = self._score_batch(requests, together)
        await self._log(items)
        return self._answer(unserved, items)

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
        unserved: list[MlpipeError | None] = []
        items: list[Item] = []
        for start in range(0, len(requests), chunk):
            if start:
                await asyncio.sleep(0)  # let the loop serve what came meanwhile
            part, scored = self._score_batch(requests[start : start + chunk], False, models)
            for it in scored:
                it.index += start
            unserved += part
            items += scored
        gone = next((e for e in unserved if e is not None), None)  # the model went: none answers
        for it in items:
            if gone is not None and it.error is None:
                it.error = gone
        fail_together(items)
        records: list[PredictionRecord] = []  # a chunk at a time too: 1,024 took ~6 ms
        for start in range(0, len(items), chunk):
            await asyncio.sleep(0)
            records += self._rows.of(items[start : start + chunk])
        await self._log(items, records)
        await asyncio.sleep(0)
        return self._answer(unserved, items)

    def _score_batch(
        self,
        requests: Sequence[PredictRequest],
        together: bool,
        models: Mapping[str, ServingModel] | None = None,
    ) -> tuple[list[MlpipeError | None], list[Item]]:
        """Route, fetch features and score: (for each request, the error when no model of
        its name is served here, else None; the items scored)."""
        unserved: list[MlpipeError | None] = [None] * len(requests)
        items: list[Item] = []
        models = self.loader.models if models is None else models
        for i, req in enumerate(requests):
            served = models.get(req.model)
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
        if together:
            fail_together(items)
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
