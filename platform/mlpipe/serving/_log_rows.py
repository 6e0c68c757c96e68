"""The log stage's rows: the :class:`~mlpipe.predlog.PredictionRecord` of a scored
(or timed-out) request, with the PII fields of its features and entity hashed.

The row holds the inputs the version scored (a missing one as ``None``), the entity
cut to its join keys (:func:`~mlpipe.serving._item.join_entity`), the latency from
the request's arrival, and which caches answered. Only the log sees the hashes: the
answer to the client is built from the item, not from its row.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from mlpipe.predlog import Arm, PiiHasher, PredictionRecord
from mlpipe.serving._item import Item, join_entity


class LogRows:
    """Builds the log rows of items, redacting the fields ``pii`` names."""

    __slots__ = ("pii",)

    def __init__(self, pii: PiiHasher) -> None:
        self.pii = pii

    def of(self, items: Sequence[Item]) -> list[PredictionRecord]:
        """The rows of the answered and timed-out requests among ``items``, in order."""
        return [self.row(it, it.arm) for it in items if it.error is None or it.status == "timeout"]

    def row(self, it: Item, arm: Arm) -> PredictionRecord:
        """The row of one scored item, logged under ``arm`` (``"shadow"`` for a shadow)."""
        plan = it.plan
        req = it.req
        vector = it.vector or []
        features: dict[str, Any] = {
            k: (None if v != v else v)  # only NaN (missing) differs from itself
            for k, v in zip(plan.model.features, vector, strict=True)
        }
        entity = join_entity(it.served, req)
        key = it.key
        if self.pii:
            features = self.pii.redact(features)
            key = self.pii.redact_key(entity, key) if entity else key
            entity = self.pii.redact(entity)
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


__all__ = ["LogRows"]
