"""The offline side of the feature layer: apply, materialize, describe, build training sets.

Every function takes the :class:`~mlpipe.config.Settings` and opens the Feast
repository at ``settings.feature_repo_path``. Feast errors come back as
:mod:`mlpipe.errors`. Feast's own chatter (``print`` and progress bars) is kept
off stdout, which belongs to the CLI's data output.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpipe.errors import InvalidInput, MlpipeError, NotFound, StoreUnavailable
from mlpipe.features._datasets import EVENT_TIMESTAMP

if TYPE_CHECKING:
    import pandas as pd
    from feast import FeatureService, FeatureStore

    from mlpipe.config import Settings

_ROW = "__mlpipe_row"


@dataclass(frozen=True)
class FeatureServiceSpec:
    """What a FeatureService serves, in the order a model sees it.

    ``features`` are plain feature names, ``refs`` the matching ``view:feature``
    references, ``defaults`` the value served when a feature is missing (its
    Field's ``default`` tag, else 0.0), ``ttl_s`` the TTL of the feature's view in
    seconds (0: never expires). ``join_key_types`` names each join key's Feast
    value type (``INT64``, ``STRING``, ...), which the gateway checks request keys
    against. ``definition_sha256`` hashes the service and its views' entity, TTL
    and field definitions; it does not depend on where the repository lives or
    when it was applied.
    """

    name: str
    features: list[str]
    refs: list[str]
    defaults: dict[str, float]
    ttl_s: dict[str, float]
    join_keys: list[str]
    definition_sha256: str
    join_key_types: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AppliedRepo:
    """The objects ``apply`` registered and the names it removed from the registry."""

    project: str
    entities: list[str]
    feature_views: list[str]
    feature_services: list[str]
    deleted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Materialized:
    """The window each feature view was loaded into the online store for."""

    end: datetime
    windows: dict[str, tuple[datetime, datetime]]


def open_store(settings: Settings) -> FeatureStore:
    """Open the Feast repository named by the settings, with its ``feature_store_yaml`` config.

    Raises :class:`NotFound` when that file (default ``feature_store.yaml``) is missing and
    :class:`InvalidInput` when Feast rejects it.
    """
    if not settings.feature_store:  # said before Feast is imported (seconds)
        raise NotFound("this project has no feature store (feature_store = false in mlpipe.toml)")
    from feast import FeatureStore

    repo = settings.feature_repo_path
    yaml_file = settings.feature_store_yaml_path
    if not yaml_file.is_file():
        raise NotFound(f"no Feast repository at {repo} ({yaml_file.name} is missing)")
    try:
        with _quiet():
            return FeatureStore(repo_path=str(repo), fs_yaml_file=yaml_file)
    except Exception as exc:
        raise InvalidInput(f"cannot open the Feast repository at {repo}: {exc}") from exc


def apply(settings: Settings) -> AppliedRepo:
    """Register the repository's definitions, as ``feast apply`` does, and drop stale ones.

    The definition modules are loaded from their files each time, so an edited
    definition is picked up within one process. Raises :class:`InvalidInput` for
    a definition Feast rejects and :class:`StoreUnavailable` when the registry
    cannot be written.
    """
    store = open_store(settings)
    from feast.repo_operations import extract_objects_for_apply_delete

    repo = _load_definitions(settings.feature_repo_path, store.project)
    try:
        with _quiet():
            # Feast leaves extract_objects_for_apply_delete unannotated.
            to_apply, to_delete, _, _ = extract_objects_for_apply_delete(  # type: ignore[no-untyped-call]
                store.project, store.registry, repo
            )
            store.apply(to_apply, objects_to_delete=to_delete, partial=False)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"Feast rejected the definitions: {exc}") from exc
    except Exception as exc:
        raise StoreUnavailable(f"feast apply failed: {exc}") from exc
    return AppliedRepo(
        project=store.project,
        entities=sorted(e.name for e in repo.entities),
        feature_views=sorted(v.name for v in repo.feature_views),
        feature_services=sorted(s.name for s in repo.feature_services),
        deleted=sorted(getattr(o, "name", str(o)) for o in to_delete),
    )


def materialize(settings: Settings, end: datetime | None = None) -> Materialized:
    """Load each feature view's latest values up to ``end`` (default: now) into the online store.

    Each view is read over ``[end - ttl, end]``: anything older would be expired
    online anyway. Raises :class:`NotFound` when nothing has been applied and
    :class:`StoreUnavailable` when Feast cannot read the sources or write the store.
    """
    store = open_store(settings)
    end = _as_utc(end) if end is not None else datetime.now(UTC)
    views = _call(store, "list the feature views", store.list_feature_views)
    if not views:
        raise NotFound(f"no feature views in {settings.feature_repo_path}: run `features apply`")
    windows: dict[str, tuple[datetime, datetime]] = {}
    for view in sorted(views, key=lambda v: v.name):
        ttl = view.ttl if view.ttl and view.ttl > timedelta(0) else timedelta(days=3650)
        windows[view.name] = (end - ttl, end)
        with _quiet():
            _call(
                store,
                f"materialize {view.name}",
                store.materialize,
                start_date=end - ttl,
                end_date=end,
                feature_views=[view.name],
            )
    return Materialized(end=end, windows=windows)


def list_services(settings: Settings) -> list[FeatureServiceSpec]:
    """Every registered FeatureService, by name. Raises like :func:`describe_service`."""
    store = open_store(settings)
    services = _call(store, "list the feature services", store.list_feature_services)
    return [_spec(store, s) for s in sorted(services, key=lambda s: s.name)]


def describe_service(settings: Settings, name: str) -> FeatureServiceSpec:
    """The features, defaults, TTLs and definition hash of one FeatureService.

    Raises :class:`NotFound` naming the service and the ones that exist, and
    :class:`StoreUnavailable` when the registry cannot be read.
    """
    store = open_store(settings)
    return _spec(store, get_service(store, name))


def get_service(store: FeatureStore, name: str) -> FeatureService:
    """Look a FeatureService up in ``store``; raises :class:`NotFound` listing the known ones."""
    from feast.errors import FeatureServiceNotFoundException

    try:
        return store.get_feature_service(name)
    except FeatureServiceNotFoundException as exc:
        known = sorted(s.name for s in _call(store, "list services", store.list_feature_services))
        have = ", ".join(known) if known else "none; run `mlpipe features apply`"
        raise NotFound(f"no feature service {name!r} (available: {have})") from exc
    except Exception as exc:
        raise StoreUnavailable(f"cannot read the Feast registry: {exc}") from exc


def training_set(settings: Settings, service: str, entities: pd.DataFrame) -> pd.DataFrame:
    """Join the service's features onto ``entities`` as of each row's ``event_timestamp``.

    A point-in-time join (Feast ``get_historical_features`` with the same
    FeatureService serving reads): each row gets the latest value whose event
    time is at or before its own and within the view's TTL; features with no such
    value get their default, as they would online. Other columns (labels,
    request-time features) pass through unchanged; every input row comes back,
    in order, with the feature columns (float64, in the service's order) after
    them. Raises :class:`InvalidInput` when a join key or ``event_timestamp`` is
    missing, :class:`NotFound` for an unknown service and :class:`StoreUnavailable`
    when the offline store fails.
    """
    import pandas as pd

    store = open_store(settings)
    feature_service = get_service(store, service)
    spec = _spec(store, feature_service)
    missing = [c for c in [*spec.join_keys, EVENT_TIMESTAMP] if c not in entities]
    if missing:
        raise InvalidInput(f"entities lack the column(s) {', '.join(missing)}")
    clash = sorted(set(spec.features) & set(entities))
    if clash:
        raise InvalidInput(f"entities already hold feature column(s) {', '.join(clash)}")
    frame = entities.reset_index(drop=True)
    frame[EVENT_TIMESTAMP] = pd.to_datetime(frame[EVENT_TIMESTAMP], utc=True)
    frame[_ROW] = range(len(frame))
    with _quiet():
        joined = _call(
            store,
            f"build a training set for {service}",
            lambda: store.get_historical_features(
                entity_df=frame, features=feature_service
            ).to_df(),
        )
    # Feast's file (dask) store drops an entity row none of whose candidate feature rows
    # falls in its TTL window, and may retype pass-through columns: so take only the
    # features from its answer and join them back onto the caller's rows.
    values = frame[[_ROW]].merge(joined[[_ROW, *spec.features]], on=_ROW, how="left")
    result = frame.drop(columns=_ROW)
    for name in spec.features:
        result[name] = values[name].astype("float64").fillna(spec.defaults[name]).to_numpy()
    return result


def _spec(store: FeatureStore, service: FeatureService) -> FeatureServiceSpec:
    features: list[str] = []
    refs: list[str] = []
    defaults: dict[str, float] = {}
    ttl_s: dict[str, float] = {}
    join_keys: list[str] = []
    join_key_types: dict[str, str] = {}
    views: list[dict[str, Any]] = []
    for projection in service.feature_view_projections:
        view = _call(store, "read the feature view", store.get_feature_view, projection.name)
        ttl = view.ttl.total_seconds() if view.ttl else 0.0
        fields = []
        for feature in projection.features:
            default = _default(view.name, feature.name, feature.tags)
            features.append(feature.name)
            # Feast leaves name_to_use unannotated (here and below).
            refs.append(f"{projection.name_to_use()}:{feature.name}")  # type: ignore[no-untyped-call]
            defaults[feature.name] = default
            ttl_s[feature.name] = ttl
            fields.append({"name": feature.name, "dtype": str(feature.dtype), "default": default})
        entity_columns = [{"name": c.name, "dtype": str(c.dtype)} for c in view.entity_columns]
        for column in view.entity_columns:
            if column.name not in join_keys:
                join_keys.append(column.name)
                join_key_types[column.name] = column.dtype.to_value_type().name
        views.append(
            {
                "view": view.name,
                "as": projection.name_to_use(),  # type: ignore[no-untyped-call]
                "ttl_s": ttl,
                "entities": entity_columns,
                "features": fields,
            }
        )
    canonical = json.dumps({"service": service.name, "views": views}, sort_keys=True)
    return FeatureServiceSpec(
        name=service.name,
        features=features,
        refs=refs,
        defaults=defaults,
        ttl_s=ttl_s,
        join_keys=join_keys,
        definition_sha256=hashlib.sha256(canonical.encode()).hexdigest(),
        join_key_types=join_key_types,
    )


def _default(view: str, feature: str, tags: dict[str, str]) -> float:
    raw = tags.get("default")
    if raw is None:
        return 0.0
    try:
        value = float(raw)
    except ValueError as exc:
        raise InvalidInput(f"{view}:{feature} has a non-numeric default tag {raw!r}") from exc
    if not math.isfinite(value):
        raise InvalidInput(f"{view}:{feature} default must be finite, got {raw!r}")
    return value


def _load_definitions(repo_path: Path, project: str) -> Any:
    """Collect Feast objects from the repo's modules, loaded from their files.

    Feast's own ``parse_repo`` imports by module name relative to the working
    directory, so a second repository in the same process would get the first
    one's cached modules; loading by path under a fresh name avoids both issues.
    """
    from feast import Entity, FeatureService, FeatureView
    from feast.data_source import DataSource
    from feast.project import Project
    from feast.repo_contents import RepoContents
    from feast.repo_operations import get_repo_files

    repo = RepoContents(
        projects=[],
        data_sources=[],
        feature_views=[],
        on_demand_feature_views=[],
        stream_feature_views=[],
        label_views=[],
        entities=[],
        feature_services=[],
        permissions=[],
    )
    buckets: list[tuple[type, list[Any]]] = [
        (Project, repo.projects),
        (DataSource, repo.data_sources),
        (Entity, repo.entities),
        (FeatureView, repo.feature_views),
        (FeatureService, repo.feature_services),
    ]
    for index, file in enumerate(get_repo_files(repo_path)):
        module = _load_module(file, f"_mlpipe_feature_repo_{index}_{file.stem}")
        for obj in vars(module).values():
            for kind, bucket in buckets:
                if isinstance(obj, kind) and not any(obj is seen for seen in bucket):
                    bucket.append(obj)
    if not repo.projects:
        repo.projects.append(Project(name=project))
    return repo


def _load_module(file: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise InvalidInput(f"cannot load feature definitions from {file}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise InvalidInput(f"{file}: the feature definitions fail to load: {exc}") from exc
    return module


def _call(store: FeatureStore, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a Feast call, translating its failures into mlpipe errors."""
    from feast.errors import FeastObjectNotFoundException

    try:
        return fn(*args, **kwargs)
    except MlpipeError:
        raise
    except FeastObjectNotFoundException as exc:
        raise NotFound(f"cannot {what}: {exc}") from exc
    except FileNotFoundError as exc:
        raise StoreUnavailable(
            f"cannot {what}: {exc.filename or exc} is missing (run `mlpipe features generate`?)"
        ) from exc
    except Exception as exc:
        raise StoreUnavailable(f"cannot {what} (project {store.project}): {exc}") from exc


def _as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep Feast's prints and progress bars off stdout/stderr; mlpipe renders its own."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield
