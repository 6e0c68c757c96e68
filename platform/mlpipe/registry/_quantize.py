"""Quantized versions: a registered torch version → a derived version in FP16, BF16 or INT8.

The derived version is registered under the same model name, like any other
version (deploy it as a canary to compare it live), with its parent's task. Its
tags keep the parent's training lineage (data, features, feature service,
threshold) and add:

- ``mlpipe.parent_version`` (``NAME/V``) and ``mlpipe.parent_artifact_sha256``;
- ``mlpipe.quantize`` (the recipe name) and ``mlpipe.quantize_recipe`` (what it did);
- ``mlpipe.eval_dataset`` and ``mlpipe.eval_data_sha256``;
- the metrics of the derived version on the evaluation set beside the parent's
  (``parent_*``), by task (:mod:`._quantize_figures`): a binary version's accuracy,
  ``accuracy_delta``, ``max_abs_score_delta``, recall per class and AUC; a multiclass
  version's accuracy, ``accuracy_delta``, ``max_abs_probability_delta``, recall per
  class (argmax) and ``macro_f1``; a regression's ``mae``, ``rmse``, ``mae_delta`` and
  ``max_abs_prediction_delta``.

The quantization guard: accuracy hides a cliff on imbalanced data (an INT8 MLP
whose fraud recall went 0.31 → 0.00 registered with ``accuracy_delta`` −0.008),
so a per-class recall drop beyond ``RECALL_TOLERANCE``, an AUC drop beyond
``AUC_TOLERANCE`` or (regression) an MAE increase beyond ``MAE_TOLERANCE`` of the
parent's refuses the registration (:class:`CheckFailed`, exit 1, the figures
named) unless ``accept_degradation``, which is then recorded in the
``mlpipe.accepted_degradation`` tag.

Recipes work on the parent's ``torch.export`` program (a TorchScript parent is
converted first) and give a new exported program: ``fp16`` and ``bf16`` cast the
weights (scored on the CPU here, on a GPU where there is one); ``int8`` replaces
every ``Linear`` with INT8 weights and activations (:mod:`._int8`, CPU).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from mlpipe.config import Settings
from mlpipe.errors import CheckFailed, InvalidInput
from mlpipe.registry import tag_names
from mlpipe.registry._derived import lineage_tags, load_parent
from mlpipe.registry._quantize_figures import degradation, evaluate
from mlpipe.registry._register import read_dataset, register_model, require_columns
from mlpipe.registry._torch_export import (
    export_program,
    exported_module,
    input_dtype,
    input_width,
)
from mlpipe.registry._types import VersionInfo

RECIPES = {
    "fp16": "weights cast to float16",
    "bf16": "weights cast to bfloat16",
    "int8": (
        "INT8 Linear layers: weights per-tensor symmetric, inputs rounded to INT8 per row at "
        "run time, product in float32"
    ),
}
ACCEPTED_DEGRADATION = tag_names.TAG + "accepted_degradation"


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
    parent that is not a torch model, a dataset without the needed columns or
    with labels that name no class of the parent, no Linear layer to make INT8)
    and CheckFailed (a class's recall, the AUC or a regression's MAE degrades
    beyond its tolerance, unless ``accept_degradation``); nothing is registered
    when it raises.
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
    delta = evaluate(loaded.model, derived, x, frame[label].to_numpy(), loaded.task)
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
    tags.update({tag_names.QUANTIZE: recipe, tag_names.QUANTIZE_RECIPE: RECIPES[recipe]})
    tags.update(tag_names.metric_tags(delta))
    return register_model(
        settings,
        name,
        derived,
        frame,
        loaded.features,
        label,
        tags,
        description=description,
        task=loaded.task,
    )


def quantize_module(model: Any, recipe: str) -> Any:
    """A quantized copy of ``model`` (left as it was), as the module of a new
    ``torch.export`` program with a dynamic batch. InvalidInput for an unknown recipe,
    or ``int8`` of a model without a Linear layer."""
    import torch

    module = _copy(model)
    width = input_width(module)
    if recipe == "fp16":
        return export_program(module.to(torch.float16), width, torch.float16).module()
    if recipe == "bf16":
        return export_program(module.to(torch.bfloat16), width, torch.bfloat16).module()
    if recipe != "int8":
        raise InvalidInput(f"--quantize must be one of {', '.join(RECIPES)}, got {recipe!r}")
    from mlpipe.registry._int8 import int8_linears

    if not int8_linears(module):
        raise InvalidInput("int8 quantizes Linear layers, and this torch model has none")
    return export_program(module, width, torch.float32).module()


def _copy(model: Any) -> Any:
    """An exported copy of ``model`` sharing no tensor with it (an exported module's tensors
    do not deep-copy; a save and load through memory copies them all)."""
    import torch

    module = exported_module(model)
    program = export_program(module, input_width(module), input_dtype(module))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    return torch.export.load(buffer).module()


__all__ = ["RECIPES", "degradation", "evaluate", "quantize_module", "register_quantized"]
