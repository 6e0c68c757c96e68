"""Two gateways, one log: two servers on the production profile producing to one Kafka topic.

The control plane is a PostgreSQL database, tenant buckets live in Redis, the
warehouse is another PostgreSQL database, and both servers log to one topic of
a real broker. Under load from both, a canary is deployed and promoted; then
the broker goes down (every request gets 503, none is claimed logged) and comes
back (both servers answer again without a restart). One ``warehouse sync``
then holds every acknowledged prediction exactly once, under the version that
answered it, and the per-arm figures that ``status`` and the monitors read
agree with what the clients were told.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from mlpipe import deployments, security, warehouse
from mlpipe.config import Settings, load_settings
from mlpipe.serving import free_port
from tests.conftest import run_cli
from tests.integration.prod_services import REDIS_URL, postgres_database, redis_client
from tests.kafka_broker import Broker, kafka_broker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.e2e,
    pytest.mark.kafka,
]

KAFKA_TIMEOUT_S = 2.0


@dataclass
class Stack:
    settings: Settings
    broker: Broker
    urls: list[str]
    key: str


@dataclass
class Answers:
    ok: dict[str, tuple[str, str]] = field(default_factory=dict)  # request id -> (version, arm)
    refused: dict[str, int] = field(default_factory=dict)  # request id -> status
    reasons: Counter[str] = field(default_factory=Counter)  # refusal bodies
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def stack(registered_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    from mlpipe.serving import ScoringProcess

    with (
        kafka_broker(registered_home / "kafka") as broker,
        redis_client(),
        postgres_database() as control,
        postgres_database() as store,
    ):
        topic = f"predictions-{uuid.uuid4().hex[:8]}"
        broker.create_topic(topic)
        (registered_home / "mlpipe.toml").write_text(
            f'[profile.prod]\ncontrol_url = "{control}"\nwarehouse_url = "{store}"\n'
            f'[profile.prod.security]\nredis_url = "{REDIS_URL}"\n'
            f'[profile.prod.predlog]\nsink = "kafka"\nkafka_bootstrap = "{broker.bootstrap}"\n'
            f'kafka_topic = "{topic}"\nkafka_timeout_s = {KAFKA_TIMEOUT_S}\n'
        )
        monkeypatch.setenv("MLPIPE_PROFILE", "prod")
        settings = load_settings()
        deployments.deploy(settings, "fraud", "1")
        _, key = security.add_tenant(
            settings, f"t-{uuid.uuid4().hex[:6]}", rate=10_000, burst=10_000
        )
        env = {"MLPIPE_SERVING__RELOAD_INTERVAL_S": "0.5"}
        servers = [ScoringProcess(settings, port=free_port(), env=env) for _ in range(2)]
        try:
            for server in servers:
                server.start()
            yield Stack(settings, broker, [s.url for s in servers], key)
        finally:
            for server in servers:
                server.stop()


def _send(client: httpx.Client, answers: Answers, customer: int) -> int:
    request_id = f"req-{uuid.uuid4().hex}"
    body = {
        "model": "fraud",
        "request_id": request_id,
        "entity": {"customer_id": customer},
        "features": {"amount": 10.0 + customer % 90, "txn_count_7d": customer % 7},
    }
    response = client.post("/predict", json=body, timeout=30)
    with answers.lock:
        if response.status_code == 200:
            answer = response.json()
            answers.ok[request_id] = (str(answer["version"]), str(answer["arm"]))
        else:
            answers.refused[request_id] = response.status_code
            answers.reasons[response.text[:200]] += 1
    return response.status_code


def _load(stack: Stack, answers: Answers, stop: threading.Event) -> list[threading.Thread]:
    def client_loop(url: str, worker: int) -> None:
        with httpx.Client(base_url=url, headers={"X-API-Key": stack.key}) as client:
            n = 0
            while not stop.is_set():
                _send(client, answers, worker * 100_000 + n % 500)
                n += 1

    threads = [
        threading.Thread(target=client_loop, args=(url, i * 2 + j))
        for i, url in enumerate(stack.urls)
        for j in range(2)
    ]
    for t in threads:
        t.start()
    return threads


def _rollout_under_load(stack: Stack, answers: Answers) -> None:
    stop = threading.Event()
    threads = _load(stack, answers, stop)
    try:
        time.sleep(2)
        deployments.deploy(stack.settings, "fraud", "2", canary=50)
        time.sleep(4)
        deployments.promote(stack.settings, "fraud", force=True)
        time.sleep(3)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    versions = Counter(v for v, _ in answers.ok.values())
    arms = Counter(a for _, a in answers.ok.values())
    assert versions["1"] > 0 and versions["2"] > 0 and arms["canary"] > 0, (versions, arms)
    assert not answers.refused, answers.reasons


def _broker_down_then_back(stack: Stack, answers: Answers) -> None:
    stack.broker.stop()
    for url in stack.urls:
        with httpx.Client(base_url=url, headers={"X-API-Key": stack.key}) as client:
            started = time.monotonic()
            assert _send(client, answers, 1) == 503
            assert time.monotonic() - started < KAFKA_TIMEOUT_S + 3.0
    stack.broker.start()
    for url in stack.urls:  # the same processes answer again: no restart
        with httpx.Client(base_url=url, headers={"X-API-Key": stack.key}) as client:
            deadline = time.monotonic() + 60
            while _send(client, answers, 2) != 200:
                assert time.monotonic() < deadline, "the server did not recover"
                time.sleep(0.5)


def test_two_gateways_log_every_acknowledged_prediction_once_through_one_topic(
    stack: Stack,
) -> None:
    answers = Answers()
    _rollout_under_load(stack, answers)
    _broker_down_then_back(stack, answers)
    result = warehouse.sync(stack.settings)
    with warehouse.read(stack.settings) as conn:
        rows = conn.execute(
            sa.text("SELECT request_id, version, arm FROM predictions WHERE arm <> 'shadow'")
        ).all()
    logged = {r[0]: (r[1], r[2]) for r in rows}
    assert len(rows) == len(logged)  # once each
    assert logged == answers.ok  # every acknowledged one, under the version that answered
    assert not set(answers.refused) & set(logged)  # nothing refused is claimed logged
    assert result.kafka_records >= len(answers.ok) and sum(p.lag for p in result.kafka_lag) == 0
    since = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    status = run_cli("status", "fraud", "--json", cwd=stack.settings.home)
    assert status.returncode == 0, status.stderr
    assert sum(p["lag"] for p in json.loads(status.stdout)["kafka_lag"]) == 0
    figures = {
        (f.arm, f.version): f.requests
        for f in warehouse.arm_figures(stack.settings, "fraud", since)
    }
    assert figures == dict(Counter((a, v) for v, a in answers.ok.values()))
