"""Where a worker's prediction rows go: the sink contract and the factory that picks one.

A sink is chosen by ``settings.predlog.sink``: segment files (the default,
:class:`~mlpipe.predlog.SegmentWriter`), Kafka (:class:`KafkaSink`), or none
(:class:`NullSink`, for benchmarks of what logging costs).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from mlpipe.predlog._kafka import KafkaSink
from mlpipe.predlog._record import PredictionRecord
from mlpipe.predlog._segments import SegmentWriter

if TYPE_CHECKING:
    from mlpipe.config import Settings

logger = logging.getLogger("mlpipe.predlog")


class PredictionSink(Protocol):
    """Where prediction rows go. ``append`` returns once the rows are durable enough to answer.

    ``waits_for_acks``: ``append`` waits on the network (Kafka), so serving calls
    it off the event loop; a local write (segment files) is made on it.
    """

    waits_for_acks: bool

    def append(self, records: Sequence[PredictionRecord]) -> None: ...

    def close(self) -> None: ...


class NullSink:
    """Drops every row: ``predlog.sink = "none"``, for benchmarks of what logging costs."""

    waits_for_acks = False

    def append(self, records: Sequence[PredictionRecord]) -> None:
        pass

    def close(self) -> None:
        pass


def open_sink(settings: Settings, worker_id: str) -> PredictionSink:
    """The configured sink for this worker: segment files (default), Kafka, or none."""
    p = settings.predlog
    if p.sink == "none":
        logger.warning("predlog.sink = none: predictions are NOT logged (benchmarks only)")
        return NullSink()
    if p.sink == "kafka":
        return KafkaSink(
            p.kafka_bootstrap, p.kafka_topic, worker_id, p.kafka_timeout_s, p.kafka_config
        )
    return SegmentWriter(
        settings.predlog_path,
        worker_id,
        max_bytes=p.segment_max_bytes,
        max_age_s=p.segment_max_age_s,
        fsync_interval_s=p.fsync_interval_s,
    )
