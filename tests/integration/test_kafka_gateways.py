"""Two gateways, one log: two servers on the production profile producing to one Kafka topic.

The control plane is a PostgreSQL database, tenant buckets live in Redis, the
online features are Feast's Redis online store (``feature_store.prod.yaml``,
under a project name of this test's own, whose keys are deleted afterwards),
the warehouse is another PostgreSQL database, and both servers log to one topic
of a real broker. The two versions rolled out (``fraud`` v3 and v4, registered
here on the ``fraud_v1`` FeatureService) take ``amount`` from the request and
``txn_count_7d`` from Redis: every logged row holds the value materialized for
its customer, which the request never sent.

Under load from both servers a canary is deployed; ``mlpipe canary analyze``
(which syncs the topic first) counts each arm's acknowledged requests; the
canary is promoted under load; then the broker goes down (every request gets
503, none is claimed logged) and comes back (both servers answer again without
a restart). A second ``warehouse sync`` then holds every acknowledged
prediction exactly once, under the version that answered it, and ``status``,
the per-arm figures and ``mlpipe monitor drift`` count what the clients were
told. The requests are drawn from the versions' training rows, so the window is
clean: both monitors exit 0.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
import yaml

from mlpipe import demo, deployments, features, registry, security, warehouse
from mlpipe.config import Settings, load_settings
from mlpipe.serving import free_port
from tests.conftest import run_cli
from tests.integration.prod_services import (
    REDIS_URL,
    postgres_database,
    redis_client,
    redis_connection_string,
    start_side_by_side,
)
from tests.kafka_broker import Broker, kafka_broker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.e2e,
    pytest.mark.kafka,
]

KAFKA_TIMEOUT_S = 2.0
REPO = Path(__file__).resolve().parents[2] / "feature_repo"
PROD_YAML = "feature_store.prod.yaml"
SERVICE = "fraud_v1"  # customer_stats, txn_count_7d among them
FROM_REDIS = "txn_count_7d"  # served from the online store; requests send `amount` only
CHAMPION, CANARY = "3", "4"  # the template's v1 and v2 have no feature service
CUSTOMERS = 150  # drift tests an arm on >= 30 distinct entities, the canary split halves them
CANARY_MIN_REQUESTS = 50  # per arm: the canary phase is a few seconds of load
# Both servers start at once, each importing Feast: on a 2-core machine under other load
# that has taken most of the default 180 s.
READY_TIMEOUT_S = 360.0
# The data ends before this hour, so every snapshot is within its view's TTL.
DATA_END = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)


@dataclass
class Stack:
    settings: Settings
    broker: Broker
    urls: list[str]
    key: str
    traffic: pd.DataFrame  # training rows (customer_id, amount) the requests are drawn from
    online: dict[int, float]  # customer -> its FROM_REDIS value in the materialized data


@dataclass
class Answers:
    ok: dict[str, tuple[str, str]] = field(default_factory=dict)  # request id -> (version, arm)
    refused: dict[str, int] = field(default_factory=dict)  # request id -> status
    reasons: Counter[str] = field(default_factory=Counter)  # refusal bodies
    customers: dict[str, int] = field(default_factory=dict)  # request id -> customer_id
    lock: threading.Lock = field(default_factory=threading.Lock)

    def per_arm(self) -> Counter[tuple[str, str]]:
        """(arm, version) -> acknowledged requests."""
        with self.lock:
            return Counter((arm, version) for version, arm in self.ok.values())


def _feature_repo(home: Path) -> str:
    """``feature_repo/`` in ``home``, its prod config on the test Redis under a project name
    of its own (Feast's Redis keys end with it); returns that name."""
    shutil.copytree(
        REPO, home / "feature_repo", ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    config_file = home / "feature_repo" / PROD_YAML
    config = yaml.safe_load(config_file.read_text())
    config["project"] = f"mlpipe_test_{uuid.uuid4().hex[:10]}"
    config["online_store"]["connection_string"] = redis_connection_string()
    config_file.write_text(yaml.safe_dump(config))
    return str(config["project"])


def _materialized(settings: Settings) -> dict[int, float]:
    """Generate, apply and materialize into Redis; each customer's latest FROM_REDIS value."""
    data = settings.feature_repo_path / "data"
    demo.generate(data, customers=CUSTOMERS, days=3, end=DATA_END)
    features.apply(settings)
    features.materialize(settings, end=DATA_END + timedelta(minutes=5))
    stats = pd.read_parquet(data / "customer_stats.parquet")
    latest = stats.sort_values("event_timestamp").groupby("customer_id")[FROM_REDIS].last()
    return {int(c): float(v) for c, v in latest.items()}


def _register_on_the_service(settings: Settings, online: dict[int, float]) -> pd.DataFrame:
    """``fraud`` v3 and v4 (two LightGBMs) on SERVICE, trained on rows whose FROM_REDIS is
    what Redis serves for their customer; returns those rows' customer_id and amount."""
    import joblib
    from lightgbm import LGBMClassifier

    rng = np.random.default_rng(30)
    customers = rng.choice(sorted(online), 800)
    frame = pd.DataFrame(
        {
            "customer_id": customers,
            "amount": rng.gamma(2.0, 30.0, len(customers)),
            FROM_REDIS: [online[int(c)] for c in customers],
        }
    )
    noise = rng.normal(0, 1, len(frame))
    frame["label"] = ((frame["amount"] / 60 + frame[FROM_REDIS] / 10 + noise) > 2.0).astype(int)
    dataset = settings.home / "inputs" / "redis-train.parquet"
    frame.to_parquet(dataset, index=False)
    for version, trees in ((CHAMPION, 20), (CANARY, 30)):
        model = LGBMClassifier(n_estimators=trees, verbose=-1, random_state=0)
        model.fit(frame[["amount", FROM_REDIS]], frame["label"])
        path = settings.home / "inputs" / f"redis-v{version}.joblib"
        joblib.dump(model, path)
        info = registry.register(
            settings, "fraud", dataset=dataset, model_path=path, feature_service=SERVICE
        )
        assert info.version == version
    return frame[["customer_id", "amount"]]


def _models(settings: Settings) -> tuple[dict[int, float], pd.DataFrame]:
    """The features in Redis and ``fraud`` v3, v4 on their service (done while the broker
    starts: neither needs it, nor the control plane)."""
    online = _materialized(settings)
    return online, _register_on_the_service(settings, online)


def _write_profile(home: Path, control: str, store: str, broker: Broker, topic: str) -> None:
    (home / "mlpipe.toml").write_text(
        f'[profile.prod]\ncontrol_url = "{control}"\nwarehouse_url = "{store}"\n'
        f'feature_store_yaml = "{PROD_YAML}"\n'
        f'[profile.prod.security]\nredis_url = "{REDIS_URL}"\n'
        f"[profile.prod.monitor]\ncanary_min_requests = {CANARY_MIN_REQUESTS}\n"
        f'[profile.prod.predlog]\nsink = "kafka"\nkafka_bootstrap = "{broker.bootstrap}"\n'
        f'kafka_topic = "{topic}"\nkafka_timeout_s = {KAFKA_TIMEOUT_S}\n'
    )


@pytest.fixture
def stack(registered_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    from mlpipe.serving import ScoringProcess

    project = _feature_repo(registered_home)
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    # The prod profile's feature store; its registry is this home's, as in the profile below.
    local = Settings(home=registered_home, feature_store_yaml=PROD_YAML)
    with redis_client() as redis, ThreadPoolExecutor(1) as pool:
        models = pool.submit(_models, local)
        try:
            with (
                kafka_broker(registered_home / "kafka") as broker,
                postgres_database() as control,
                postgres_database() as store,
            ):
                topic = f"predictions-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic)
                _write_profile(registered_home, control, store, broker, topic)
                monkeypatch.setenv("MLPIPE_PROFILE", "prod")
                settings = load_settings()
                online, traffic = models.result()
                deployments.deploy(settings, "fraud", CHAMPION)
                _, key = security.add_tenant(settings, tenant, rate=10_000, burst=10_000)
                env = {"MLPIPE_SERVING__RELOAD_INTERVAL_S": "0.5"}
                servers = [ScoringProcess(settings, port=free_port(), env=env) for _ in range(2)]
                try:
                    start_side_by_side(servers, ready_timeout_s=READY_TIMEOUT_S)
                    urls = [s.url for s in servers]
                    yield Stack(settings, broker, urls, key, traffic, online)
                finally:
                    for server in servers:
                        server.stop()
        finally:
            wait([models])  # its keys are all written before they are deleted
            keys = list(redis.scan_iter(match=b"*" + project.encode(), count=1000))  # type: ignore[attr-defined]
            redis.delete(*keys, f"mlpipe:bucket:{tenant}")  # type: ignore[attr-defined]


def _send(client: httpx.Client, answers: Answers, row: Any) -> int:
    """One request for a training row's customer: its amount sent, FROM_REDIS not."""
    request_id = f"req-{uuid.uuid4().hex}"
    customer = int(row.customer_id)
    body = {
        "model": "fraud",
        "request_id": request_id,
        "entity": {"customer_id": customer},
        "features": {"amount": float(row.amount)},
    }
    response = client.post("/predict", json=body, timeout=30)
    with answers.lock:
        answers.customers[request_id] = customer
        if response.status_code == 200:
            answer = response.json()
            answers.ok[request_id] = (str(answer["version"]), str(answer["arm"]))
        else:
            answers.refused[request_id] = response.status_code
            answers.reasons[response.text[:200]] += 1
    return response.status_code


def _under_load(stack: Stack, answers: Answers, seconds: float, change: Any = None) -> None:
    """Two clients per server for ``seconds``; ``change()`` a second in; then every client
    has its answer (so everything acknowledged is in the topic)."""
    stop = threading.Event()
    rows = list(stack.traffic.itertuples(index=False))

    def client_loop(url: str, worker: int) -> None:
        rng = np.random.default_rng(worker)
        with httpx.Client(base_url=url, headers={"X-API-Key": stack.key}) as client:
            while not stop.is_set():
                _send(client, answers, rows[int(rng.integers(len(rows)))])

    seed = len(answers.ok)  # each phase draws other rows
    threads = [
        threading.Thread(target=client_loop, args=(url, seed + i * 2 + j))
        for i, url in enumerate(stack.urls)
        for j in range(2)
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        if change is not None:
            change()
        time.sleep(seconds - 1)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not answers.refused, answers.reasons


def _canary_analysis_counts_each_arm(stack: Stack, answers: Answers) -> None:
    """``canary analyze`` as a user runs it: it syncs what is in the topic, then compares."""
    analyze = run_cli("canary", "analyze", "fraud", "--json", cwd=stack.settings.home)
    assert analyze.returncode == 0, analyze.stdout[-3000:] + analyze.stderr[-3000:]
    result = json.loads(analyze.stdout)
    told = answers.per_arm()
    assert told[("canary", CANARY)] >= CANARY_MIN_REQUESTS, told
    assert (result["verdict"], result["exit_code"], result["paired"]) == ("pass", 0, True)
    assert (result["champion_version"], result["canary_version"]) == (CHAMPION, CANARY)
    assert result["champion_requests"] == told[("champion", CHAMPION)]
    assert result["canary_requests"] == told[("canary", CANARY)]


def _broker_down_then_back(stack: Stack, answers: Answers) -> None:
    row = next(stack.traffic.itertuples(index=False))
    stack.broker.stop()
    for url in stack.urls:
        with httpx.Client(base_url=url, headers={"X-API-Key": stack.key}) as client:
            started = time.monotonic()
            assert _send(client, answers, row) == 503
            assert time.monotonic() - started < KAFKA_TIMEOUT_S + 3.0
    stack.broker.start()
    for url in stack.urls:  # the same processes answer again: no restart
        with httpx.Client(base_url=url, headers={"X-API-Key": stack.key}) as client:
            deadline = time.monotonic() + 60
            while _send(client, answers, row) != 200:
                assert time.monotonic() < deadline, "the server did not recover"
                time.sleep(0.5)


def _logged(settings: Settings) -> list[Any]:
    query = (
        "SELECT request_id, version, arm, features, features_missing FROM predictions "
        "WHERE arm <> 'shadow'"
    )
    with warehouse.read(settings) as conn:
        return list(conn.execute(sa.text(query)).all())


def _features_came_from_redis(stack: Stack, answers: Answers, rows: list[Any]) -> None:
    """Each row's FROM_REDIS is what was materialized for its customer (never sent)."""
    served = {r[0]: json.loads(r[3])[FROM_REDIS] for r in rows}
    expected = {rid: stack.online[answers.customers[rid]] for rid in served}
    assert served == expected
    assert all(json.loads(r[4]) == [] for r in rows)  # no default stood in for a value
    assert len(set(expected.values())) > 5  # the customers' values differ: not a default


def _drift_counts_each_version(stack: Stack, answers: Answers) -> None:
    drift = run_cli("monitor", "drift", "fraud", "--json", cwd=stack.settings.home)
    assert drift.returncode == 0, drift.stdout[-3000:] + drift.stderr[-3000:]
    result = json.loads(drift.stdout)
    assert (result["verdict"], result["exit_code"]) == ("ok", 0)
    reported = {(a["arm"], a["version"]): a["rows"] for a in result["arms"]}
    assert reported == dict(answers.per_arm())
    assert {a["verdict"] for a in result["arms"]} == {"ok"}, [a["notes"] for a in result["arms"]]


def _skew_finds_none(stack: Stack, answers: Answers) -> None:
    """The served FROM_REDIS values, read back from the Kafka-fed warehouse, match the
    offline store's point-in-time values: no skew, over every logged row of each version."""
    skew = run_cli("monitor", "skew", "fraud", "--window", "1h", "--json", cwd=stack.settings.home)
    assert skew.returncode == 0, skew.stdout[-3000:] + skew.stderr[-3000:]
    result = json.loads(skew.stdout)
    assert (result["verdict"], result["exit_code"]) == ("ok", 0), result
    compared = {v["version"]: v["compared"] for v in result["versions"]}
    assert set(compared) == {CHAMPION, CANARY}
    assert sum(compared.values()) == result["rows_compared"] == min(1000, len(answers.ok))
    checked = [f for f in result["features"] if f["feature"] == FROM_REDIS]
    assert {f["version"] for f in checked} == {CHAMPION, CANARY}
    assert all(f["compared"] > 0 and f["mismatched"] == 0 for f in checked), checked


def test_two_gateways_log_every_acknowledged_prediction_once_through_one_topic(
    stack: Stack,
) -> None:
    answers = Answers()
    s = stack.settings
    _under_load(stack, answers, 5, lambda: deployments.deploy(s, "fraud", CANARY, canary=50))
    _canary_analysis_counts_each_arm(stack, answers)
    analysed = len(answers.ok)  # in the warehouse already: the analysis synced first
    _under_load(stack, answers, 3, lambda: deployments.promote(s, "fraud", force=True))
    versions = Counter(v for v, _ in answers.ok.values())
    assert versions[CHAMPION] > 0 and versions[CANARY] > 0, versions
    _broker_down_then_back(stack, answers)
    result = warehouse.sync(s)
    rows = _logged(s)
    logged = {r[0]: (r[1], r[2]) for r in rows}
    assert len(rows) == len(logged)  # once each
    assert logged == answers.ok  # every acknowledged one, under the version that answered
    assert not set(answers.refused) & set(logged)  # nothing refused is claimed logged
    assert result.kafka_records >= len(answers.ok) - analysed  # the rest
    assert sum(p.lag for p in result.kafka_lag) == 0
    _features_came_from_redis(stack, answers, rows)
    status = run_cli("status", "fraud", "--json", cwd=s.home)
    assert status.returncode == 0, status.stderr
    assert sum(p["lag"] for p in json.loads(status.stdout)["kafka_lag"]) == 0
    since = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    figures = {(f.arm, f.version): f.requests for f in warehouse.arm_figures(s, "fraud", since)}
    assert figures == dict(answers.per_arm())
    _drift_counts_each_version(stack, answers)
    _skew_finds_none(stack, answers)
