"""The flavor table: a name → class table (``FLAVORS``) and the lookups into it.

A version records its flavor as the tag ``mlpipe.flavor``; versions registered
before flavors existed have none and are ``sklearn``. What each flavor does is
in :mod:`._model_flavor`; the flavors themselves are in their own modules.
"""

from __future__ import annotations

from typing import Any

from mlpipe.errors import InvalidInput
from mlpipe.registry import tag_names
from mlpipe.registry._lightgbm_flavor import LightGBMFlavor
from mlpipe.registry._model_flavor import ModelFlavor, Scorer
from mlpipe.registry._onnx_flavor import OnnxFlavor
from mlpipe.registry._sklearn_flavor import SklearnFlavor
from mlpipe.registry._torch_flavor import TorchFlavor
from mlpipe.registry._xgboost_flavor import XGBoostFlavor
from mlpipe.tasks import Task

# In the order a candidate is matched: XGBoost's classifier also has predict_proba,
# and would otherwise go to the scikit-learn flavor (skops, which does not trust it).
FLAVORS: dict[str, type[ModelFlavor]] = {
    "xgboost": XGBoostFlavor,
    "lightgbm": LightGBMFlavor,
    "onnx": OnnxFlavor,
    "sklearn": SklearnFlavor,
    "torch": TorchFlavor,
}
SUPPORTED = (
    "binary and multiclass classifiers (predict_proba) and regressors (predict) of "
    "scikit-learn/LightGBM/XGBoost, LightGBM and XGBoost Boosters, ONNX graphs, torch modules"
)


def for_candidate(model: Any) -> ModelFlavor:
    """The flavor of a candidate object; raises InvalidInput for anything else."""
    for cls in FLAVORS.values():
        flavor = cls()
        if flavor.accepts(model):
            return flavor
    raise InvalidInput(
        f"a {type(model).__name__} is not a model mlpipe registers: it registers {SUPPORTED}"
    )


def for_version(tags: dict[str, str]) -> ModelFlavor:
    """The flavor a registered version was stored with (``sklearn`` if it predates the tag)."""
    name = tags.get(tag_names.FLAVOR, "sklearn")
    cls = FLAVORS.get(name)
    if cls is None:
        raise InvalidInput(f"unknown model flavor {name!r} (known: {', '.join(FLAVORS)})")
    return cls()


def candidate_scorer(model: Any, declared: Task | None = None) -> Scorer:
    """The vectorized scorer serving would use for ``model``, shaped for its task.

    Raises InvalidInput for a model mlpipe does not register, or one whose task
    cannot be told or contradicts ``declared``.
    """
    flavor = for_candidate(model)
    return flavor.scorer(model, flavor.task_of(model, declared))
