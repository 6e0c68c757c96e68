"""Registering a version: check the candidate and its data, fill in lineage, log it.

Every version carries, as tags: the training data's sha256, the FeatureService
and the sha256 of its definition, the model's input features, the artifact's
sha256, the git commit, the skops types it is trusted to load, its task
(``mlpipe.task``, and ``mlpipe.classes`` for a classifier: see :mod:`mlpipe.tasks`),
its decision threshold (binary only) and its metrics: those given, and its own
measured on its dataset or a holdout (its quality baseline, see ``_baseline``).
Nothing is written before every check has passed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpipe.config import Settings
from mlpipe.errors import InvalidInput, NotFound
from mlpipe.features import describe_service
from mlpipe.registry import _lineage, _registration, tag_names
from mlpipe.registry._baseline import Baseline, measured_tags, read_holdout, with_measured
from mlpipe.registry._candidate import TRUST_PICKLE, read_candidate
from mlpipe.registry._client import client, first_line, mlflow_errors
from mlpipe.registry._flavors import for_candidate
from mlpipe.registry._input_schema import UNSEEN, InputColumn, InputSchema, infer_schema
from mlpipe.registry._model_flavor import ModelFlavor
from mlpipe.registry._types import VersionInfo
from mlpipe.tasks import OutputError, Task, TaskSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import pandas as pd

REFERENCE_ROWS = 5000
SAMPLE_ROWS = 100  # scored at registration, as serving scores them


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
    threshold: float | None = None,
    trust: tuple[str, ...] = (),
    description: str | None = None,
    features: list[str] | None = None,
    task: Task | None = None,
    to_onnx: bool = False,
    eval_dataset: Path | None = None,
) -> VersionInfo:
    """Register a new version of ``name`` with full lineage and return it.

    The version's own metrics (its quality baseline, :mod:`._baseline`) are
    measured on ``eval_dataset`` (a holdout with the same input columns and
    ``label``) when given, else on ``dataset``; those in ``metrics`` win.

    ``to_onnx``: the model must also convert to ONNX within the tolerance (see
    :func:`check_conversion`; the caller then registers the ONNX version with
    ``register_onnx``), else nothing is registered.

    ``features`` names the model's inputs among the dataset's columns (default:
    the columns the model names, else every column but the label). The task
    (binary, multiclass, regression) is inferred from the model; ``task``
    declares it where the model cannot tell and is checked where it can.
    ``threshold`` (default 0.5) applies to binary classifiers only. Raises
    NotFound (model path, run or dataset missing; unknown feature service) and
    InvalidInput (a model mlpipe does not register, a task it cannot tell or
    one that contradicts ``task``, a threshold for a model that is not binary,
    untrusted types, dataset lacks the model's features or the label, bad
    threshold, the model fails on the dataset as serving would score it; a
    pickle from an MLflow directory or a run without ``"pickle"`` in ``trust``,
    or any pickle while ``MLFLOW_ALLOW_PICKLE_DESERIALIZATION=false``; an
    ``eval_dataset`` that is missing (NotFound), empty, lacks the label or an
    input, holds labels or values the model cannot be judged on, or is
    ``dataset`` itself, see :func:`._baseline.read_holdout`).
    Nothing is written before all checks pass.
    """
    if (model_path is None) == (run_id is None):
        raise InvalidInput("give exactly one of --model PATH or --run RUN_ID")
    if threshold is not None and not 0.0 < threshold < 1.0:
        raise InvalidInput(f"--threshold must be between 0 and 1, got {threshold:g}")
    _check_name(name)
    trust_pickle = TRUST_PICKLE in trust
    trust = tuple(t for t in trust if t != TRUST_PICKLE)
    model = _read_model(settings, model_path, run_id, trust_pickle)
    flavor = for_candidate(model)
    spec = _with_threshold(flavor.task_of(model, task), threshold)
    frame = read_dataset(dataset)
    inputs = _model_features(flavor, model, frame, label, features)
    baseline = Baseline(frame, label, Path(dataset))
    if eval_dataset is not None:
        baseline = read_holdout(
            eval_dataset, features=inputs, label=label, task=spec, training=dataset
        )
    tags = _lineage_tags(settings, dataset, feature_service, inputs, spec, metrics or {})
    if run_id:
        tags[tag_names.SOURCE_RUN] = run_id
    if to_onnx:
        from mlpipe.registry._onnx_convert import check_conversion

        check_conversion(flavor, model, frame, inputs, spec, Path(dataset))
    return register_model(
        settings,
        name,
        model,
        frame,
        inputs,
        label,
        tags,
        trust,
        description,
        task=spec,
        baseline=baseline,
    )


def _with_threshold(spec: TaskSpec, threshold: float | None) -> TaskSpec:
    """``spec`` with the --threshold given; refused (one line) for a model not binary."""
    if threshold is None:
        return spec
    if spec.task != "binary":
        raise InvalidInput(
            f"--threshold applies to binary classifiers; this model is {spec.describe()}"
        )
    return dataclasses.replace(spec, threshold=threshold)


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
    *,
    task: TaskSpec | None = None,
    baseline: Baseline | None = None,
) -> VersionInfo:
    """Log an in-memory ``model`` with ``tags`` (lineage already filled in) as a new version.

    With ``baseline`` (``frame`` itself or a holdout) the version's own metrics
    on it are recorded as its quality baseline (:mod:`._baseline`), beside the
    metrics ``tags`` holds already, which win.

    The flavor comes from the object (see ``_flavors``); the task is ``task``
    (a derived version passes its parent's), checked against the model's, or
    inferred from the model. The task is recorded as tags, the threshold only
    for a binary model. Raises InvalidInput if it is no model mlpipe registers,
    its task cannot be told or differs from ``task``, it fails on the data or
    its output on the data does not fit its task.
    """
    flavor = for_candidate(model)
    spec = _task_for(flavor, model, task)
    tags = {**tags, tag_names.FLAVOR: flavor.name, **flavor.registration_tags(model, trust)}
    tags.setdefault(tag_names.LABEL, label)  # a derived version keeps its parent's
    tags.update(spec.to_tags())
    if spec.task != "binary":
        tags.pop(tag_names.THRESHOLD, None)
    signature, reference, schema = _signature_and_reference(
        flavor, model, frame, features, label, spec
    )
    tags[tag_names.INPUT_SCHEMA] = schema.to_json()
    if baseline is not None:
        scoring = _Scoring(flavor, model, spec)
        measured = measured_tags(
            spec, lambda x: _check_scores(scoring, x, features), schema, features, baseline
        )
        tags = with_measured(tags, measured)
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
    return VersionInfo.from_mlflow(mv)


def _task_for(flavor: ModelFlavor, model: Any, given: TaskSpec | None) -> TaskSpec:
    """``given`` once the model agrees with it (task and number of classes), else the
    model's own task."""
    if given is None:
        return flavor.task_of(model, None)
    inferred = flavor.task_of(model, given.task)
    if len(inferred.classes) != len(given.classes):
        raise InvalidInput(
            f"the {flavor.name} model has {len(inferred.classes)} classes, but its task "
            f"says {given.describe()}"
        )
    return given


# ASCII only, so that "fraud" with a Cyrillic "а" is not a second model that looks like it;
# a leading letter or digit, so that a name is never ".." in a report path.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise InvalidInput(
            f"model name {name!r} must be 1-128 ASCII letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def _read_model(
    settings: Settings, model_path: Path | None, run_id: str | None, trust_pickle: bool
) -> Any:
    if model_path is not None:
        return read_candidate(Path(model_path), trust_pickle=trust_pickle)
    import mlflow

    client(settings)
    with mlflow_errors(f"run {run_id}"), tempfile.TemporaryDirectory() as tmp:
        local = mlflow.artifacts.download_artifacts(f"runs:/{run_id}/model", dst_path=tmp)
        return read_candidate(Path(local), trust_pickle=trust_pickle, source=f"run {run_id}")


def read_dataset(path: Path) -> pd.DataFrame:
    """A CSV (by suffix) or Parquet file; NotFound if missing, InvalidInput if unreadable."""
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


def _model_features(
    flavor: ModelFlavor, model: Any, frame: pd.DataFrame, label: str, given: list[str] | None
) -> list[str]:
    """The columns the model names, else those ``given`` (--features), else all but the label."""
    require_label(frame, label)
    if given is not None:
        _check_given(given, label)
        require_columns(frame, given, flag=" (named with --features)")
    names = flavor.input_names(model)
    if names is not None and given is not None and set(names) != set(given):
        raise InvalidInput(
            f"--features names {_listed(given)}, but the model was fit on {_listed(names)}"
        )
    features = names if names is not None else given
    if features is None:
        features = [str(c) for c in frame.columns if c != label]
    require_columns(frame, features)
    return features


def _check_given(given: list[str], label: str) -> None:
    if not given or any(not g for g in given):
        raise InvalidInput("--features takes column names separated by commas, e.g. a,b,c")
    if label in given:
        raise InvalidInput(f"--features names the label column {label!r}")
    if len(set(given)) != len(given):
        raise InvalidInput(f"--features names a column twice: {_listed(given)}")


def require_label(frame: pd.DataFrame, label: str) -> None:
    """Raise InvalidInput if the dataset has no column ``label``."""
    if label not in frame.columns:
        raise InvalidInput(
            f"the dataset has no label column {label!r} (name it with --label; its columns: "
            f"{_listed(frame.columns)})"
        )


def _listed(names: Any, limit: int = 12) -> str:
    """``a, b, c`` for the first ``limit`` names, and how many more."""
    names = [str(n) for n in names]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def require_columns(frame: pd.DataFrame, columns: list[str], flag: str = "") -> None:
    """Raise InvalidInput naming the ``columns`` the dataset lacks, if any."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InvalidInput(
            f"dataset lacks column(s) the model needs{flag}: {', '.join(missing)} "
            f"(its columns: {_listed(frame.columns)})"
        )


def _lineage_tags(
    settings: Settings,
    dataset: Path,
    feature_service: str | None,
    features: list[str],
    task: TaskSpec,
    metrics: dict[str, float],
) -> dict[str, str]:
    tags = {
        tag_names.DATA_SHA256: _lineage.file_sha256(Path(dataset)),
        tag_names.DATASET: Path(dataset).name,
        tag_names.FEATURES: json.dumps(features),
        **task.to_tags(),
    }
    if task.task == "binary":
        tags[tag_names.THRESHOLD] = repr(float(task.threshold))
    if feature_service:
        spec = describe_service(settings, feature_service)
        tags[tag_names.FEATURE_SERVICE] = feature_service
        tags[tag_names.FEATURE_SERVICE_SHA256] = spec.definition_sha256
    commit = _lineage.git_commit(settings.home)
    if commit:
        tags[tag_names.GIT_COMMIT] = commit
    tags.update(tag_names.metric_tags(metrics))
    return tags


def _signature_and_reference(
    flavor: ModelFlavor,
    model: Any,
    frame: pd.DataFrame,
    features: list[str],
    label: str,
    task: TaskSpec,
) -> tuple[Any, pd.DataFrame, InputSchema]:
    """The model's MLflow signature, the training reference sample and the input schema.

    The schema's ``frame`` (how serving scores it) is found by scoring the
    dataset's first rows the way serving would (:func:`_fit_schema`). The
    reference keeps the label column as the dataset gives it (class names,
    numeric targets).
    """
    from mlflow.models import infer_signature

    x = frame[features]
    schema, scores = _fit_schema(flavor, model, x, task)
    with warnings.catch_warnings():  # MLflow's hint about integer columns, on every call
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer")
        signature = infer_signature(x.head(SAMPLE_ROWS), scores)
    reference = frame[features].assign(label=frame[label].to_numpy())
    reference = reference.sample(min(len(reference), REFERENCE_ROWS), random_state=0)
    return signature, reference, schema


class _Scoring:
    """A candidate scored as serving will score it: its flavor's scorer for its task."""

    def __init__(self, flavor: ModelFlavor, model: Any, task: TaskSpec) -> None:
        self.flavor = flavor
        self.task = task
        self.score = flavor.scorer(model, task)


def _fit_schema(
    flavor: ModelFlavor, model: Any, x: pd.DataFrame, task: TaskSpec | None = None
) -> tuple[InputSchema, np.ndarray]:
    """The schema of the inputs ``x`` and the scores of its first rows, scored as serving will
    for ``task`` (default: the model's own).

    All-numeric inputs are tried on a float array first (serving's fast path);
    a model that fails on it (a ColumnTransformer selecting columns by name) or
    any string input goes to a DataFrame built by :meth:`InputSchema.to_frame`,
    from the values as serving's validation hands them over. String inputs the
    model scores an unseen category for are marked ``open``.
    """
    import numpy as np

    scoring = _Scoring(flavor, model, task or flavor.task_of(model, None))
    schema = infer_schema(x)  # the categories seen in the whole dataset
    x = x.head(SAMPLE_ROWS)
    if schema.numeric:
        try:
            array = x.to_numpy(dtype=np.float64)  # as serving builds it
            scores = _check_scores(scoring, array, list(x.columns))
        except InvalidInput as array_failure:
            try:
                return _frame_scores(scoring, schema.with_frame(True), x)
            except InvalidInput:
                raise array_failure from None
        first = array[:1].tolist()
        return _probe_missing(scoring, schema, first, _float_array), scores
    return _frame_scores(scoring, schema.with_frame(True), x)


def _float_array(rows: list[list[Any]]) -> np.ndarray:
    import numpy as np

    return np.asarray(rows, dtype=np.float64)


def _probe_missing(
    scoring: _Scoring,
    schema: InputSchema,
    first: list[list[Any]],
    build: Callable[[list[list[Any]]], Any],
) -> InputSchema:
    """The schema with the inputs the model scores a missing value for marked ``nullable``.

    Each input is probed on the dataset's first row with that input missing
    (NaN, built by ``build`` as serving builds the model's input); all the
    probes are tried as one batch first, and one by one only if it fails.
    """
    if not first:
        return schema
    row = first[0]
    probes = [[*row[:i], c.empty, *row[i + 1 :]] for i, c in enumerate(schema.columns)]
    if _scores_quietly(scoring, build(probes)):
        return schema.with_nullable(set(schema.names))
    taken = {
        c.name
        for c, probe in zip(schema.columns, probes, strict=True)
        if _scores_quietly(scoring, build([probe]))
    }
    return schema.with_nullable(taken)


def _frame_scores(
    scoring: _Scoring, schema: InputSchema, x: pd.DataFrame
) -> tuple[InputSchema, np.ndarray]:
    rows = [
        [_as_served(c, v) for c, v in zip(schema.columns, row, strict=True)]
        for row in x.itertuples(index=False)
    ]
    scores = _check_scores(scoring, schema.to_frame(rows), schema.names)
    opened = set()
    for i, column in enumerate(schema.columns):
        if column.kind == "string" and column.categories is not None and rows:
            probe = [[*rows[0][:i], UNSEEN, *rows[0][i + 1 :]]]
            if _scores_quietly(scoring, schema.to_frame(probe)):
                opened.add(column.name)
    return _probe_missing(scoring, schema.opened(opened), rows[:1], schema.to_frame), scores


def _as_served(column: InputColumn, value: Any) -> Any:
    """A dataset value as serving's validation hands it to the model (missing: NaN)."""
    import pandas as pd

    if pd.isna(value):
        return column.empty
    return column.check(value.item() if hasattr(value, "item") else value)


def _scores_quietly(scoring: _Scoring, x: Any) -> bool:
    """Whether the model gives its task's output for the rows of ``x``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scoring.task.check_output(scoring.score(x), len(x))
    except Exception:  # noqa: BLE001 - refusing the value is what is being probed
        return False
    return True


def _check_scores(scoring: _Scoring, x: Any, columns: list[str]) -> np.ndarray:
    """The output for the rows of ``x``, checked against the task (InvalidInput, one line)."""
    import numpy as np

    name = scoring.flavor.name
    try:
        with warnings.catch_warnings():  # the model's own warnings are not the user's output
            warnings.simplefilter("ignore")
            out = scoring.score(x)
    except InvalidInput:
        raise
    except Exception as exc:  # noqa: BLE001 - any library's failure on the user's data
        raise InvalidInput(
            f"the {name} model fails on the dataset's first rows, given the "
            f"{len(columns)} columns {_listed(columns)}: "
            f"{type(exc).__name__}: {first_line(exc)}"
        ) from exc
    try:
        return scoring.task.check_output(out, len(x))
    except OutputError as exc:
        head = np.asarray(out).reshape(-1)[:3].tolist() if np.size(out) else []
        raise InvalidInput(
            f"the {name} model's output does not fit a {scoring.task.describe()} model: on "
            f"the dataset's first rows {exc} (values {head}){_HINTS[scoring.task.task]}"
        ) from exc


_HINTS = {
    "binary": " (end a torch model with a sigmoid or softmax)",
    "multiclass": " (end a torch model with a softmax)",
    "regression": "",
}
