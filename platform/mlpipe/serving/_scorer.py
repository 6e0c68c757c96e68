"""The score stage: each item's prediction, from the prediction cache or its version's model.

A prediction is cached under (model, generation, version, input vector), so a new
generation never answers from the old one's entries. The misses are scored in one
vectorized call per version and read by the version's task
(:class:`~mlpipe.tasks.TaskSpec`). A model that raises for a version's rows (or
returns an output its task cannot read: a wrong shape, a non-finite value, a
probability outside [0, 1]) is retried row by row, so a poison request fails alone:
it gets an error (:func:`~mlpipe.serving._error_bodies.model_failure`: 422 when the
model rejected the input with a ``ValueError``, else 500) and is not cached; the
rest are scored and cached as usual.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from mlpipe.serving._caches import LRUCache, normalized_vector
from mlpipe.serving._error_bodies import ModelFailure, model_failure, status_of
from mlpipe.serving._generations import VersionPlan
from mlpipe.serving._item import Item
from mlpipe.tasks import OutputError, Prediction

logger = logging.getLogger("mlpipe.serving")

_Pending = list[tuple[Item, tuple[Any, ...]]]  # items to score, each with its cache key


class Scorer:
    """Fills each item's ``prediction`` and ``cache_hit`` (or its ``error``)."""

    __slots__ = ("cache",)

    def __init__(self, cache: LRUCache[Prediction]) -> None:
        self.cache = cache

    def score(self, items: Sequence[Item]) -> None:
        """Every item's prediction: cached, else one model call per (model, version)."""
        pending: dict[tuple[str, str], _Pending] = defaultdict(list)
        plans: dict[tuple[str, str], VersionPlan] = {}
        for it in items:
            plan = it.plan
            key = (
                it.served.name,
                it.served.generation,
                plan.version,
                normalized_vector(it.vector or ()),
            )
            cached = self.cache.get(key)
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
                self.cache.put(key, prediction)

    def _score_rows(self, todo: _Pending, plan: VersionPlan) -> None:
        """Score each row alone; a row the model cannot score gets ``error`` and no prediction."""
        for it, key in todo:
            try:
                (prediction,) = _predictions_of(plan, _model_inputs(plan, [it.vector]))
            except Exception as exc:
                it.error = model_failure(exc)
                logger.warning(
                    "request %s: %s/%s cannot score it (%s): %s",
                    it.req.request_id,
                    it.served.name,
                    it.plan.version,
                    status_of(it.error),
                    exc,
                )
                continue
            it.prediction = prediction
            self.cache.put(key, prediction)


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


__all__ = ["Scorer"]
