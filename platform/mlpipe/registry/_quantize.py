"""Quantized versions: a registered torch version → a derived version in FP16, BF16 or INT8.

The derived version is registered under the same model name, like any other
version (deploy it as a canary to compare it live). Its tags keep the
parent's training lineage (data, features, feature service, threshold) and add:

- ``mlpipe.parent_version`` (``NAME/V``) and ``mlpipe.parent_artifact_sha256``;
- ``mlpipe.quantize`` (the recipe name) and ``mlpipe.quantize_recipe`` (what it did);
- ``mlpipe.eval_dataset`` and ``mlpipe.eval_data_sha256``;
- metrics ``accuracy`` (of the derived version), ``accuracy_delta`` (derived
  minus parent, at the version's threshold) and ``max_abs_score_delta``: the
  largest score difference on the evaluation set, the tolerance the two agree within;
- metrics ``recall_class_<c>`` per class at the threshold and ``auc``, each beside
  the parent's (``parent_recall_class_<c>``, ``parent_auc``).

The quantization guard: accuracy hides a cliff on imbalanced data (an INT8 MLP
whose fraud recall went 0.31 → 0.00 registered with ``accuracy_delta`` −0.008),
so a per-class recall drop beyond ``RECALL_TOLERANCE`` or an AUC drop beyond
``AUC_TOLERANCE`` refuses the registration (:class:`CheckFailed`, exit 1, the
class and figures named) unless ``accept_degradation``, which is then recorded
in the ``mlpipe.accepted_degradation`` tag.

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
from mlpipe.errors import CheckFailed, InvalidInput
from mlpipe.registry import _tags
from mlpipe.registry._derived import lineage_tags, load_parent
from mlpipe.registry._register import read_dataset, register_model, require_columns
from mlpipe.registry._torch_flavor import torch_scorer
from mlpipe.registry._types import VersionInfo

RECIPES = {
    "fp16": "weights cast to float16",
    "bf16": "weights cast to bfloat16",
    "int8": "dynamic INT8 of Linear layers (torch.ao quantize_dynamic_jit, per-tensor qint8)",
}
RECALL_TOLERANCE = 0.05  # absolute drop in any class's recall at the threshold
AUC_TOLERANCE = 0.02  # absolute drop in ROC AUC
ACCEPTED_DEGRADATION = _tags.TAG + "accepted_degradation"


def register_quantized(
    settings: Settings,
    name: str,
    *,
    recipe: str,
    dataset: Path,
    parent: str | None = None,
    label: str = "label",
    description: str | None = None,
    accept_degradation: bool = False,
) -> VersionInfo:
    """Register ``recipe`` applied to version ``parent`` (default: latest) of ``name``.

    ``dataset`` is the evaluation set (the model's features and ``label``).
    Raises NotFound (model, version or dataset missing), IntegrityError (the
    parent's artifact fails verification), InvalidInput (unknown recipe, a
    parent that is not a torch model, a dataset without the needed columns)
    and CheckFailed (a class's recall or the AUC drops beyond its tolerance,
    unless ``accept_degradation``); nothing is registered when it raises.
    """
    if recipe not in RECIPES:
        raise InvalidInput(f"--quantize must be one of {', '.join(RECIPES)}, got {recipe!r}")
    source = load_parent(settings, name, parent)
    parent_version, loaded = source.version, source.loaded
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
    drops = degradation(delta)
    if drops and not accept_degradation:
        raise CheckFailed(
            f"{recipe} of {name}/{parent_version} degrades it on {Path(dataset).name}: "
            f"{'; '.join(drops)}; not registered (--accept-degradation registers it anyway, "
            "recorded as a tag)"
        )
    tags = lineage_tags(source, Path(dataset))
    if accept_degradation:
        tags[ACCEPTED_DEGRADATION] = "; ".join(drops) or "none beyond tolerance"
    tags.update({_tags.QUANTIZE: recipe, _tags.QUANTIZE_RECIPE: RECIPES[recipe]})
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
    """The derived model's figures beside the parent's (``parent_*``) on ``x``, ``y``.

    Accuracy and its delta, the largest score change, recall per class at
    ``threshold`` and ROC AUC (NaN with a single class).
    """
    before = torch_scorer(parent, "cpu")(x)
    after = torch_scorer(derived, "cpu")(x)
    acc_before = float(np.mean((before >= threshold) == y))
    acc_after = float(np.mean((after >= threshold) == y))
    figures = {
        "accuracy": acc_after,
        "accuracy_delta": acc_after - acc_before,
        "max_abs_score_delta": float(np.max(np.abs(after - before))),
    }
    for prefix, scores in (("", after), ("parent_", before)):
        figures.update({prefix + k: v for k, v in _class_figures(scores, y, threshold).items()})
    return figures


def _class_figures(scores: np.ndarray, y: np.ndarray, threshold: float) -> dict[str, float]:
    """Recall of each class (share of its rows labelled as it) and ROC AUC."""
    from scipy.stats import rankdata

    predicted = (scores >= threshold).astype(int)
    truth = y.astype(int)
    figures = {f"recall_class_{c}": float(np.mean(predicted[truth == c] == c)) for c in (0, 1)}
    positives, negatives = int(truth.sum()), int(len(truth) - truth.sum())
    ranks = rankdata(scores)
    wins = ranks[truth == 1].sum() - positives * (positives + 1) / 2
    figures["auc"] = float(wins / (positives * negatives)) if positives and negatives else np.nan
    return figures


def degradation(figures: dict[str, float]) -> list[str]:
    """Each class recall or AUC of the derived version that fell beyond its tolerance."""
    drops = []
    for key in sorted(k for k in figures if k.startswith("recall_class_") or k == "auc"):
        before, after = figures["parent_" + key], figures[key]
        tolerance = AUC_TOLERANCE if key == "auc" else RECALL_TOLERANCE
        if before - after > tolerance:
            what = "AUC" if key == "auc" else f"recall of class {key.removeprefix('recall_class_')}"
            drops.append(f"{what} {before:.3f} -> {after:.3f} (tolerance {tolerance})")
    return drops


__all__ = ["RECIPES", "degradation", "evaluate", "quantize_module", "register_quantized"]
