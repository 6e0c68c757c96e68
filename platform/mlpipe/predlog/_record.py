"""The prediction-log row: what every answered (or shadow-scored) request leaves behind.

Segments are JSON lines, one ``PredictionRecord`` per line. The warehouse loader
reads the same struct back, so this file is the contract between the two.
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
    label: int
    latency_ms: float
    feature_cache_hit: bool = False
    prediction_cache_hit: bool = False
    features_missing: list[str] = msgspec.field(default_factory=list)
    status: Literal["ok", "error", "timeout"] = "ok"  # timeout: answered 504, not scored in time


ENCODER = msgspec.json.Encoder()
DECODER = msgspec.json.Decoder(PredictionRecord)
