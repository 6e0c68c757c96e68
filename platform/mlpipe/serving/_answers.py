"""The post-process stage: the answer body of a scored request, read by its version's task."""

from __future__ import annotations

from typing import Any

from mlpipe.serving._item import Item


def response(it: Item) -> dict[str, Any]:
    """The answer to a scored request: who answered, then its task's fields
    (:meth:`~mlpipe.tasks.TaskSpec.answer`; binary ``score`` and ``label`` as ever),
    then the inputs that were missing and whether the prediction cache answered.

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


__all__ = ["response"]
