"""The prediction log on Kafka: a sink behind the same ``PredictionSink`` contract.

``append`` returns only once every record of the batch is acknowledged by all
in-sync replicas (``acks=all``, idempotent producer), so "answered ⇒ logged"
holds as it does for segment files. A record Kafka did not take within
``predlog.kafka_timeout_s`` raises :class:`StoreUnavailable` and the batch is
not answered (503). librdkafka's own ``message.timeout.ms`` is that same bound,
so a record given up on is failed by the producer too, not sent later behind
the client's back. The producer reconnects by itself: once the broker is back,
the next batch is logged without a restart.

Records are keyed by tenant, so one tenant's records land in one partition in
the order they were answered; the tenant also travels as a header. The warehouse
reads the topic with :mod:`mlpipe.warehouse._kafka`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mlpipe.errors import StoreUnavailable
from mlpipe.predlog._record import ENCODER, PredictionRecord

TENANT_HEADER = "mlpipe-tenant"


class ClientErrors:
    """The last client-level error librdkafka reported to a client (its ``error_cb``).

    A record that was never acknowledged says only "Message timed out", and a
    metadata request that failed only "Broker transport failure", whatever the
    cause. librdkafka reports the cause separately: a failed SASL login, a
    client speaking plaintext to a TLS or SASL listener, every broker down.
    :meth:`explain` adds it to the message a user sees. "All brokers are down",
    which librdkafka repeats after any such failure, does not replace a more
    specific cause.
    """

    def __init__(self) -> None:
        self.last: str | None = None
        self.login_failed = False  # the broker refused the credentials: retrying cannot help

    def __call__(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if self.last is None or err.code() != KafkaError._ALL_BROKERS_DOWN:
            self.last = err.str()
        self.login_failed = self.login_failed or err.code() == KafkaError._AUTHENTICATION

    def clear(self) -> None:
        self.last = None
        self.login_failed = False

    def explain(self, reason: str) -> str:
        return reason if self.last is None else f"{reason}; Kafka reported: {self.last}"


def producer_config(
    bootstrap: str, client_id: str, timeout_s: float = 5.0, extra: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The producer settings that make an acknowledged record durable and unduplicated.

    ``extra`` (``predlog.kafka_config``: SASL/TLS for a managed Kafka) is added
    last but cannot weaken the acks, the idempotence or the timeout.
    """
    return {
        "linger.ms": 2,
        "compression.type": "lz4",
        # a broker that comes back is found within a second (librdkafka's default backs
        # off to 10 s between tries, answering 503 that long after the broker is back)
        "reconnect.backoff.max.ms": 1000,
        **(extra or {}),
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "acks": "all",
        "enable.idempotence": True,
        "message.timeout.ms": max(1, int(timeout_s * 1000)),
        # only a failed record reports back: no Python callback per acknowledged record
        "delivery.report.only.error": True,
    }


class KafkaSink:
    """Appends each record to ``topic``, keyed by tenant, and waits for the acks."""

    waits_for_acks = True

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        worker_id: str,
        timeout_s: float,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        self.topic = topic
        self.timeout_s = timeout_s
        self._config = producer_config(bootstrap, f"mlpipe-{worker_id}", timeout_s, extra)
        self._errors = ClientErrors()
        self._producer = self._new_producer()

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        return Producer({**self._config, "error_cb": self._errors})

    def append(self, records: Sequence[PredictionRecord]) -> None:
        """Return once every record is acknowledged; else raise StoreUnavailable."""
        (failure,) = self.append_groups([records])
        if failure is not None:
            raise failure

    def append_groups(
        self, batches: Sequence[Sequence[PredictionRecord]]
    ) -> list[Exception | None]:
        """Produce every batch's records, wait for the acks once, and give each batch its
        own outcome: ``None`` when all of its records were acknowledged, else the
        StoreUnavailable its caller answers 503 with. A wait that timed out fails every
        batch (which records were acknowledged is not reported: only errors are).
        """
        failures: list[list[Any]] = [[] for _ in batches]  # each batch's delivery errors
        refused = [self._produce(batch, failures[i]) for i, batch in enumerate(batches)]
        pending = 0
        if not all(refused):
            # A little past librdkafka's own timeout, so every record has its delivery report.
            pending = self._producer.flush(self.timeout_s + 1.0)
        if any(getattr(err, "fatal", lambda: False)() for errs in failures for err in errs):
            self._producer = self._new_producer()  # a fatal error ends a producer's life
        outcomes: list[Exception | None] = []
        for refusal, errs in zip(refused, failures, strict=True):
            if refusal is None and (errs or pending):
                reason = str(errs[0]) if errs else f"{pending} record(s) not acknowledged"
                refusal = self._unavailable(reason)
            outcomes.append(refusal)
        if not any(outcomes):
            self._errors.clear()  # what went wrong before has been put right
        return outcomes

    def _produce(
        self, records: Sequence[PredictionRecord], failures: list[Any]
    ) -> StoreUnavailable | None:
        """Hand ``records`` to the producer, their delivery errors to go to ``failures``;
        the refusal when the producer would not take one (a full queue, a record too large)."""
        from confluent_kafka import KafkaException

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(err)

        try:
            for record in records:
                self._producer.produce(
                    self.topic,
                    key=record.tenant.encode(),
                    value=ENCODER.encode(record),
                    headers=[(TENANT_HEADER, record.tenant.encode())],
                    on_delivery=delivered,
                )
        except (BufferError, KafkaException) as exc:
            refusal = self._unavailable(f"the producer refused a record: {exc}")
            refusal.__cause__ = exc
            return refusal
        return None

    def _unavailable(self, reason: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"prediction log on Kafka topic {self.topic!r} did not take the batch "
            f"within {self.timeout_s:g}s: {self._errors.explain(reason)}"
        )

    def close(self) -> None:
        self._producer.flush(self.timeout_s)
