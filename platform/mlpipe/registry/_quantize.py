"""Quantized versions: a registered torch version → a derived version in FP16, BF16 or INT8.

The derived version is registered under the same model name, like any other
version (deploy it as a canary to compare it live). Its tags keep the
parent's training lineage (data, features, feature service, threshold) and add:

- ``mlpipe.parent_version`` (``NAME/V``) and ``mlpipe.parent_artifact_sha256``;
- ``mlpipe.quantize`` (the recipe name) and ``mlpipe.quantize_recipe`` (what it did);
- ``mlpipe.eval_dataset`` and ``mlpipe.eval_data_sha256``;
- metrics ``accuracy`` (of the derived version), ``accuracy_delta`` (derived
  minus parent, at the version's threshold) and ``max_abs_score_delta``: the
  largest score difference on the evaluation set, the tolerance the two agree within.

Recipes: ``fp16`` and ``bf16`` cast the weights (scored on the CPU here, on a
GPU where there is one); ``int8`` is dynamic INT8 of every ``Linear`` layer
(``torch.ao.quantization.quantize_dynamic_jit``; CPU kernels only).
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.registry import _lineage, _tags
from mlpipe.registry._load import load_verified
from mlpipe.registry._read import show
from mlpipe.registry._register import read_dataset, register_model, require_columns
from mlpipe.registry._torch_flavor import torch_scorer
from mlpipe.registry._types import VersionInfo

RECIPES = {
    "fp16": "weights cast to float16",
    "bf16": "weights cast to bfloat16",
    "int8": "dynamic INT8 of Linear layers (torch.ao quantize_dynamic_jit, per-tensor qint8)",
}
# Tags of the parent that describe its training, carried to the derived version.
_INHERITED = (
    _tags.DATA_SHA256,
    _tags.DATASET,
    _tags.FEATURES,
    _tags.FEATURE_SERVICE,
    _tags.FEATURE_SERVICE_SHA256,
    _tags.THRESHOLD,
    _tags.GIT_COMMIT,
)


def register_quantized(
    settings: Settings,
    name: str,
    *,
    recipe: str,
    dataset: Path,
    parent: str | None = None,
    label: str = "label",
    description: str | None = None,
) -> VersionInfo:
    """Register ``recipe`` applied to version ``parent`` (default: latest) of ``name``.

    ``dataset`` is the evaluation set (the model's features and ``label``).
    Raises NotFound (model, version or dataset missing), IntegrityError (the
    parent's artifact fails verification) and InvalidInput (unknown recipe, a
    parent that is not a torch model, a dataset without the needed columns).
    """
    if recipe not in RECIPES:
        raise InvalidInput(f"--quantize must be one of {', '.join(RECIPES)}, got {recipe!r}")
    parent_version = parent or show(settings, name).version
    info = show(settings, f"{name}/{parent_version}")
    loaded = load_verified(settings, name, parent_version)
    if loaded.flavor != "torch":
        raise InvalidInput(
            f"{name}/{parent_version} is a {loaded.flavor} model; only torch versions quantize"
        )
    frame = read_dataset(Path(dataset))
    require_columns(frame, [*loaded.features, label])
    derived = quantize_module(loaded.model, recipe)
    x = frame[loaded.features].to_numpy(dtype=np.float32)
    y = frame[label].to_numpy()
    delta = evaluate(loaded.model, derived, x, y, loaded.threshold)
    tags = {k: info.tags[k] for k in _INHERITED if k in info.tags}
    tags.update(
        {
            _tags.PARENT_VERSION: f"{name}/{parent_version}",
            _tags.PARENT_ARTIFACT_SHA256: loaded.artifact_sha256,
            _tags.QUANTIZE: recipe,
            _tags.QUANTIZE_RECIPE: RECIPES[recipe],
            _tags.EVAL_DATASET: Path(dataset).name,
            _tags.EVAL_DATA_SHA256: _lineage.file_sha256(Path(dataset)),
        }
    )
    tags.update(_tags.metric_tags(delta))
    return register_model(
        settings, name, derived, frame, loaded.features, label, tags, description=description
    )


def quantize_module(model: Any, recipe: str) -> Any:
    """A quantized TorchScript copy of ``model`` (which is left as it was)."""
    import torch

    buffer = io.BytesIO()
    torch.jit.save(model, buffer)
    buffer.seek(0)
    copy = torch.jit.load(buffer, map_location="cpu").eval()
    if recipe == "fp16":
        return copy.half()
    if recipe == "bf16":
        return copy.to(torch.bfloat16)
    with warnings.catch_warnings():  # torch.ao.quantization warns it will move to torchao
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic_jit

        return quantize_dynamic_jit(copy, {"": default_dynamic_qconfig})


def evaluate(
    parent: Any, derived: Any, x: np.ndarray, y: np.ndarray, threshold: float
) -> dict[str, float]:
    """Accuracy of the derived model, its delta to the parent's, the largest score change."""
    before = torch_scorer(parent, "cpu")(x)
    after = torch_scorer(derived, "cpu")(x)
    acc_before = float(np.mean((before >= threshold) == y))
    acc_after = float(np.mean((after >= threshold) == y))
    return {
        "accuracy": acc_after,
        "accuracy_delta": acc_after - acc_before,
        "max_abs_score_delta": float(np.max(np.abs(after - before))),
    }


__all__ = ["RECIPES", "evaluate", "quantize_module", "register_quantized"]
