"""The version tags mlpipe writes on MLflow model versions, and how metrics sit among them.

Every key starts with ``mlpipe.``. A version's lineage (data, features, feature
service, commit), its storage (flavor, skops types, artifact hash, reference)
and, for a derived version, its parent and recipe are all tags, so any
MLflow-native tool shows them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

TAG = "mlpipe."

# Training lineage.
DATA_SHA256 = TAG + "data_sha256"
DATASET = TAG + "dataset"
FEATURES = TAG + "features"  # JSON list of the model's input columns, in order
INPUT_SCHEMA = TAG + "input_schema"  # JSON: each input's kind, dtype, categories (_input_schema)
LABEL = TAG + "label"  # the dataset column the version was trained to predict
FEATURE_SERVICE = TAG + "feature_service"
FEATURE_SERVICE_SHA256 = TAG + "feature_service_sha256"
THRESHOLD = TAG + "threshold"
GIT_COMMIT = TAG + "git_commit"
SOURCE_RUN = TAG + "source_run"
METRIC_PREFIX = TAG + "metric."
# What the metrics register measured itself were measured on ("dataset train.csv (...)").
METRICS_ON = TAG + "metrics_on"
# The metrics register measured on its dataset and nobody overrode with --metric ("auc,recall").
METRICS_MEASURED = TAG + "metrics_measured"
# Which data register measured them on: "training" (--dataset, optimistic) or "holdout"
# (--eval-dataset). A version without the tag predates --eval-dataset: training.
METRICS_SOURCE = TAG + "metrics_source"
# Each class's recall as register measured it (a classifier): a JSON object, class -> recall,
# in the model's class order; a class with no labelled row is left out.
CLASS_RECALL = TAG + "class_recall"
# The labelled rows of each class that recall was measured on (class -> rows): its precision.
CLASS_SUPPORT = TAG + "class_support"
# The tags that say what a version's measured baseline is; a derived version carries its
# parent's (with the parent's metrics).
BASELINE_TAGS = (METRICS_ON, METRICS_MEASURED, METRICS_SOURCE, CLASS_RECALL, CLASS_SUPPORT)
# Other names --metric may give a measured metric under (the quality check reads both).
METRIC_ALIASES = {"logloss": "log_loss", "f1_macro": "macro_f1"}

# Storage: how the artifact was written and how to load it.
FLAVOR = TAG + "flavor"
SKOPS_TRUSTED_TYPES = TAG + "skops_trusted_types"
ARTIFACT_SHA256 = TAG + "artifact_sha256"
REFERENCE_URI = TAG + "reference_uri"

# A derived (quantized or converted) version.
PARENT_VERSION = TAG + "parent_version"
PARENT_ARTIFACT_SHA256 = TAG + "parent_artifact_sha256"
QUANTIZE = TAG + "quantize"
QUANTIZE_RECIPE = TAG + "quantize_recipe"
CONVERT = TAG + "convert"  # the format converted to: "onnx"
CONVERTER = TAG + "converter"  # the converter and its version, e.g. "skl2onnx==1.20.0"
CONVERT_TOLERANCE = TAG + "convert_tolerance"  # the largest score delta accepted
EVAL_DATASET = TAG + "eval_dataset"
EVAL_DATA_SHA256 = TAG + "eval_data_sha256"


def metric_tags(metrics: Mapping[str, float]) -> dict[str, str]:
    """``{name: value}`` as tags (``mlpipe.metric.NAME``), values as exact float reprs."""
    return {METRIC_PREFIX + k: repr(float(v)) for k, v in metrics.items()}


def metrics(tags: Mapping[str, str]) -> dict[str, float]:
    """The metrics recorded among ``tags``, by name (the inverse of :func:`metric_tags`)."""
    return {
        k[len(METRIC_PREFIX) :]: float(v) for k, v in tags.items() if k.startswith(METRIC_PREFIX)
    }


def per_class_tag(figures: Mapping[str, float]) -> str:
    """``{class: figure}`` as a :data:`CLASS_RECALL` or :data:`CLASS_SUPPORT` value (order
    kept; exact floats, integers as such)."""
    return json.dumps({str(k): v for k, v in figures.items()})


def per_class(tags: Mapping[str, str], key: str) -> dict[str, float]:
    """The per-class figures recorded under tag ``key`` (empty where none are)."""
    text = tags.get(key)
    return {str(k): float(v) for k, v in json.loads(text).items()} if text else {}
