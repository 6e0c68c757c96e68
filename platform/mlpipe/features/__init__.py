"""Features: the Feast repository, synthetic data, training sets and online reads.

Training sets and online reads use the same Feast FeatureService, and the same
per-feature defaults (each Field's ``default`` tag), so a model sees in serving
what it saw in training. Feast and pandas are imported inside the functions
that use them, so importing this package is cheap.
"""

from mlpipe.features.datagen import GeneratedData, generate
from mlpipe.features.online import FeatureRow, OnlineFeatures, OnlineStats
from mlpipe.features.store import (
    AppliedRepo,
    FeatureServiceSpec,
    Materialized,
    apply,
    describe_service,
    list_services,
    materialize,
    read_entities,
    training_set,
    write_dataset,
)

__all__ = [
    "AppliedRepo",
    "FeatureRow",
    "FeatureServiceSpec",
    "GeneratedData",
    "Materialized",
    "OnlineFeatures",
    "OnlineStats",
    "apply",
    "describe_service",
    "generate",
    "list_services",
    "materialize",
    "read_entities",
    "training_set",
    "write_dataset",
]
