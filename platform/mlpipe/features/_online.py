"""Online features for the serving hot path: a TTL cache in front of Feast's online store.

One :class:`OnlineFeatures` per serving process and FeatureService. A batch of
entities costs one dict lookup each for cache hits and one Feast
``get_online_features`` call for all the misses together. Reads never raise for
a store problem: a feature that is absent, null, older than its view's TTL, or
unreadable is served as its default and named in ``missing``. A circuit
breaker (:class:`~mlpipe.features.CircuitBreaker`) stops calling a store that keeps
failing, so its requests get defaults at once instead of each waiting it out.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlpipe.errors import InvalidInput
from mlpipe.features._breaker import CircuitBreaker, store_breaker
from mlpipe.features._store import (
    FeatureServiceSpec,
    describe_service,
    get_service,
    open_store,
)

if TYPE_CHECKING:
    from mlpipe.config import Settings

logger = logging.getLogger("mlpipe.features")

_Key = tuple[Any, ...]
# A cached entry: monotonic expiry, values, names of missing features.
_Entry = tuple[float, dict[str, float], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class FeatureRow:
    """The features of one entity: every feature has a value (its default when missing)."""

    values: dict[str, float]
    missing: list[str]
    cache_hit: bool


@dataclass(frozen=True)
class OnlineStats:
    """Counters since the :class:`OnlineFeatures` was built (one per entity read)."""

    hits: int
    misses: int
    store_errors: int  # entity reads the store failed
    short_circuited: int  # entity reads not sent to the store because the breaker was open
    missing_by_feature: dict[str, int]
    cached: int


class OnlineFeatures:
    """Read a FeatureService's online features with defaults, TTLs and a per-process cache.

    ``cache_ttl_s`` and ``cache_size`` default to ``settings.serving``'s
    ``feature_cache_ttl_s`` and ``feature_cache_size``; a size or TTL of 0 turns
    the cache off. A cached row never outlives the TTL of the features in it.
    ``breaker`` defaults to :func:`~mlpipe.features.store_breaker`.
    Construction reads the registry and raises :class:`~mlpipe.errors.NotFound`
    for an unknown service; reads raise only :class:`InvalidInput` for an
    entity without its join keys.
    """

    def __init__(
        self,
        settings: Settings,
        service: str,
        cache_ttl_s: float | None = None,
        cache_size: int | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.spec: FeatureServiceSpec = describe_service(settings, service)
        self._store = open_store(settings)
        _bound_redis(self._store, settings.reliability.breaker_slow_s)
        self._service = get_service(self._store, service)
        self._cache_ttl = (
            settings.serving.feature_cache_ttl_s if cache_ttl_s is None else cache_ttl_s
        )
        self._cache_size = settings.serving.feature_cache_size if cache_size is None else cache_size
        self._cache: dict[_Key, _Entry] = {}
        self._lock = threading.Lock()
        self._keys = tuple(self.spec.join_keys)
        self._coerce = _coercers(self._store, self._service, self._keys)
        self._ttl = {f: t for f, t in self.spec.ttl_s.items() if t > 0}
        self._defaults = self.spec.defaults
        self._all_missing = tuple(self.spec.features)
        self._online_path = _sqlite_path(self._store)
        self._online_inode: int | None = None
        self._hits = 0
        self._misses = 0
        self._store_errors = 0
        self._short_circuited = 0
        self._breaker = breaker or store_breaker(settings, service)
        self._missing_by_feature = dict.fromkeys(self.spec.features, 0)

    def get(self, entity: dict[str, Any]) -> FeatureRow:
        """The features of one entity; see :meth:`get_many`."""
        return self.get_many([entity])[0]

    def get_many(self, entities: list[dict[str, Any]]) -> list[FeatureRow]:
        """The features of each entity, in order; one Feast call covers all cache misses.

        Raises :class:`InvalidInput` when an entity lacks a join key or holds a
        value of the wrong type; never raises for a store failure (the row then
        holds every default and lists every feature as missing).
        """
        keys = [self._key(entity) for entity in entities]
        now = time.monotonic()
        cache = self._cache
        rows: list[FeatureRow | None] = [None] * len(keys)
        pending: dict[_Key, list[int]] = {}
        for i, key in enumerate(keys):
            entry = cache.get(key)
            if entry is not None and entry[0] > now:
                rows[i] = FeatureRow(dict(entry[1]), list(entry[2]), True)
            else:
                pending.setdefault(key, []).append(i)
        self._hits += len(keys) - sum(len(v) for v in pending.values())
        if pending:
            for key, (values, missing) in zip(pending, self._fetch(list(pending)), strict=True):
                for i in pending[key]:
                    rows[i] = FeatureRow(dict(values), list(missing), False)
                    self._misses += 1
                    for name in missing:
                        self._missing_by_feature[name] += 1
        return rows  # type: ignore[return-value]  # every slot is filled above

    def stats(self) -> OnlineStats:
        """Hit, miss and store-error counts, and how often each feature was served as missing."""
        return OnlineStats(
            hits=self._hits,
            misses=self._misses,
            store_errors=self._store_errors,
            short_circuited=self._short_circuited,
            missing_by_feature=dict(self._missing_by_feature),
            cached=len(self._cache),
        )

    def clear(self) -> None:
        """Drop every cached row (e.g. after a materialization)."""
        with self._lock:
            self._cache.clear()

    def _key(self, entity: dict[str, Any]) -> _Key:
        """The entity's join keys, checked against their types (:func:`check_join_key`)."""
        try:
            return tuple(
                coerce(entity[k]) for k, coerce in zip(self._keys, self._coerce, strict=True)
            )
        except KeyError as exc:
            raise InvalidInput(f"entity.{exc.args[0]}: required by {self.spec.name}") from exc

    def _fetch(self, keys: list[_Key]) -> list[tuple[dict[str, float], tuple[str, ...]]]:
        with self._lock:
            if not self._breaker.allow():
                self._short_circuited += len(keys)
                return [(self._defaults, self._all_missing)] * len(keys)
            started = time.monotonic()
            try:
                self._check_online_file()
                response = self._store.get_online_features(
                    features=self._service,
                    entity_rows=[dict(zip(self._keys, key, strict=True)) for key in keys],
                )
                rows = self._parse(response.proto, len(keys))
            except Exception:  # a broken store must not fail the request: serve defaults
                # The keys were checked (_key), so the request's input is not the cause.
                logger.warning(
                    "feature store read for %s failed (%d entities); serving defaults",
                    self.spec.name,
                    len(keys),
                    exc_info=True,
                )
                self._breaker.record(ok=False)
                self._store_errors += len(keys)
                self._reset_online_connection()
                return [(self._defaults, self._all_missing)] * len(keys)
            self._breaker.record(ok=True, elapsed_s=time.monotonic() - started)
            if self._cache_ttl > 0 and self._cache_size > 0:
                now = time.monotonic()
                for key, (values, missing, fresh_for) in zip(keys, rows, strict=True):
                    self._remember(key, (now + min(self._cache_ttl, fresh_for), values, missing))
        return [(values, missing) for values, missing, _ in rows]

    def _parse(self, proto: Any, n: int) -> list[tuple[dict[str, float], tuple[str, ...], float]]:
        """Values, missing names and seconds until the first feature expires, per entity."""
        wall = time.time()
        values = [dict(self._defaults) for _ in range(n)]
        missing: list[list[str]] = [[] for _ in range(n)]
        fresh_for = [float("inf")] * n
        found = set()
        for name, vector in zip(proto.metadata.feature_names.val, proto.results, strict=True):
            if name not in self._defaults:
                continue  # the join key echoed back
            found.add(name)
            ttl = self._ttl.get(name)
            for i, (value, stamp) in enumerate(
                zip(vector.values, vector.event_timestamps, strict=True)
            ):
                kind = value.WhichOneof("val")
                if kind is None or kind == "null_val":
                    missing[i].append(name)
                    continue
                if ttl is not None:
                    left = stamp.seconds + ttl - wall
                    if left <= 0:
                        missing[i].append(name)
                        continue
                    fresh_for[i] = min(fresh_for[i], left)
                values[i][name] = float(getattr(value, kind))
        for name in self._all_missing:
            if name not in found:
                for row in missing:
                    row.append(name)
        order = {name: i for i, name in enumerate(self._all_missing)}
        return [
            (values[i], tuple(sorted(missing[i], key=order.__getitem__)), fresh_for[i])
            for i in range(n)
        ]

    def _remember(self, key: _Key, entry: _Entry) -> None:
        cache = self._cache
        if key not in cache and len(cache) >= self._cache_size:
            now = time.monotonic()
            expired = [k for k, e in cache.items() if e[0] <= now]
            for k in expired[: max(1, self._cache_size // 10)]:
                del cache[k]
            if len(cache) >= self._cache_size:
                del cache[next(iter(cache))]  # the oldest insertion
        cache[key] = entry

    def _check_online_file(self) -> None:
        """Fail fast when the sqlite online store file is gone; reconnect when it was replaced.

        An open sqlite connection keeps reading a deleted file, so without this
        check a process would serve a removed or re-created store's old rows forever.
        """
        if self._online_path is None:
            return
        inode = os.stat(self._online_path).st_ino  # FileNotFoundError: store removed
        if self._online_inode is not None and inode != self._online_inode:
            self._reset_online_connection()
        self._online_inode = inode

    def _reset_online_connection(self) -> None:
        online = getattr(self._store._get_provider(), "online_store", None)
        conn = getattr(online, "_conn", None)
        if conn is not None:
            try:
                conn.close()
            finally:
                online._conn = None  # type: ignore[union-attr]
        self._online_inode = None


def _bound_redis(store: Any, seconds: float) -> None:
    """Bound a Redis online store's reads to ``seconds``, unless its config says otherwise.

    Feast's Redis client waits forever by default, and redis-py 8 retries a
    timed-out command three times with backoff (~5 s in all). The scoring
    service reads features on its worker's event loop, so a Redis that accepts
    connections and stops answering would hold every request of the worker,
    ``/livez`` included. With socket timeouts and no retry a read fails within
    ``seconds``, the request gets defaults, and after
    ``reliability.breaker_failures`` such reads the breaker stops trying.
    """
    config = store.config.online_store
    if config.type != "redis":
        return
    from feast.infra.online_stores.redis import RedisClient

    bounds = {"socket_timeout": f"{seconds:g}", "socket_connect_timeout": f"{seconds:g}"}
    if config.client == RedisClient.redis:  # GLIDE takes the timeouts, and has no retry option
        bounds["retry"] = "null"  # Feast JSON-decodes each value: redis-py gets retry=None
    options = {part.split("=", 1)[0].strip() for part in config.connection_string.split(",")}
    for option, value in bounds.items():
        if option not in options:
            config.connection_string += f",{option}={value}"


def _sqlite_path(store: Any) -> str | None:
    config = store.config
    if config.online_store.type != "sqlite":
        return None
    path = config.online_store.path
    return path if os.path.isabs(path) else os.path.join(str(config.repo_path), path)


def _coercers(store: Any, service: Any, keys: tuple[str, ...]) -> list[Callable[[Any], Any]]:
    """Per join key, a function turning a request value into the entity's Python type."""
    types: dict[str, str] = {}
    for projection in service.feature_view_projections:
        for column in store.get_feature_view(projection.name).entity_columns:
            types[column.name] = column.dtype.to_value_type().name
    return [functools.partial(check_join_key, k, value_type=types.get(k)) for k in keys]


_INT_RANGES = {"INT32": 2**31, "INT64": 2**63}


def check_join_key(name: str, value: Any, value_type: str | None) -> int | str:
    """``value`` as the Python value of a join key of Feast type ``value_type``.

    ``INT32`` and ``INT64`` keys take an integer (or a string of one) within the
    type's range; any other type takes a string (an integer is turned into one).
    A key out of its type's range would make the store's read raise, which
    would look like a store failure and count against the breaker of every
    tenant; so it is refused here, as the request's fault. Raises
    :class:`InvalidInput` naming ``entity.<name>``.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput(f"entity.{name}: expected an integer or a string, got {value!r}")
    bound = _INT_RANGES.get(value_type or "")
    if bound is None:
        return str(value)
    try:
        number = int(value)
    except ValueError:
        raise InvalidInput(f"entity.{name}: {value!r} is not an integer ({value_type})") from None
    if not -bound <= number < bound:
        raise InvalidInput(
            f"entity.{name}: {number} is outside the {value_type} range [{-bound}, {bound - 1}]"
        )
    return number
