"""The features and vector stages: each item's input vector, from its request and the
online store.

One online-store call per feature service for the whole batch; a version that reads
no feature service takes every input from the request. The store never fails a
request over features: when it is down, every store feature gets its feature
service's default and is flagged missing. A request whose join keys the store
refuses (InvalidInput) fails alone with 422: the batch is fetched again entity by
entity so the others are served. A store value its typed input refuses fails its
request too (:func:`~mlpipe.serving._vectors.build_vector`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from mlpipe.errors import InvalidInput
from mlpipe.serving._item import Item
from mlpipe.serving._online_features import FeatureFetcher
from mlpipe.serving._vectors import build_vector

logger = logging.getLogger("mlpipe.serving")


class FeatureStage:
    """Fills each item's ``vector``, ``missing`` and ``feature_hit`` (or its ``error``)."""

    __slots__ = ("fetch",)

    def __init__(self, fetch: FeatureFetcher) -> None:
        self.fetch = fetch

    def fill(self, items: Sequence[Item]) -> None:
        """Every item's input vector, the store read once per feature service."""
        by_service: dict[str, list[Item]] = defaultdict(list)
        for it in items:
            if it.plan.spec is None:
                _vector(it, None)
            else:
                by_service[it.plan.spec.name].append(it)
        for service, group in by_service.items():
            spec = group[0].plan.spec
            assert spec is not None  # grouped by it above
            entities = [{k: it.req.entity[k] for k in spec.join_keys} for it in group]
            try:
                rows: list[Any] = self.fetch(service, entities)
            except InvalidInput:  # one request's keys; the gateway's check lets none through
                rows = self._fetch_each(service, group, entities)
            except Exception:  # the online path never fails a request over features
                logger.exception("feature fetch for %s failed; serving defaults", service)
                rows = [None] * len(group)
            for it, row in zip(group, rows, strict=True):
                _vector(it, row)

    def _fetch_each(
        self, service: str, group: list[Item], entities: list[dict[str, Any]]
    ) -> list[Any]:
        """Fetch entity by entity: a request whose keys the store refuses fails alone (422)."""
        rows: list[Any] = []
        for it, entity in zip(group, entities, strict=True):
            try:
                (row,) = self.fetch(service, [entity])
            except InvalidInput as exc:
                it.error = exc
                row = None
            except Exception:
                logger.exception("feature fetch for %s failed; serving defaults", service)
                row = None
            rows.append(row)
        return rows


def _vector(it: Item, row: Any) -> None:
    """The item's input vector from its request and the store's ``row`` (None: none)."""
    plan = it.plan
    defaults = plan.spec.defaults if plan.spec is not None else {}
    v = build_vector(plan.vector_slots, plan.store_features, defaults, it.req.features, row)
    it.vector, it.missing, it.feature_hit = v.values, v.missing, v.feature_hit
    if v.error is not None:
        it.error = v.error


__all__ = ["FeatureStage"]
