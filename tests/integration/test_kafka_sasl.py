"""The prediction log on a Kafka that asks clients to log in (SASL/PLAIN), as a managed one does.

``predlog.kafka_config`` passes the login to librdkafka, for the producer in the
server and the consumer of ``warehouse sync`` alike. A wrong password must not
read as a slow broker: the 503 and the sync's error name the failed login.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import StoreUnavailable
from mlpipe.predlog._kafka import KafkaSink
from tests.kafka_broker import Broker, kafka_broker, kafka_record, kafka_settings, sasl_config

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

USERS = {"mlpipe": "s3cret-pw"}
WRONG = sasl_config("mlpipe", "not-the-password")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with kafka_broker(tmp_path_factory.mktemp("kafka-sasl"), sasl_users=USERS) as b:
        yield b


def _count(settings: Settings, table: str) -> int:
    with warehouse.read(settings) as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_with_the_login_records_are_logged_and_synced(broker: Broker, tmp_path: Path) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    KafkaSink(broker.bootstrap, topic, "w1", 5.0, broker.client_config).append(
        [kafka_record(i) for i in range(3)]
    )
    settings = kafka_settings(tmp_path, broker, topic, kafka_config=broker.client_config)
    result = warehouse.sync(settings)
    assert result.rows_loaded == 3
    assert _count(settings, "predictions") == 3


def test_a_wrong_password_refuses_the_batch_naming_the_failed_login(
    broker: Broker, tmp_path: Path
) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(broker.bootstrap, topic, "w1", 3.0, WRONG)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as refused:
        sink.append([kafka_record(1)])
    assert time.monotonic() - started < 3.0 + 2.0  # within kafka_timeout_s (+1 s to flush)
    message = str(refused.value)
    assert f"prediction log on Kafka topic {topic!r} did not take the batch within 3s" in message
    assert "Kafka reported:" in message and "Authentication failed" in message
    # nothing reached the topic
    assert broker.consume_all(topic, expected=1, timeout_s=3.0) == []


def test_without_the_login_the_refusal_says_the_broker_was_not_reached(broker: Broker) -> None:
    sink = KafkaSink(broker.bootstrap, f"sasl-{uuid.uuid4().hex[:8]}", "w1", 2.0)
    with pytest.raises(StoreUnavailable, match="Kafka reported: .*brokers are down"):
        sink.append([kafka_record(1)])


def test_sync_with_a_wrong_password_names_the_login_and_changes_nothing(
    broker: Broker, tmp_path: Path
) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    KafkaSink(broker.bootstrap, topic, "w1", 5.0, broker.client_config).append([kafka_record(1)])
    good = kafka_settings(tmp_path, broker, topic, kafka_config=broker.client_config)
    warehouse.sync(good)  # the warehouse exists, one row in
    before = (_count(good, "predictions"), _count(good, "kafka_offsets"))
    KafkaSink(broker.bootstrap, topic, "w1", 5.0, broker.client_config).append([kafka_record(2)])

    with pytest.raises(StoreUnavailable) as refused:
        warehouse.sync(kafka_settings(tmp_path, broker, topic, kafka_config=WRONG))
    message = str(refused.value)
    assert message.startswith(f"Kafka at {broker.bootstrap} unreachable:")
    assert "Kafka reported:" in message and "Authentication failed" in message
    assert (_count(good, "predictions"), _count(good, "kafka_offsets")) == before


def test_the_cli_sync_exits_3_with_the_failed_login_in_one_line(
    broker: Broker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_in_process: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    for name, value in {
        "MLPIPE_HOME": str(tmp_path),
        "MLPIPE_PREDLOG__SINK": "kafka",
        "MLPIPE_PREDLOG__KAFKA_BOOTSTRAP": broker.bootstrap,
        "MLPIPE_PREDLOG__KAFKA_TOPIC": topic,
        "MLPIPE_PREDLOG__KAFKA_CONFIG": json.dumps(WRONG),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    synced = cli_in_process("warehouse", "sync")
    assert synced.returncode == 3, synced.stderr
    lines = [line for line in synced.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: Kafka at"), synced.stderr
    assert "Authentication failed" in lines[0]
