"""The model registry (MLflow): register versions with lineage, read them, load them verified.

Every version carries its lineage as tags (``mlpipe.*``: training data and
feature definitions, artifact sha256, commit, flavor, task, threshold, metrics). A
serving process loads a version only after the artifact it downloads hashes to
the registered value. A quantized or ONNX-converted version is a derived version
naming its parent.
"""

from mlpipe.registry._aliases import mirror_aliases, read_aliases
from mlpipe.registry._client import client
from mlpipe.registry._flavors import candidate_scorer
from mlpipe.registry._input_schema import (
    OIP_TYPES,
    InputColumn,
    InputSchema,
    missing_refused,
    number_from_text,
)
from mlpipe.registry._load import load_reference, load_verified
from mlpipe.registry._onnx_convert import convert_to_onnx, register_onnx
from mlpipe.registry._quantize import quantize_module, register_quantized
from mlpipe.registry._read import (
    classes_of,
    list_models,
    parse_ref,
    require_model,
    require_version,
    show,
)
from mlpipe.registry._register import register, register_model
from mlpipe.registry._torch_flavor import torch_scorer
from mlpipe.registry._types import LoadedModel, ModelSummary, VersionInfo

__all__ = [
    "OIP_TYPES",
    "InputColumn",
    "InputSchema",
    "LoadedModel",
    "ModelSummary",
    "VersionInfo",
    "candidate_scorer",
    "classes_of",
    "client",
    "convert_to_onnx",
    "list_models",
    "load_reference",
    "load_verified",
    "mirror_aliases",
    "missing_refused",
    "number_from_text",
    "parse_ref",
    "quantize_module",
    "read_aliases",
    "register",
    "register_model",
    "register_onnx",
    "register_quantized",
    "require_model",
    "require_version",
    "show",
    "torch_scorer",
]
