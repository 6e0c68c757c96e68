"""ONNX versions: a registered scikit-learn/LightGBM/XGBoost version → a derived ONNX version.

The conversion uses the maintained converters: ``skl2onnx`` for scikit-learn
(probabilities as a plain tensor, no ZipMap), ``onnxmltools`` for LightGBM and
XGBoost (Boosters and their scikit-learn classifiers); a scikit-learn Pipeline
ending in a LightGBM classifier converts with that converter registered in
skl2onnx. Inputs are one float32 tensor ``[N, features]``, except for a
scikit-learn model serving scores on a DataFrame (a ColumnTransformer selecting
columns by name, string inputs): one input per column, named as the column,
``[N, 1]`` float32 for a numeric column and string for a string one (the
``initial_types`` come from the version's input schema).

Every task converts (binary and multiclass classifiers, regressors). The
converted graph is scored beside its parent on the evaluation dataset, for the
parent's task: the largest difference over every output (P(class 1), every
class probability, every predicted value) is recorded (metric
``max_abs_score_delta``). For a classifier one beyond ``TOLERANCE`` refuses the
registration (:class:`CheckFailed`, one line); for a regression, whose values
have the target's units and float32's relative precision, the difference is
divided by the largest |prediction| of the parent first (metric
``max_rel_score_delta``) and that is checked. The derived version carries the
parent's task (``mlpipe.task``, ``mlpipe.classes``).
Like a quantized version, the derived version keeps the parent's training
lineage and adds ``mlpipe.parent_version``, ``mlpipe.parent_artifact_sha256``,
``mlpipe.eval_dataset``, ``mlpipe.eval_data_sha256``, and ``mlpipe.convert``
(``onnx``), ``mlpipe.converter`` (tool and version), ``mlpipe.convert_tolerance``,
and the parent's metrics (``mlpipe.metric.*``, ``mlpipe.metrics_on``) as its quality
baseline: the graph scores within the tolerance of them.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mlpipe.config import Settings
from mlpipe.errors import CheckFailed, InvalidInput
from mlpipe.registry import tag_names
from mlpipe.registry._derived import lineage_tags, load_parent
from mlpipe.registry._flavors import FLAVORS
from mlpipe.registry._input_schema import NUMERIC_KINDS, InputSchema
from mlpipe.registry._lightgbm_flavor import booster_objective
from mlpipe.registry._onnx_flavor import OnnxFlavor
from mlpipe.registry._register import read_dataset, register_model, require_columns, require_label
from mlpipe.registry._types import VersionInfo
from mlpipe.registry._xgboost_flavor import as_booster
from mlpipe.tasks import TaskSpec

TOLERANCE = 1e-4  # the largest |score delta| an ONNX version may differ from its parent by
_SMALLEST_SCALE = 1e-12  # a regression predicting 0 everywhere is judged absolutely
CONVERTIBLE = ("sklearn", "lightgbm", "xgboost")


def register_onnx(
    settings: Settings,
    name: str,
    *,
    dataset: Path,
    parent: str | None = None,
    label: str = "label",
    tolerance: float = TOLERANCE,
    description: str | None = None,
) -> VersionInfo:
    """Register version ``parent`` (default: latest) of ``name`` converted to ONNX.

    ``dataset`` is the evaluation set (the model's features and ``label``).
    Raises NotFound (model, version or dataset missing), IntegrityError (the
    parent fails verification), InvalidInput (a parent that does not convert, a
    dataset without the needed columns) and CheckFailed (scores differ beyond
    ``tolerance``); nothing is registered when it raises.
    """
    source = load_parent(settings, name, parent)
    parent_version, loaded = source.version, source.loaded
    if loaded.flavor not in CONVERTIBLE:
        raise InvalidInput(
            f"{name}/{parent_version} is stored as {loaded.flavor}; --to-onnx converts "
            f"{', '.join(CONVERTIBLE)} versions"
        )
    frame = read_dataset(Path(dataset))
    require_label(frame, label)
    require_columns(frame, loaded.features)
    task = loaded.task
    converted, converter = convert_to_onnx(
        loaded.flavor, loaded.model, len(loaded.features), schema=loaded.input_schema
    )
    x = loaded.inputs_from(frame)  # as serving hands rows to the parent (and to the graph)
    parent_scorer = FLAVORS[loaded.flavor]().scorer(loaded.model, task)
    what = f"the ONNX conversion of {name}/{parent_version} ({converter})"
    delta, checked = _checked(parent_scorer, converted, x, task, tolerance, what, Path(dataset))
    tags = lineage_tags(source, Path(dataset))
    tags.update(_parent_metrics(source.info.tags))
    tags.update(
        {
            tag_names.CONVERT: "onnx",
            tag_names.CONVERTER: converter,
            tag_names.CONVERT_TOLERANCE: repr(float(tolerance)),
        }
    )
    deltas = {"max_abs_score_delta": delta}
    if task.task == "regression":
        deltas["max_rel_score_delta"] = checked
    tags.update(tag_names.metric_tags(deltas))
    return register_model(
        settings,
        name,
        converted,
        frame,
        loaded.features,
        label,
        tags,
        description=description,
        task=task,
    )


def check_conversion(
    flavor: Any,
    model: Any,
    frame: Any,
    features: list[str],
    task: TaskSpec,
    dataset: Path,
    tolerance: float = TOLERANCE,
) -> None:
    """Convert ``model`` (not registered yet) and score it beside the graph on ``frame``:
    ``register --model M --to-onnx`` calls it before it writes anything. Raises
    InvalidInput (it does not convert) or CheckFailed (beyond ``tolerance``)."""
    from mlpipe.registry._dataset_metrics import _as_served
    from mlpipe.registry._register import _fit_schema

    if flavor.name not in CONVERTIBLE:
        raise InvalidInput(
            f"this model is {flavor.name}; --to-onnx converts {', '.join(CONVERTIBLE)} models"
        )
    schema, _ = _fit_schema(flavor, model, frame[features], task)
    converted, converter = convert_to_onnx(flavor.name, model, len(features), schema=schema)
    x = _as_served(schema, frame[features])
    what = f"the ONNX conversion of this model ({converter})"
    _checked(flavor.scorer(model, task), converted, x, task, tolerance, what, dataset)


def _checked(
    parent_scorer: Any,
    converted: Any,
    x: Any,
    task: TaskSpec,
    tolerance: float,
    what: str,
    dataset: Path,
) -> tuple[float, float]:
    """The largest |score delta| and the figure checked against ``tolerance`` (relative for
    a regression); CheckFailed (one line) beyond it."""
    delta, scale = _deltas(parent_scorer, converted, x, task)
    checked = delta / scale
    if not checked <= tolerance:
        relative = ""
        if task.task == "regression":
            relative = f" ({checked:.3g} of its largest prediction)"
        raise CheckFailed(
            f"{what} scores up to {delta:.3g} away from it{relative} on {dataset.name} "
            f"(tolerance {tolerance:g}); not registered"
        )
    return delta, checked


def _parent_metrics(tags: dict[str, str]) -> dict[str, str]:
    """The parent's metrics, its per-class recall and what they were measured on (and which
    of them register measured): the derived version's baseline, judged as the parent's."""
    return {
        k: v
        for k, v in tags.items()
        if k.startswith(tag_names.METRIC_PREFIX) or k in tag_names.BASELINE_TAGS
    }


def max_abs_delta(
    parent_scorer: Any, converted: Any, x: np.ndarray, task: TaskSpec | None = None
) -> float:
    """The largest |output difference| between the parent and the ONNX graph on ``x``
    (over every class probability of a multiclass model)."""
    return _deltas(parent_scorer, converted, x, task or TaskSpec())[0]


def _deltas(
    parent_scorer: Any, converted: Any, x: np.ndarray, task: TaskSpec
) -> tuple[float, float]:
    """The largest |output difference| on ``x``, and the scale it is judged against: 1 for a
    classifier's probabilities, the parent's largest |prediction| for a regression."""
    with warnings.catch_warnings():  # scikit-learn's feature-name warning on arrays
        warnings.simplefilter("ignore")
        before = np.asarray(parent_scorer(x), dtype=np.float64)
    if not len(x):
        return 0.0, 1.0
    after = OnnxFlavor().scorer(converted, task)(x)
    if after.shape != before.shape:
        raise CheckFailed(
            f"the ONNX conversion gives outputs of shape {list(after.shape)}, its parent "
            f"{list(before.shape)}; not registered"
        )
    delta = float(np.max(np.abs(after - before)))
    if task.task != "regression":
        return delta, 1.0
    return delta, max(float(np.max(np.abs(before))), _SMALLEST_SCALE)


def convert_to_onnx(
    flavor: str, model: Any, n_features: int, *, schema: InputSchema | None = None
) -> tuple[Any, str]:
    """``model`` as an ONNX ModelProto, and the converter that made it (``tool==version``).

    ``schema`` (the version's inputs): a scikit-learn model scored on a DataFrame
    gets one graph input per column. Raises InvalidInput (one line, the
    converter's own message only as the cause) when the model does not convert.
    """
    try:
        with warnings.catch_warnings():  # converters warn about opsets and dtypes
            warnings.simplefilter("ignore")
            return _convert(flavor, model, n_features, schema)
    except ModuleNotFoundError as exc:
        raise InvalidInput(
            f"--to-onnx needs {exc.name}, which is not installed (install mlpipe[formats])"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - converters raise RuntimeError, NameError, …
        raise InvalidInput(f"the {flavor} model does not convert to ONNX: {_why(exc)}") from exc


_NO_CONVERTER = re.compile(r"for type '<class '([\w.]+)'>'")


def _why(exc: Exception) -> str:
    """Why a conversion failed, in mlpipe's words: the converters' messages run to a
    paragraph of advice about their own API (``initial_types``, registering converters)."""
    found = _NO_CONVERTER.search(str(exc))
    if found:
        return f"the ONNX converters have no converter for {found.group(1)}"
    return f"the converter failed ({type(exc).__name__}; --debug shows its message)"


def _convert(
    flavor: str, model: Any, n_features: int, schema: InputSchema | None = None
) -> tuple[Any, str]:
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    inputs = [("input", FloatTensorType([None, n_features]))]
    tool = f"onnxmltools=={onnxmltools.__version__}"
    if flavor == "xgboost":
        return onnxmltools.convert_xgboost(_unnamed(as_booster(model)), initial_types=inputs), tool
    if flavor == "lightgbm":
        model = _canonical_objective(model)
    if flavor == "lightgbm" or type(model).__module__.startswith("lightgbm."):
        return onnxmltools.convert_lightgbm(model, initial_types=inputs, zipmap=False), tool
    return _convert_sklearn(model, n_features, schema)


def _convert_sklearn(
    model: Any, n_features: int, schema: InputSchema | None = None
) -> tuple[Any, str]:
    import skl2onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    _register_lightgbm_converter()
    inputs: list[tuple[str, Any]] = [("input", FloatTensorType([None, n_features]))]
    if schema is not None and schema.frame:  # scored on a DataFrame: one input per column
        inputs = [
            (c.name, (FloatTensorType if c.kind in NUMERIC_KINDS else StringTensorType)([None, 1]))
            for c in schema.columns
        ]
    proto = skl2onnx.convert_sklearn(
        model,
        initial_types=inputs,
        options={"zipmap": False} if hasattr(model, "predict_proba") else None,
        # ai.onnx.ml 3: what skl2onnx writes, and the most it accepts from onnxmltools' converters
        target_opset={"": skl2onnx.get_latest_tested_opset_version(), "ai.onnx.ml": 3},
    )
    return proto, f"skl2onnx=={skl2onnx.__version__}"


def _canonical_objective(booster: Any) -> Any:
    """A copy of a LightGBM Booster naming its objective as its model file does.

    The converter reads the objective as it was given (an alias such as ``l2``
    is refused); the model file's header holds LightGBM's own name (``regression``).
    """
    import lightgbm

    copy = lightgbm.Booster(model_str=booster.model_to_string())
    objective = booster_objective(copy)
    if objective:
        copy.params = {**copy.params, "objective": objective}
    return copy


def _unnamed(booster: Any) -> Any:
    """A copy of ``booster`` without feature names (the converter reads only ``f0``, ``f1``…)."""
    copy = booster.copy()
    copy.feature_names = None
    copy.feature_types = None
    return copy


def _register_lightgbm_converter() -> None:
    """Teach skl2onnx LightGBM's classifier, for one at the end of a Pipeline.

    Not XGBoost's: onnxmltools reads ``XGBClassifier.base_score``, which XGBoost 3
    leaves unset (it estimates it from the data), and its graph scored up to 0.36
    away from the Pipeline it came from; such a Pipeline does not convert.
    """
    from lightgbm import LGBMClassifier
    from onnxmltools.convert.lightgbm.operator_converters.LightGbm import convert_lightgbm
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import calculate_linear_classifier_output_shapes

    update_registered_converter(
        LGBMClassifier,
        "LightGbmLGBMClassifier",
        calculate_linear_classifier_output_shapes,
        convert_lightgbm,
        options={"nocl": [True, False], "zipmap": [True, False, "columns"]},
    )
