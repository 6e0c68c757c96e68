"""Features: the Feast repository, training sets and online reads.

Training sets and online reads use the same Feast FeatureService, and the same
per-feature defaults (each Field's ``default`` tag), so a model sees in serving
what it saw in training. Feast and pandas are imported inside the functions
that use them, so importing this package is cheap.
"""

from mlpipe.features._breaker import BreakerState, CircuitBreaker, store_breaker
from mlpipe.features._datasets import read_entities, write_dataset
from mlpipe.features._online import FeatureRow, OnlineFeatures, OnlineStats, check_join_key
from mlpipe.features._store import (
    AppliedRepo,
    FeatureServiceSpec,
    Materialized,
    apply,
    describe_service,
    list_services,
    materialize,
    open_store,
    training_set,
)

__all__ = [
    "AppliedRepo",
    "BreakerState",
    "CircuitBreaker",
    "FeatureRow",
    "FeatureServiceSpec",
    "Materialized",
    "OnlineFeatures",
    "OnlineStats",
    "apply",
    "check_join_key",
    "describe_service",
    "list_services",
    "materialize",
    "open_store",
    "read_entities",
    "store_breaker",
    "training_set",
    "write_dataset",
]
