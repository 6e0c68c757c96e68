"""The prediction log: per-worker append-only JSON-lines segments.

A worker appends each answered request to its own segment before the response
goes out; the warehouse loader reads closed and open segments idempotently.
"""

from mlpipe.predlog._group_commit import GroupCommitter
from mlpipe.predlog._kafka import TENANT_HEADER, ClientErrors
from mlpipe.predlog._pii import PiiHasher
from mlpipe.predlog._record import DECODER, ENCODER, Arm, PredictionRecord
from mlpipe.predlog._segments import SegmentWriter
from mlpipe.predlog._sink import PredictionSink, open_sink

__all__ = [
    "DECODER",
    "ENCODER",
    "Arm",
    "ClientErrors",
    "GroupCommitter",
    "PiiHasher",
    "PredictionRecord",
    "PredictionSink",
    "TENANT_HEADER",
    "SegmentWriter",
    "open_sink",
]
