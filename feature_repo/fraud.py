"""Feast definitions for the fraud-scoring example: one entity, two views, one service per model.

Every feature declares the value mlpipe serves when the feature is missing or older
than its view's TTL, in its Field's ``default`` tag. The parquet files under
``data/`` are written by ``mlpipe features generate``.
"""

from datetime import timedelta

from feast import Entity, FeatureService, FeatureView, Field, FileSource
from feast.types import Float64, Int64
from feast.value_type import ValueType

customer = Entity(
    name="customer",
    join_keys=["customer_id"],
    value_type=ValueType.INT64,
    description="A card holder; the key every fraud request carries.",
)

customer_stats_source = FileSource(
    name="customer_stats_source",
    path="data/customer_stats.parquet",
    timestamp_field="event_timestamp",
    created_timestamp_column="created",
)

customer_profile_source = FileSource(
    name="customer_profile_source",
    path="data/customer_profile.parquet",
    timestamp_field="event_timestamp",
    created_timestamp_column="created",
)

customer_stats = FeatureView(
    name="customer_stats",
    entities=[customer],
    ttl=timedelta(days=2),
    schema=[
        Field(name="txn_count_1d", dtype=Int64, tags={"default": "0"}),
        Field(name="txn_count_7d", dtype=Int64, tags={"default": "0"}),
        Field(name="amount_mean_7d", dtype=Float64, tags={"default": "0.0"}),
        Field(name="amount_max_7d", dtype=Float64, tags={"default": "0.0"}),
        Field(name="chargeback_rate_90d", dtype=Float64, tags={"default": "0.0"}),
    ],
    online=True,
    source=customer_stats_source,
    description="Daily snapshot of a customer's recent transaction activity.",
)

customer_profile = FeatureView(
    name="customer_profile",
    entities=[customer],
    ttl=timedelta(days=400),
    schema=[
        Field(name="account_age_days", dtype=Int64, tags={"default": "0"}),
        Field(name="country_risk", dtype=Float64, tags={"default": "0.5"}),
    ],
    online=True,
    source=customer_profile_source,
    description="Slow-moving facts about the customer's account.",
)

fraud_v1 = FeatureService(
    name="fraud_v1",
    features=[customer_stats],
    description="Features of fraud model v1: activity statistics only.",
)

fraud_v2 = FeatureService(
    name="fraud_v2",
    features=[customer_stats, customer_profile],
    description="Features of fraud model v2: activity statistics and account profile.",
)
