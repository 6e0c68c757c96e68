"""A small thread-safe LRU for the prediction cache (per worker)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class LRUCache(Generic[V]):
    """Bounded mapping that evicts the least recently used entry; ``maxsize=0`` disables it."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable) -> V | None:
        if not self.maxsize:
            return None
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> None:
        if not self.maxsize:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


def normalized_vector(values: Sequence[Any]) -> tuple[Any, ...]:
    """A hashable form of a feature vector (floats, strings), with NaN (missing) as None."""
    return tuple(None if v != v else v for v in values)  # only NaN differs from itself


__all__ = ["LRUCache", "normalized_vector"]
