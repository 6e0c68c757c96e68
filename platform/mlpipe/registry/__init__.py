"""The model registry (MLflow): register versions with lineage, read them, load them verified.

Every version carries, as tags: the training data's sha256, the FeatureService
and the sha256 of its definition, the model's input features, the artifact's
sha256, the git commit, the skops types it is trusted to load, its decision
threshold and its metrics. A serving process loads a version only after the
artifact it downloads hashes to the registered value.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpipe.config import Settings
from mlpipe.errors import IntegrityError, InvalidInput, NotFound
from mlpipe.registry import _artifacts, _flavors, _lineage, _registration
from mlpipe.registry._client import client, download_tree, mlflow_errors

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from mlpipe.deployments import Deployment

TAG = "mlpipe."
REFERENCE_ROWS = 5000


@dataclass(frozen=True)
class VersionInfo:
    name: str
    version: str
    aliases: list[str]
    tags: dict[str, str]
    run_id: str | None
    source: str
    created_ms: int

    @property
    def features(self) -> list[str]:
        return json.loads(self.tags.get(TAG + "features", "[]"))

    @property
    def metrics(self) -> dict[str, float]:
        prefix = TAG + "metric."
        return {k[len(prefix) :]: float(v) for k, v in self.tags.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class ModelSummary:
    name: str
    latest_version: str | None
    aliases: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadedModel:
    """A verified, loaded version, ready to score arrays of its ``features``."""

    name: str
    version: str
    features: list[str]
    feature_service: str | None
    threshold: float
    artifact_sha256: str
    model: Any = field(repr=False)
    flavor: str = "sklearn"

    def predict_scores(self, x: np.ndarray) -> np.ndarray:
        """P(class 1) per row of ``x`` (columns in ``features`` order), vectorized."""
        return self._scorer(x)

    @property
    def _scorer(self) -> Any:
        scorer = self.__dict__.get("_cached_scorer")
        if scorer is None:
            scorer = _flavors.FLAVORS[self.flavor]().scorer(self.model)
            object.__setattr__(self, "_cached_scorer", scorer)
        return scorer


def register(
    settings: Settings,
    name: str,
    *,
    dataset: Path,
    model_path: Path | None = None,
    run_id: str | None = None,
    feature_service: str | None = None,
    label: str = "label",
    metrics: dict[str, float] | None = None,
    threshold: float = 0.5,
    trust: tuple[str, ...] = (),
    description: str | None = None,
) -> VersionInfo:
    """Register a new version of ``name`` with full lineage and return it.

    Raises NotFound (model path, run or dataset missing; unknown feature service)
    and InvalidInput (not a classifier, untrusted types, dataset lacks the model's
    features or the label, bad threshold). Nothing is written before all checks pass.
    """
    if (model_path is None) == (run_id is None):
        raise InvalidInput("give exactly one of --model PATH or --run RUN_ID")
    if not 0.0 < threshold < 1.0:
        raise InvalidInput(f"--threshold must be between 0 and 1, got {threshold:g}")
    _check_name(name)
    model = _read_model(settings, model_path, run_id)
    frame = _read_dataset(dataset)
    features = _model_features(model, frame, label)
    tags = _lineage_tags(settings, dataset, feature_service, features, threshold, metrics or {})
    if run_id:
        tags[TAG + "source_run"] = run_id
    return register_model(settings, name, model, frame, features, label, tags, trust, description)


def register_model(
    settings: Settings,
    name: str,
    model: Any,
    frame: pd.DataFrame,
    features: list[str],
    label: str,
    tags: dict[str, str],
    trust: tuple[str, ...] = (),
    description: str | None = None,
) -> VersionInfo:
    """Log an in-memory ``model`` with ``tags`` (lineage already filled in) as a new version.

    The flavor comes from the object (see ``_flavors``). Raises InvalidInput if
    it is no model mlpipe registers, or its scores on the data are no probabilities.
    """
    flavor = _flavors.for_candidate(model)
    tags = {**tags, TAG + "flavor": flavor.name, **flavor.registration_tags(model, trust)}
    return _log_and_register(settings, name, model, frame, features, label, tags, description)


def _check_name(name: str) -> None:
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise InvalidInput(f"model name {name!r} must be letters, digits, '-' or '_'")


def _read_model(settings: Settings, model_path: Path | None, run_id: str | None) -> Any:
    if model_path is not None:
        return _artifacts.read_candidate(Path(model_path))
    import mlflow

    client(settings)
    with mlflow_errors(f"run {run_id}"), tempfile.TemporaryDirectory() as tmp:
        local = mlflow.artifacts.download_artifacts(f"runs:/{run_id}/model", dst_path=tmp)
        return _artifacts.read_candidate(Path(local))


def _read_dataset(path: Path) -> pd.DataFrame:
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise NotFound(f"dataset file {path} does not exist")
    try:
        if path.suffix == ".csv":
            return pd.read_csv(path)
        return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's file
        raise InvalidInput(f"dataset {path} is not a readable CSV/Parquet file: {exc}") from exc


def _model_features(model: Any, frame: pd.DataFrame, label: str) -> list[str]:
    names = getattr(model, "feature_names_in_", None)
    features = (
        [str(n) for n in names] if names is not None else [c for c in frame.columns if c != label]
    )
    missing = [c for c in [*features, label] if c not in frame.columns]
    if missing:
        raise InvalidInput(f"dataset lacks column(s) the model needs: {', '.join(missing)}")
    return features


def _lineage_tags(
    settings: Settings,
    dataset: Path,
    feature_service: str | None,
    features: list[str],
    threshold: float,
    metrics: dict[str, float],
) -> dict[str, str]:
    tags = {
        TAG + "data_sha256": _lineage.file_sha256(Path(dataset)),
        TAG + "dataset": Path(dataset).name,
        TAG + "features": json.dumps(features),
        TAG + "threshold": repr(float(threshold)),
    }
    if feature_service:
        from mlpipe import features as feast_features

        spec = feast_features.describe_service(settings, feature_service)
        tags[TAG + "feature_service"] = feature_service
        tags[TAG + "feature_service_sha256"] = spec.definition_sha256
    commit = _lineage.git_commit(settings.home)
    if commit:
        tags[TAG + "git_commit"] = commit
    tags.update({f"{TAG}metric.{k}": repr(float(v)) for k, v in metrics.items()})
    return tags


def _log_and_register(
    settings: Settings,
    name: str,
    model: Any,
    frame: pd.DataFrame,
    features: list[str],
    label: str,
    tags: dict[str, str],
    description: str | None,
) -> VersionInfo:
    from mlflow.models import infer_signature

    flavor = _flavors.FLAVORS[tags[TAG + "flavor"]]()
    x = frame[features]
    with warnings.catch_warnings():  # MLflow's hint about integer columns, on every call
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer")
        signature = infer_signature(x.head(100), _check_scores(flavor, model, x.head(100)))
    reference = frame[features].assign(label=frame[label].to_numpy())
    reference = reference.sample(min(len(reference), REFERENCE_ROWS), random_state=0)
    mv = _registration.log_and_register(
        settings,
        name,
        flavor=flavor,
        model=model,
        signature=signature,
        reference=reference,
        tags=tags,
        description=description,
    )
    return _version_info(mv)


def _check_scores(flavor: _flavors.ModelFlavor, model: Any, x: pd.DataFrame) -> np.ndarray:
    import numpy as np

    scores = np.asarray(flavor.scorer(model)(x.to_numpy()))
    if scores.shape != (len(x),) or not ((scores >= 0) & (scores <= 1)).all():
        raise InvalidInput(
            f"the {flavor.name} model must give one probability in [0, 1] per row; on the "
            f"dataset's first rows it gave shape {scores.shape}, values {scores[:3].tolist()}"
            " (end a torch model with a sigmoid or softmax)"
        )
    return scores


def parse_ref(ref: str) -> tuple[str, str | None, str | None]:
    """``NAME``, ``NAME/VERSION`` or ``NAME@ALIAS`` → (name, version, alias)."""
    if "@" in ref:
        name, alias = ref.split("@", 1)
        return name, None, alias
    if "/" in ref:
        name, version = ref.split("/", 1)
        return name, version, None
    return ref, None, None


def show(settings: Settings, ref: str) -> VersionInfo:
    """One version by ``NAME/V``, ``NAME@alias`` or ``NAME`` (its latest). Raises NotFound."""
    name, version, alias = parse_ref(ref)
    c = client(settings)
    require_model(settings, name)
    with mlflow_errors(f"{ref}"):
        if alias:
            mv = c.get_model_version_by_alias(name, alias)
        elif version:
            mv = _get_version(settings, name, version)
        else:
            versions = c.search_model_versions(f"name='{name}'")
            mv = max(versions, key=lambda v: int(v.version))
    return _version_info(mv)


def _version_info(mv: Any) -> VersionInfo:
    return VersionInfo(
        name=mv.name,
        version=str(mv.version),
        aliases=list(mv.aliases or []),
        tags=dict(mv.tags or {}),
        run_id=mv.run_id,
        source=mv.source,
        created_ms=int(mv.creation_timestamp or 0),
    )


def list_models(settings: Settings) -> list[ModelSummary]:
    """Every registered model with its latest version and aliases."""
    c = client(settings)
    with mlflow_errors("registry"):
        models = c.search_registered_models()
    summaries = []
    for m in models:
        latest = max((int(v.version) for v in (m.latest_versions or [])), default=None)
        summaries.append(
            ModelSummary(
                name=m.name,
                latest_version=str(latest) if latest is not None else None,
                aliases=dict(m.aliases or {}),
            )
        )
    return summaries


def require_model(settings: Settings, name: str) -> None:
    """Raise NotFound unless ``name`` is a registered model; StoreUnavailable when the
    registry cannot be asked (an outage is never reported as a missing model)."""
    from mlflow.exceptions import MlflowException

    try:
        client(settings).get_registered_model(name)
    except MlflowException as exc:
        if not _absent(exc):
            with mlflow_errors(f"model {name}"):
                raise
        raise NotFound(f"no registered model named {name!r}") from exc


def _absent(exc: Any) -> bool:
    """An MLflow error that means "no such thing" (an invalid name cannot exist either)."""
    return exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")


def require_version(settings: Settings, name: str, version: str) -> None:
    """Raise NotFound unless ``name`` has a version ``version``."""
    require_model(settings, name)
    _get_version(settings, name, version)


def _get_version(settings: Settings, name: str, version: str) -> Any:
    from mlflow.exceptions import MlflowException

    c = client(settings)
    try:
        return c.get_model_version(name, str(version))
    except MlflowException as exc:
        if not _absent(exc):
            with mlflow_errors(f"{name}/{version}"):
                raise
        with mlflow_errors(f"versions of {name}"):
            versions = sorted(int(v.version) for v in c.search_model_versions(f"name='{name}'"))
        have = ", ".join(map(str, versions)) or "none"
        raise NotFound(f"{name} has no version {version} (versions: {have})") from exc


def mirror_aliases(settings: Settings, deployment: Deployment) -> None:
    """Set/delete ``@champion @canary @shadow @previous`` to match the record."""
    from mlflow.exceptions import MlflowException

    c = client(settings)
    with mlflow_errors(
        f"generation {deployment.generation} of {deployment.model} is committed, but MLflow "
        "aliases could not be mirrored (the next deploy/promote/rollback re-mirrors them)"
    ):
        for alias, version in deployment.aliases().items():
            if version is not None:
                c.set_registered_model_alias(deployment.model, alias, version)
                continue
            try:
                c.delete_registered_model_alias(deployment.model, alias)
            except MlflowException as exc:
                if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise


def load_verified(settings: Settings, name: str, version: str) -> LoadedModel:
    """Download, verify (sha256 against the registry tag) and load one version.

    Raises IntegrityError if the artifact's bytes differ from what was
    registered (or no hash was recorded), NotFound if the version is unknown,
    StoreUnavailable if the registry or its artifact store cannot be reached
    (or hands back no files).
    """
    info = show(settings, f"{name}/{version}")
    expected = info.tags.get(TAG + "artifact_sha256")
    if not expected:
        raise IntegrityError(f"{name}/{version} has no {TAG}artifact_sha256 tag; refusing to load")
    with mlflow_errors(f"{name}/{version}"), tempfile.TemporaryDirectory() as tmp:
        local = download_tree(info.source, tmp, f"artifact of {name}/{version}")
        actual = _lineage.tree_sha256(local)
        if actual != expected:
            raise IntegrityError(
                f"artifact of {name}/{version} hashes to {actual[:16]}…, but the registry "
                f"records {expected[:16]}…; refusing to load it"
            )
        flavor = _flavors.for_version(info.tags)
        model = flavor.load(local, info.tags)
    return LoadedModel(
        name=name,
        version=str(version),
        features=info.features,
        feature_service=info.tags.get(TAG + "feature_service"),
        threshold=float(info.tags.get(TAG + "threshold", "0.5")),
        artifact_sha256=expected,
        model=model,
        flavor=flavor.name,
    )


def load_reference(settings: Settings, name: str, version: str) -> pd.DataFrame:
    """The training reference stored at registration: model inputs plus ``label``."""
    import mlflow
    import pandas as pd

    info = show(settings, f"{name}/{version}")
    uri = info.tags.get(TAG + "reference_uri")
    if not uri:
        raise NotFound(f"{name}/{version} has no stored training reference")
    with mlflow_errors(f"reference of {name}/{version}"), tempfile.TemporaryDirectory() as tmp:
        return pd.read_parquet(mlflow.artifacts.download_artifacts(uri, dst_path=tmp))


__all__ = [
    "LoadedModel",
    "ModelSummary",
    "VersionInfo",
    "list_models",
    "load_reference",
    "load_verified",
    "mirror_aliases",
    "parse_ref",
    "register",
    "register_model",
    "require_model",
    "require_version",
    "show",
]
