"""The prediction-log row: what every answered (or shadow-scored) request leaves behind.

Segments are JSON lines, one ``PredictionRecord`` per line. The warehouse loader
reads the same struct back, so this file is the contract between the two.

``score``, ``label`` and ``probabilities`` hold the version's
:class:`~mlpipe.tasks.Prediction`: P(class 1), 0/1 and None (binary); the
predicted class's probability, its index into the version's classes and the
class probabilities in that order (multiclass); the predicted value, None and
None (regression). Rows written before tasks existed have no
``probabilities`` and read back as binary ones.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Arm = Literal["champion", "canary", "shadow"]


class PredictionRecord(msgspec.Struct, frozen=True, omit_defaults=False):
    request_id: str
    ts: float  # unix seconds when the response was produced
    tenant: str
    model: str
    version: str
    arm: Arm
    generation: int
    entity_key: str  # normalized join-key string, e.g. "customer_id=42"
    entity: dict[str, str | int | float]
    features: dict[str, float | str | None]  # model inputs as used (after defaults)
    score: float
    label: int | None  # None for a regression
    latency_ms: float
    feature_cache_hit: bool = False
    prediction_cache_hit: bool = False
    features_missing: list[str] = msgspec.field(default_factory=list)
    status: Literal["ok", "error", "timeout"] = "ok"  # timeout: answered 504, not scored in time
    probabilities: list[float] | None = None  # multiclass: one per class, in classes order


ENCODER = msgspec.json.Encoder()
DECODER = msgspec.json.Decoder(PredictionRecord)
