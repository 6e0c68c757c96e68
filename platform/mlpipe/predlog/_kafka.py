"""The prediction log on Kafka: an optional sink behind the same ``PredictionSink`` contract.

``append`` returns only once every record of the batch is acknowledged by all
in-sync replicas (``acks=all``, idempotent producer), so "answered ⇒ logged"
holds as it does for segment files; a record Kafka did not take within
``predlog.kafka_timeout_s`` raises :class:`StoreUnavailable` and the batch is
not answered. Needs ``pip install 'mlpipe[prod]'`` and a broker; none runs in
this project's CI, so only the failure path is tested here (docs/production.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlpipe.errors import StoreUnavailable
from mlpipe.predlog._record import ENCODER, PredictionRecord


def producer_config(bootstrap: str, client_id: str) -> dict[str, Any]:
    """The producer settings that make an acknowledged record durable and unduplicated."""
    return {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 2,
        "compression.type": "lz4",
    }


class KafkaSink:
    """Appends each record to ``topic``, keyed by request id, and waits for the acks."""

    def __init__(self, bootstrap: str, topic: str, worker_id: str, timeout_s: float) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.timeout_s = timeout_s
        self._producer = Producer(producer_config(bootstrap, f"mlpipe-{worker_id}"))

    def append(self, records: Sequence[PredictionRecord]) -> None:
        failures: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(str(err))

        for record in records:
            self._producer.produce(
                self.topic,
                key=record.request_id.encode(),
                value=ENCODER.encode(record),
                on_delivery=delivered,
            )
        pending = self._producer.flush(self.timeout_s)
        if pending or failures:
            reason = failures[0] if failures else f"{pending} record(s) not acknowledged"
            raise StoreUnavailable(
                f"prediction log on Kafka topic {self.topic!r} did not take the batch "
                f"within {self.timeout_s:g}s: {reason}"
            )

    def close(self) -> None:
        self._producer.flush(self.timeout_s)
