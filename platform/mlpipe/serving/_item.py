"""One request on its way through a batch (:class:`Item`), its routing key and logged
entity, the rows of one client request (:class:`Together`), and the two rules over a
batch's items: which are logged, and failing together."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mlpipe.errors import MlpipeError
from mlpipe.predlog import Arm
from mlpipe.routing import entity_key
from mlpipe.serving._generations import ServingModel, VersionPlan
from mlpipe.serving._schema import PredictRequest
from mlpipe.tasks import Prediction


@dataclass(slots=True)
class Item:
    """One request on its way through a batch: routed, then filled in stage by stage."""

    req: PredictRequest
    index: int  # the request's place in the batch: its answer's slot
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
    # set by the stage that could not serve this request; its answer's body: error_for
    error: MlpipeError | None = None
    status: Literal["ok", "timeout"] = "ok"  # the log row's status; "timeout" for a 504


def join_entity(served: ServingModel, req: PredictRequest) -> dict[str, Any]:
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


def routing_key(served: ServingModel, req: PredictRequest) -> str:
    """The sticky routing (and log) key: the join keys, else the request id."""
    entity = join_entity(served, req)
    return entity_key(entity) if entity else f"request_id={req.request_id}"


@dataclass(frozen=True, eq=False)
class Together:
    """The rows of one client request (an Open Inference Protocol infer): answered and
    logged all or none (decision 024).

    Each row goes through the batcher as a request of its own
    (:meth:`~mlpipe.serving.PredictRequest.joining`), in BentoML's batches beside
    other requests, and is scored against ``models``, the generation loaded when
    the client request began; the batch hands the row back as its scored
    :class:`Item`, neither answered nor logged, and
    :meth:`~mlpipe.serving.ScoringPipeline.finish_together` answers and logs the
    rows as one.
    """

    models: Mapping[str, ServingModel]


Scored = dict[str, Any] | Item  # a batch's result for a request: its answer, or a row's Item


def logged(items: Sequence[Item]) -> list[Item]:
    """The items whose rows go to the log: the answered and the timed out."""
    return [it for it in items if it.error is None or it.status == "timeout"]


def fail_together(items: Sequence[Item]) -> None:
    """When one item of a request answered together failed, fail every item with its error."""
    failed = next((it for it in items if it.error is not None), None)
    if failed is None:
        return
    for it in items:
        if it.error is None:
            it.error = failed.error  # not logged: only answers (and timeouts) are


__all__ = [
    "Item",
    "Scored",
    "Together",
    "fail_together",
    "join_entity",
    "logged",
    "routing_key",
]
