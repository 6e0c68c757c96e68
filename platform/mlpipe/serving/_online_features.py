"""The pipeline's feature source: one Feast online reader, with its TTL cache, per service."""

from __future__ import annotations

from collections.abc import Callable
from threading import Lock
from typing import TYPE_CHECKING, Any

from mlpipe.features import OnlineFeatures

if TYPE_CHECKING:
    from mlpipe.config import Settings

FeatureFetcher = Callable[[str, list[dict[str, Any]]], list[Any]]
"""(feature service, entities) → one FeatureRow (values, missing, cache_hit) per entity."""


class OnlineFeatureFetcher:
    """One :class:`mlpipe.features.OnlineFeatures` (with its TTL cache) per feature service.

    A :data:`FeatureFetcher`; the readers are opened on first use, under a lock,
    so the worker's batches share one per service.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stores: dict[str, OnlineFeatures] = {}
        self._lock = Lock()

    def __call__(self, service: str, entities: list[dict[str, Any]]) -> list[Any]:
        store = self._stores.get(service)
        if store is None:
            with self._lock:
                store = self._stores.get(service)
                if store is None:
                    s = self.settings.serving
                    store = OnlineFeatures(
                        self.settings,
                        service,
                        cache_ttl_s=s.feature_cache_ttl_s,
                        cache_size=s.feature_cache_size,
                    )
                    self._stores[service] = store
        return store.get_many(entities)


__all__ = ["FeatureFetcher", "OnlineFeatureFetcher"]
