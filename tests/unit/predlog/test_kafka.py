"""The Kafka sink keeps the prediction-log contract: nothing is 'logged' that Kafka did not ack."""

import pytest

from mlpipe.config import load_settings
from mlpipe.errors import StoreUnavailable
from mlpipe.predlog import open_sink
from mlpipe.predlog._kafka import ClientErrors, KafkaSink, producer_config
from tests.kafka_broker import kafka_record

pytest.importorskip("confluent_kafka", reason="the Kafka sink needs mlpipe[prod]")


def test_producer_is_durable_and_idempotent() -> None:
    config = producer_config("127.0.0.1:9092", "mlpipe-w1")
    assert config["acks"] == "all" and config["enable.idempotence"] is True
    assert config["reconnect.backoff.max.ms"] == 1000  # a broker back is found within 1 s


def test_settings_choose_the_sink(home, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MLPIPE_PREDLOG__SINK", "kafka")
    monkeypatch.setenv("MLPIPE_PREDLOG__KAFKA_BOOTSTRAP", "127.0.0.1:1")
    sink = open_sink(load_settings(), "w1")
    assert isinstance(sink, KafkaSink)


def test_unacknowledged_batch_raises_instead_of_claiming_it_is_logged() -> None:
    # Port 1 on loopback: nothing listens, so no broker can ever ack.
    sink = KafkaSink("127.0.0.1:1", "mlpipe-predictions", "w1", timeout_s=0.5)
    with pytest.raises(StoreUnavailable, match=r"did not take the batch within 0.5s"):
        sink.append([kafka_record(1)])


def test_a_group_answers_each_batch_for_itself_and_never_claims_an_unacked_record() -> None:
    # Nothing listens on port 1, so no record is acknowledged; the middle batch holds a
    # record over message.max.bytes, which the producer refuses before any wait.
    sink = KafkaSink(
        "127.0.0.1:1",
        "mlpipe-predictions",
        "w1",
        timeout_s=0.5,
        extra={"message.max.bytes": "1000"},
    )
    big = kafka_record(1, request_id="big", features={"amount": 1.0, "x": "x" * 2000})
    outcomes = sink.append_groups([[kafka_record(1)], [big], [kafka_record(1)]])
    assert all(isinstance(o, StoreUnavailable) for o in outcomes)
    assert "the producer refused a record" in str(outcomes[1])
    assert "Message timed out" in str(outcomes[0]) and "Message timed out" in str(outcomes[2])


def _client_error(code: int, text: str) -> object:
    from confluent_kafka import KafkaError

    return KafkaError(code, text)


def test_client_errors_name_the_cause_and_a_failed_login_outlives_all_brokers_down() -> None:
    from confluent_kafka import KafkaError

    errors = ClientErrors()
    assert errors.explain("Local: Message timed out") == "Local: Message timed out"
    errors(_client_error(KafkaError._AUTHENTICATION, "SASL authentication error: bad password"))
    errors(_client_error(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert errors.login_failed
    assert errors.explain("Local: Message timed out") == (
        "Local: Message timed out; Kafka reported: SASL authentication error: bad password"
    )
    errors.clear()
    assert errors.explain("x") == "x" and not errors.login_failed
    errors(_client_error(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert errors.explain("x") == "x; Kafka reported: 1/1 brokers are down"
    assert not errors.login_failed


def test_a_batch_no_broker_took_names_what_kafka_reported() -> None:
    sink = KafkaSink("127.0.0.1:1", "mlpipe-predictions", "w1", timeout_s=0.5)
    with pytest.raises(StoreUnavailable, match=r"; Kafka reported: .*Connection refused"):
        sink.append([kafka_record(1)])
