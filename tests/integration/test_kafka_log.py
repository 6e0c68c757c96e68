"""The prediction log on a real Kafka broker: the producer's acks, the consumer's exactly-once.

A broker (``tests/kafka_broker.py``) runs for the module; the tests that stop or
restart a broker start one of their own. The warehouse is DuckDB, and PostgreSQL
where a test is parametrized over both (``either_warehouse``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import sqlalchemy as sa

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.errors import StoreUnavailable
from mlpipe.predlog import GroupCommitter, PredictionRecord
from mlpipe.predlog._kafka import TENANT_HEADER, KafkaSink
from mlpipe.serving import free_port
from tests.integration.kafka_sync_worker import POINTS
from tests.integration.prod_services import either_warehouse  # noqa: F401 - `settings`
from tests.kafka_broker import Broker, kafka_broker, kafka_record, kafka_settings

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with kafka_broker(tmp_path_factory.mktemp("kafka")) as b:
        yield b


def _env(home: Path, broker: Broker, topic: str) -> dict[str, str]:
    """The Kafka log settings as the environment of an ``mlpipe`` process."""
    return {
        "MLPIPE_HOME": str(home),
        "MLPIPE_PREDLOG__SINK": "kafka",
        "MLPIPE_PREDLOG__KAFKA_BOOTSTRAP": broker.bootstrap,
        "MLPIPE_PREDLOG__KAFKA_TOPIC": topic,
    }


def _rows(settings: Settings) -> list[tuple[str, str, str]]:
    with warehouse.read(settings) as conn:
        return [
            tuple(r)
            for r in conn.execute(sa.text("SELECT request_id, tenant, segment FROM predictions"))
        ]


def _topic() -> str:
    return f"predictions-{uuid.uuid4().hex[:8]}"


def test_an_acknowledged_batch_is_in_the_topic_keyed_and_headed_by_tenant(
    broker: Broker, tmp_path: Path
) -> None:
    topic = _topic()
    broker.create_topic(topic)
    sink = KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0)
    sink.append([kafka_record(i, tenant) for i in range(50) for tenant in ("acme", "globex")])
    messages = broker.consume_all(topic, 100)
    assert len(messages) == 100
    by_tenant: dict[str, set[int]] = {}
    for msg in messages:
        headers = dict(msg.headers() or [])
        assert msg.key() == headers[TENANT_HEADER]
        by_tenant.setdefault(msg.key().decode(), set()).add(msg.partition())
    # keyed by tenant: one partition per tenant, so each tenant's records stay in order
    assert {t: len(p) for t, p in by_tenant.items()} == {"acme": 1, "globex": 1}
    acme = [m for m in messages if m.key() == b"acme"]
    assert [m.value() for m in acme] == sorted(
        (m.value() for m in acme), key=lambda v: int(v.split(b'"request_id":"r')[1].split(b'"')[0])
    )


def _recovers(write: Callable[[int], object], within_s: float = 30.0) -> str:
    """Write records r100, r101, ... until one is acknowledged (the broker is back); its id.

    A producer finds a broker that came back at its next reconnect (within
    ``reconnect.backoff.max.ms``), and a restarted broker may refuse for a moment while it
    loads: a write in that moment is refused (503), as it should be, and the next succeeds.
    """
    deadline = time.monotonic() + within_s
    for i in range(100, 10_000):
        try:
            write(i)
            return f"r{i}"
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
    raise AssertionError("unreachable")


def test_broker_down_refuses_the_batch_in_time_then_recovers_without_a_restart(
    tmp_path: Path,
) -> None:
    with kafka_broker(tmp_path / "kafka") as own:
        topic = _topic()
        own.create_topic(topic)
        settings = kafka_settings(tmp_path / "home", own, topic)
        sink = KafkaSink(own.bootstrap, topic, "w1", timeout_s=2.0)
        sink.append([kafka_record(1)])
        own.stop()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="did not take the batch within 2s"):
            sink.append([kafka_record(2), kafka_record(3)])
        assert time.monotonic() - started < 2.0 + 2.0
        own.start()
        back = _recovers(lambda i: sink.append([kafka_record(i)]))  # the same producer: no restart
        sink.close()
        warehouse.sync(settings)
        logged = {r[0] for r in _rows(settings)}
        # what was acknowledged; the records refused while it was down are not delivered
        # later either (a retry refused while the broker was loading may have been)
        assert {"r1", back} <= logged and not logged & {"r2", "r3"}


def test_a_group_answers_only_the_batch_with_a_refused_record_and_logs_the_rest(
    broker: Broker,
) -> None:
    # The middle batch of a group holds a record over the producer's message.max.bytes:
    # that batch alone is answered 503; the others are in the topic, each record once.
    topic = _topic()
    broker.create_topic(topic)
    sink = KafkaSink(broker.bootstrap, topic, "w1", 5.0, extra={"message.max.bytes": "2000"})
    big = kafka_record(90, features={"amount": 1.0, "blob": "x" * 4000})
    outcomes = sink.append_groups(
        [[kafka_record(1), kafka_record(2)], [big, kafka_record(91)], [kafka_record(3)]]
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], StoreUnavailable)
    assert "the producer refused a record" in str(outcomes[1])
    ids = sorted(json.loads(m.value())["request_id"] for m in broker.consume_all(topic, 3))
    assert ids == ["r1", "r2", "r3"]
    sink.close()


def test_a_group_through_the_committer_is_refused_while_the_broker_is_down(
    tmp_path: Path,
) -> None:
    # Every batch of a group waiting on a broker that is gone gets 503 in time; none
    # is answered as logged, and the committer serves again once the broker is back.
    with kafka_broker(tmp_path / "kafka") as own:
        topic = _topic()
        own.create_topic(topic)
        committer = GroupCommitter(KafkaSink(own.bootstrap, topic, "w1", timeout_s=2.0))
        assert committer.submit([kafka_record(1)]).result(10) is None
        own.stop()
        futures = [committer.submit([kafka_record(i)]) for i in (2, 3, 4)]
        for f in futures:
            with pytest.raises(StoreUnavailable, match="did not take the batch within 2s"):
                f.result(10)
        own.start()
        back = _recovers(lambda i: committer.submit([kafka_record(i)]).result(10))
        committer.close()
        ids = {json.loads(m.value())["request_id"] for m in own.consume_all(topic, 2)}
        assert {"r1", back} <= ids and not ids & {"r2", "r3", "r4"}


@pytest.mark.parametrize("point", POINTS)
def test_sync_killed_at_any_point_then_rerun_loads_every_record_exactly_once(
    broker: Broker, settings: Settings, point: str
) -> None:
    topic = _topic()
    broker.create_topic(topic, partitions=2)
    sink = KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0)
    sink.append([kafka_record(i, tenant) for i in range(300) for tenant in ("acme", "globex")])
    settings = settings.model_copy(
        update={
            "predlog": settings.predlog.model_copy(
                update={
                    "sink": "kafka", "kafka_bootstrap": broker.bootstrap, "kafka_topic": topic,
                    "kafka_sync_batch": 100, "kafka_group": f"g-{topic}",
                }
            )
        }
    )  # fmt: skip
    env = {
        **os.environ,
        **_env(settings.home, broker, topic),
        "MLPIPE_WAREHOUSE_URL": settings.warehouse,
        "MLPIPE_PREDLOG__KAFKA_SYNC_BATCH": "100",
        "MLPIPE_PREDLOG__KAFKA_GROUP": f"g-{topic}",
    }
    worker = subprocess.run(
        [sys.executable, "-m", "tests.integration.kafka_sync_worker", point, "--batch", "2"],
        cwd=REPO, env=env, capture_output=True, timeout=180,
    )  # fmt: skip
    assert worker.returncode == -signal.SIGKILL, worker.stderr.decode()[-2000:]
    partial = len(_rows(settings))
    assert 0 < partial < 600  # it died mid-way, with the first batch committed
    result = warehouse.sync(settings)
    rows = _rows(settings)
    keys = [(r[0], r[1]) for r in rows]
    assert len(keys) == 600 and len(set(keys)) == 600
    assert result.rows_loaded == 600 - partial
    assert sum(p.lag for p in result.kafka_lag) == 0
    assert warehouse.sync(settings).rows_loaded == 0  # and nothing more on a third run


def test_records_that_cannot_be_loaded_are_quarantined_with_partition_and_offset(
    broker: Broker, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic = _topic()
    broker.create_topic(topic, partitions=1)
    settings = kafka_settings(tmp_path, broker, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    good = KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0)
    good.append([kafka_record(0)])
    producer.produce(topic, b"not json at all")  # offset 1
    producer.produce(topic, b'{"request_id": "r9"}')  # offset 2: a record missing its fields
    impostor = kafka_record(3, tenant="acme")
    producer.produce(  # offset 3: the body says acme, the header another tenant
        topic, msgspec_json(impostor), headers=[(TENANT_HEADER, b"globex")]
    )
    producer.produce(topic, msgspec_json(kafka_record(4, request_id="r\x004")))  # offset 4: NUL
    producer.flush(10)
    good.append([kafka_record(5)])  # offset 5
    result = warehouse.sync(settings)
    assert sorted(r[0] for r in _rows(settings)) == ["r0", "r5"]
    assert [r[2] for r in sorted(_rows(settings))] == [f"kafka:{topic}/0@0", f"kafka:{topic}/0@5"]
    with warehouse.read(settings) as conn:
        quarantined = conn.execute(
            sa.text("SELECT segment, line, kind, reason FROM quarantine ORDER BY line")
        ).all()
    assert [(q[0], q[1]) for q in quarantined] == [(f"kafka:{topic}/0", n) for n in (1, 2, 3, 4)]
    assert "not a prediction record" in quarantined[0][3]
    assert "tenant header" in quarantined[2][3] and "globex" in quarantined[2][3]
    assert "NUL" in quarantined[3][3]
    assert result.quarantined == 4 and [p.lag for p in result.kafka_lag] == [0]


def msgspec_json(record: PredictionRecord) -> bytes:
    return msgspec.json.encode(record)


def test_a_record_that_starts_like_json_is_quarantined_and_the_batch_loaded(
    broker: Broker, settings: Settings
) -> None:
    # DuckDB's reader refuses the batch, and on DuckDB its transaction with it: the batch
    # is written again in a fresh one, the bad record named.
    from confluent_kafka import Producer

    topic = _topic()
    broker.create_topic(topic, partitions=1)
    settings = settings.model_copy(
        update={"predlog": kafka_settings(settings.home, broker, topic).predlog}
    )
    sink = KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0)
    sink.append([kafka_record(0), kafka_record(1)])
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b'{"request_id": "r2", not json')  # offset 2
    producer.flush(10)
    sink.append([kafka_record(3)])
    result = warehouse.sync(settings)
    assert sorted(r[0] for r in _rows(settings)) == ["r0", "r1", "r3"]
    assert [(s.segment, s.line) for s in result.skipped] == [(f"kafka:{topic}/0", 2)]
    assert result.rows_loaded == 3 and [p.lag for p in result.kafka_lag] == [0]


def test_a_batch_whose_partition_moved_is_rolled_back_and_read_again(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The compare-and-swap of the second batch fails as if another consumer had moved the
    # partition: that batch is rolled back, the batch read ahead meanwhile dropped, and the
    # sync reads on from the warehouse's positions.
    from mlpipe.warehouse import _kafka

    topic = _topic()
    broker.create_topic(topic, partitions=1)
    settings = kafka_settings(tmp_path, broker, topic, kafka_sync_batch=50)
    KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0).append(
        [kafka_record(i) for i in range(300)]
    )
    advance, calls = _kafka._advance, [0]

    def moved_once(*args: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise _kafka.PositionMoved("partition 0 was loaded by another consumer")
        advance(*args)

    monkeypatch.setattr(_kafka, "_advance", moved_once)
    result = warehouse.sync(settings)
    assert calls[0] == 7  # six batches, the second twice
    assert result.rows_loaded == 300 and len(_rows(settings)) == 300
    assert [p.lag for p in result.kafka_lag] == [0]


def test_records_read_again_add_nothing_and_count_as_duplicates(
    broker: Broker, settings: Settings
) -> None:
    topic = _topic()
    broker.create_topic(topic, partitions=2)
    settings = settings.model_copy(
        update={"predlog": kafka_settings(settings.home, broker, topic).predlog}
    )
    sink = KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0)
    sink.append([kafka_record(i, tenant) for i in range(50) for tenant in ("acme", "globex")])
    assert warehouse.sync(settings).rows_loaded == 100
    with warehouse.write(settings) as conn:  # the positions lost: every record read again
        conn.execute(sa.text("DELETE FROM kafka_offsets"))
    sink.append([kafka_record(50)])
    again = warehouse.sync(settings)
    assert (again.rows_read, again.rows_loaded, again.reused_ids) == (101, 1, 0)
    assert again.duplicates == 100 and len(_rows(settings)) == 101


def test_a_reused_request_id_is_counted_not_silently_dropped(
    broker: Broker, tmp_path: Path
) -> None:
    topic = _topic()
    broker.create_topic(topic, partitions=1)
    settings = kafka_settings(tmp_path, broker, topic)
    sink = KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0)
    sink.append([kafka_record(1, ts=1_800_000_000.0), kafka_record(2)])
    sink.append([kafka_record(1, ts=1_800_000_100.0)])  # the client sent request id r1 again
    result = warehouse.sync(settings)
    assert result.rows_loaded == 2 and result.reused_ids == 1
    assert sorted(r[0] for r in _rows(settings)) == ["r1", "r2"]


def test_lag_is_reported_per_partition_by_sync_and_doctor(broker: Broker, tmp_path: Path) -> None:
    from tests.conftest import run_cli

    topic = _topic()
    broker.create_topic(topic, partitions=2)
    settings = kafka_settings(tmp_path, broker, topic)
    KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0).append(
        [kafka_record(i, "acme") for i in range(7)]
    )
    lag = warehouse.topic_lag(settings)
    assert sorted(p.lag for p in lag) == [0, 7] and all(p.loaded == 0 for p in lag)
    env = _env(tmp_path, broker, topic)
    doctor = run_cli("doctor", "--json", env=env, cwd=tmp_path)
    assert doctor.stdout.strip(), doctor.stderr[-3000:]
    checks = {c["store"]: c for c in json.loads(doctor.stdout)}
    log = checks["prediction log"]
    assert log["location"] == f"kafka://{broker.bootstrap}/{topic}"
    assert log["ok"] and "not yet in the warehouse: 7" in log["detail"], log
    synced = run_cli("warehouse", "sync", env=env, cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    assert "Kafka lag: 0 record(s) not yet loaded" in synced.stderr
    assert "read 7 Kafka record(s), 7 row(s): 7 new" in synced.stderr
    assert sorted(p.loaded for p in warehouse.topic_lag(settings)) == [0, 7]


def test_a_partition_added_to_the_topic_is_consumed(broker: Broker, tmp_path: Path) -> None:
    topic = _topic()
    broker.create_topic(topic, partitions=1)
    settings = kafka_settings(tmp_path, broker, topic)
    sink = KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0)
    sink.append([kafka_record(0)])
    assert warehouse.sync(settings).rows_loaded == 1
    broker.add_partitions(topic, 2)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, msgspec_json(kafka_record(1)), partition=1)
    assert producer.flush(10) == 0
    result = warehouse.sync(settings)
    assert result.rows_loaded == 1
    assert sorted(r[2] for r in _rows(settings)) == [f"kafka:{topic}/0@0", f"kafka:{topic}/1@0"]


def test_a_broker_restart_under_load_loses_no_acknowledged_record(tmp_path: Path) -> None:
    with kafka_broker(tmp_path / "kafka") as own:
        topic = _topic()
        own.create_topic(topic)
        settings = kafka_settings(tmp_path / "home", own, topic)
        acked: list[str] = []
        refused = [0]
        stop = threading.Event()

        def produce(worker: int) -> None:
            sink = KafkaSink(own.bootstrap, topic, f"w{worker}", timeout_s=2.0)
            n = 0
            while not stop.is_set():
                batch = [kafka_record(0, request_id=f"w{worker}-{n + i}") for i in range(8)]
                n += 8
                try:
                    sink.append(batch)
                except StoreUnavailable:
                    refused[0] += len(batch)
                    continue
                acked.extend(r.request_id for r in batch)

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        before = len(acked)
        own.restart()
        time.sleep(2.0)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert before > 0 and len(acked) > before  # load before and after the restart
        warehouse.sync(settings)
        loaded = [r[0] for r in _rows(settings)]
        assert set(acked) <= set(loaded), f"{len(set(acked) - set(loaded))} acknowledged lost"
        assert len(loaded) == len(set(loaded))


def test_follow_loads_records_as_they_arrive_and_stops_on_sigterm(
    broker: Broker, tmp_path: Path
) -> None:
    topic = _topic()
    broker.create_topic(topic, partitions=2)
    settings = kafka_settings(tmp_path, broker, topic)
    env = {**os.environ, **_env(tmp_path, broker, topic)}
    mlpipe = str(Path(sys.executable).parent / "mlpipe")
    metrics_port = free_port()
    follower = subprocess.Popen(
        [mlpipe, "warehouse", "sync", "--follow", "--metrics-port", str(metrics_port)],
        env=env, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        sink = KafkaSink(broker.bootstrap, topic, "w1", timeout_s=5.0)
        for round_ in range(3):
            sink.append([kafka_record(round_ * 10 + i, "acme") for i in range(10)])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.3)
                if _count_when_free(settings) == (round_ + 1) * 10:
                    break
            assert _count_when_free(settings) == (round_ + 1) * 10
        _lag_gauge_reads(metrics_port, topic, 0)
        follower.send_signal(signal.SIGTERM)
        _, err = follower.communicate(timeout=30)
        assert follower.returncode == 0, err.decode()
        assert "stopped: every loaded batch is committed" in err.decode()
    finally:
        if follower.poll() is None:
            follower.kill()


def _lag_gauge_reads(port: int, topic: str, expected: float) -> None:
    """The follower's /metrics shows the lag of every partition (refreshed every ~5 s)."""
    import httpx

    deadline = time.monotonic() + 20
    while True:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("mlpipe_predlog_kafka_lag_records{") and f'topic="{topic}"' in line
        ]
        if len(values) == 2 and all(v == expected for v in values):
            return
        assert time.monotonic() < deadline, text
        time.sleep(0.5)


def _count_when_free(settings: Settings) -> int:
    """Rows loaded so far (the follower holds the DuckDB file only while it writes a batch)."""
    with warehouse.read(settings) as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM predictions")).scalar_one())
