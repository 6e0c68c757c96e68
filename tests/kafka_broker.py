"""A real Apache Kafka broker for the tests: ``.ci/kafka/broker`` on free loopback ports.

Each :func:`kafka_broker` starts a single-node KRaft broker with a fresh data
directory under the test's temp dir and stops it on exit; ``restart`` keeps the
data (a broker restart, not a new cluster). Where there is no Java or Maven the
tests skip, saying why, except under CI (``CI`` set), where a missing broker is
a failure: CI must not skip them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpipe.config import Settings
from mlpipe.predlog import PredictionRecord
from mlpipe.serving import free_port

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "kafka" / "broker"


def _missing_tools() -> str | None:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not on PATH" if missing else None


class Broker:
    """One broker process: its bootstrap address, and stop/start/restart on the same data.

    With ``sasl_users`` (name → password) clients must log in (SASL/PLAIN), as on
    a managed Kafka; :attr:`client_config` logs in as the first of them.
    """

    def __init__(self, root: Path, sasl_users: dict[str, str] | None = None) -> None:
        self.dir = root
        self.port = free_port()
        self.controller_port = free_port()
        self.sasl_users = sasl_users or {}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def client_config(self) -> dict[str, str]:
        """The librdkafka settings a client of this broker needs besides its bootstrap."""
        if not self.sasl_users:
            return {}
        user, password = next(iter(self.sasl_users.items()))
        return sasl_config(user, password)

    def start(self) -> None:
        ports = [str(self.port), str(self.controller_port)]
        users = " ".join(f"{u}:{p}" for u, p in self.sasl_users.items())
        subprocess.run(
            ["bash", str(SCRIPT), "start", str(self.dir), *ports],
            check=True,
            timeout=300,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "KAFKA_SASL_USERS": users},
        )
        self._wait_for_metadata()

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.dir)], check=True, timeout=60)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _wait_for_metadata(self, timeout_s: float = 60.0) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.client_config})
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                admin.list_topics(timeout=5)
                return
            except Exception:  # noqa: BLE001 - not up yet: retried until the deadline
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def create_topic(self, name: str, partitions: int = 3) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.client_config})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=30)
        self._wait_for_partitions(name, partitions)

    def add_partitions(self, name: str, total: int) -> None:
        from confluent_kafka.admin import AdminClient, NewPartitions

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.client_config})
        for future in admin.create_partitions([NewPartitions(name, total)]).values():
            future.result(timeout=30)
        self._wait_for_partitions(name, total)

    def _wait_for_partitions(self, name: str, count: int) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.client_config})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = admin.list_topics(name, timeout=5).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == count:
                return
            time.sleep(0.1)
        raise AssertionError(f"topic {name} did not get {count} partitions")

    def consume_all(self, topic: str, expected: int, timeout_s: float = 30.0) -> list[Any]:
        """Every record of ``topic`` (at least ``expected`` of them), read by a fresh group."""
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                **self.client_config,
                "bootstrap.servers": self.bootstrap,
                "group.id": f"check-{time.monotonic_ns()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([topic])
        messages: list[Any] = []
        deadline = time.monotonic() + timeout_s
        try:
            while len(messages) < expected and time.monotonic() < deadline:
                messages += [m for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
        finally:
            consumer.close()
        return messages


def sasl_config(user: str, password: str) -> dict[str, str]:
    """librdkafka's settings for a SASL/PLAIN login over plaintext."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
    }


def kafka_record(i: int, tenant: str = "acme", **changes: object) -> PredictionRecord:
    """Request ``r{i}``'s log row (customer ``i``), with ``changes``."""
    record = PredictionRecord(
        request_id=f"r{i}", ts=time.time(), tenant=tenant, model="fraud", version="1",
        arm="champion", generation=1, entity_key=f"customer_id={i}", entity={"customer_id": i},
        features={"amount": float(i)}, score=0.25, label=0, latency_ms=1.0,
    )  # fmt: skip
    return msgspec.structs.replace(record, **changes)


def kafka_settings(home: Path, broker: Broker, topic: str, **predlog: object) -> Settings:
    """A project in ``home`` whose prediction log is ``topic`` on ``broker`` (3-s acks)."""
    return Settings(
        home=home,
        predlog={
            "sink": "kafka",
            "kafka_bootstrap": broker.bootstrap,
            "kafka_topic": topic,
            "kafka_timeout_s": 3.0,
            **predlog,
        },
    )


@contextmanager
def kafka_broker(root: Path, sasl_users: dict[str, str] | None = None) -> Iterator[Broker]:
    """A started broker in ``root`` (fresh), stopped on exit; skips where Java/Maven are missing."""
    pytest.importorskip("confluent_kafka", reason="the Kafka tests need mlpipe[prod]")
    missing = _missing_tools()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Kafka tests, but {missing}")
        pytest.skip(f"no Kafka broker can run here: {missing} (.ci/kafka/broker)")
    root.mkdir(parents=True, exist_ok=True)
    broker = Broker(root, sasl_users)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
