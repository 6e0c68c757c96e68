"""``python -m bench.kafka``: what the prediction log on Kafka costs and how fast it drains.

Starts a single-node broker (``.ci/kafka/broker``, KRaft, on free loopback
ports, a fresh data directory) and measures three things:

1. **Serving throughput, paired**: ``bench.ab`` with the segment-file log
   (``default``) against the Kafka sink, closed loop at ``--concurrency``, in
   alternating rounds; the ratio is Kafka / files.
2. **End-to-end log latency**: one server logging to Kafka and a
   ``mlpipe warehouse sync --follow`` consumer; requests at ``--rate`` for
   ``--seconds``; for each answered request, the time from its answer (client
   side) to its row's ``loaded_at`` in the warehouse (stamped when its batch is
   written, just before the commit). p50/p99.
3. **Consumer throughput**: ``--rows`` records produced to a topic, then one
   ``warehouse sync`` into a fresh DuckDB file and a fresh PostgreSQL database
   (when one answers at ``MLPIPE_TEST_PG``); rows/s.

The broker runs on the same cores as the servers and the load generator, with
the test broker's JVM flags (C1 only, quick to start); ``--broker-jit`` gives it
the full JIT (warm it with ``--warmup``), ``--broker-cpus`` pins it (``taskset``),
e.g. ``taskset -c 0 python -m bench.kafka --broker-cpus 1`` for servers on one
core and the broker on the other. Each serving round reports the broker's CPU.

Writes ``bench/results/kafka-latest.json`` and ``kafka-latest.md``; asserts no
timing. The figures recorded in docs/decisions/034-predlog-on-kafka.md came
from ``python -m bench.kafka`` on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import servers
from bench.ab import main as ab_main
from bench.run import RESULTS
from bench.workload import Cases, ensure_home, mlpipe_bodies
from mlpipe.serving import free_port

BROKER = Path(__file__).resolve().parents[1] / ".ci" / "kafka" / "broker"
BROKER_PIDS: dict[str, int] = {}  # bootstrap -> the JVM's pid, for the brokers running now


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.kafka", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--duration", type=float, default=4.0, help="seconds per paired measurement")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rate", type=float, default=200.0, help="req/s for the latency run")
    p.add_argument("--seconds", type=float, default=10.0, help="length of the latency run")
    p.add_argument("--rows", type=int, default=200_000, help="records for the consumer run")
    p.add_argument("--home", type=Path, default=RESULTS / "home")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--skip", default="", help="comma-separated: serving, latency, consumer")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of load per variant first")
    p.add_argument("--broker-jit", action="store_true", help="the broker's JVM with the full JIT")
    p.add_argument("--broker-cpus", default="", help="pin the broker to these CPUs (taskset -c)")
    return p.parse_args(argv)


@contextlib.contextmanager
def broker(jit: bool = False, cpus: str = "") -> Iterator[str]:
    """A broker for the run; yields its bootstrap address and stops it on exit."""
    env = {**os.environ, **({"KAFKA_JVM_OPTS": "-XX:+UseSerialGC"} if jit else {})}
    with tempfile.TemporaryDirectory(prefix="mlpipe-bench-kafka-") as tmp:
        port, controller = free_port(), free_port()
        subprocess.run(
            ["bash", str(BROKER), "start", tmp, str(port), str(controller)],
            check=True,
            stdout=sys.stderr,
            env=env,
        )
        pid = (Path(tmp) / "pid").read_text().strip()
        if cpus:  # every thread of the JVM
            subprocess.run(
                ["taskset", "-a", "-p", "-c", cpus, pid], check=True, stdout=subprocess.DEVNULL
            )
        bootstrap = f"127.0.0.1:{port}"
        BROKER_PIDS[bootstrap] = int(pid)
        try:
            yield bootstrap
        finally:
            BROKER_PIDS.pop(bootstrap, None)
            subprocess.run(["bash", str(BROKER), "stop", tmp], check=False)


def _kafka_env(bootstrap: str, topic: str) -> dict[str, str]:
    return {
        "MLPIPE_PREDLOG__SINK": "kafka",
        "MLPIPE_PREDLOG__KAFKA_BOOTSTRAP": bootstrap,
        "MLPIPE_PREDLOG__KAFKA_TOPIC": topic,
    }


def serving(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    """Closed-loop req/s and p99, files against Kafka, paired (``bench.ab``)."""
    kafka = f"predlog.sink=kafka+predlog.kafka_bootstrap={bootstrap}+predlog.kafka_topic=bench-ab"
    broker_s, load = process_cpu_s(BROKER_PIDS[bootstrap]), [os.getloadavg()[0]]
    ab_main(
        [
            *("--variants", f"default,{kafka}"),
            *("--rounds", str(args.rounds), "--duration", str(args.duration)),
            *("--warmup", str(args.warmup)),
            *("--concurrency", str(args.concurrency), "--open", ""),
            *("--home", str(args.home), "--out", str(args.out)),
        ]
    )
    broker_s, load = process_cpu_s(BROKER_PIDS[bootstrap]) - broker_s, [*load, os.getloadavg()[0]]
    rows = json.loads((args.out / "ab-latest.json").read_text())["rows"]
    by: dict[str, list[dict[str, Any]]] = {"files": [], "kafka": []}
    for row in rows:
        by["files" if row["label"] == "default" else "kafka"].append(row)
    ratios = [k["rps"] / f["rps"] for f, k in zip(by["files"], by["kafka"], strict=True)]
    return {
        "broker": {"jit": "full" if args.broker_jit else "C1", "cpus": args.broker_cpus or "all"},
        "broker_cpu_s": round(broker_s, 1),
        "load_average": [round(x, 1) for x in load],
        "files_broker_cpu_ms": [_java_ms(r) for r in by["files"]],
        "kafka_broker_cpu_ms": [_java_ms(r) for r in by["kafka"]],
        "files_rps": [round(r["rps"]) for r in by["files"]],
        "kafka_rps": [round(r["rps"]) for r in by["kafka"]],
        "files_p99_ms": [r["p99_ms"] for r in by["files"]],
        "kafka_p99_ms": [r["p99_ms"] for r in by["kafka"]],
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
    }


def process_cpu_s(pid: int) -> float:
    """A process's user + system CPU so far, in seconds (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _java_ms(row: dict[str, Any]) -> int:
    """Any JVM's CPU during a round (ms): the ``java`` entry of bench.ab's noise column, so
    on a machine where other brokers run (the project's Kafka tests) an upper bound."""
    for entry in str(row.get("other_top", "")).split(", "):
        name, _, ms = entry.rpartition(" ")
        if name == "java" and ms.isdigit():
            return int(ms)
    return 0


def latency(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    """Answer → row in the warehouse, with ``sync --follow`` running."""
    import httpx
    import sqlalchemy as sa

    topic = f"bench-e2e-{uuid.uuid4().hex[:6]}"
    scratch = Path(tempfile.mkdtemp(prefix="mlpipe-bench-wh-"))
    store = scratch / "warehouse.duckdb"
    env = {
        **_kafka_env(bootstrap, topic),
        "MLPIPE_WAREHOUSE_URL": f"duckdb:///{store}",
        # an empty segment directory: `sync --follow` first loads the segments it finds,
        # and the serving rounds' file variant leaves hundreds of MB in the stack's
        "MLPIPE_PREDLOG_DIR": str(scratch / "predlog"),
    }
    port = free_port()
    spec = servers.mlpipe_spec(args.stack, port, env, label="kafka-e2e")
    answered: dict[str, float] = {}
    refused: list[str] = []  # the first refusal, shown with the figures
    body = mlpipe_bodies(Cases())
    with servers.running(spec, port, args.out / "logs"):
        follower = subprocess.Popen(
            [str(servers.BIN / "mlpipe"), "warehouse", "sync", "--follow"],
            env={**os.environ, "MLPIPE_HOME": str(args.stack), **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
                interval, start = 1.0 / args.rate, time.monotonic()
                for i in range(int(args.rate * args.seconds)):
                    time.sleep(max(0.0, start + i * interval - time.monotonic()))
                    payload = json.loads(body(i))
                    payload["request_id"] = f"e2e-{i}"
                    response = client.post("/predict", json=payload, timeout=10)
                    if response.status_code == 200:
                        answered[payload["request_id"]] = time.time()
                    elif not refused:
                        refused.append(f"{response.status_code} {response.text[:200]}")
            _wait_loaded(args.stack, env, len(answered))
        finally:
            follower.send_signal(signal.SIGTERM)
            follower.wait(timeout=60)
    engine = sa.create_engine(f"duckdb:///{store}")
    with engine.connect() as conn:
        loaded = dict(
            conn.execute(
                sa.text(
                    "SELECT request_id, epoch(loaded_at) FROM predictions WHERE arm <> 'shadow'"
                )
            ).all()
        )
    engine.dispose()
    delays = sorted((loaded[r] - t) * 1000 for r, t in answered.items() if r in loaded)
    return {
        "first_refusal": refused[0] if refused else None,
        "answered": len(answered),
        "in_warehouse": sum(1 for r in answered if r in loaded),
        "p50_ms": round(delays[len(delays) // 2], 1) if delays else None,
        "p99_ms": round(delays[int(len(delays) * 0.99)], 1) if delays else None,
    }


def _wait_loaded(home: Path, env: dict[str, str], count: int, timeout_s: float = 120) -> None:
    from mlpipe import warehouse
    from mlpipe.config import Settings

    settings = Settings(home=home, warehouse_url=env["MLPIPE_WAREHOUSE_URL"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        with contextlib.suppress(Exception), warehouse.read(settings) as conn:
            import sqlalchemy as sa

            if conn.execute(sa.text("SELECT count(*) FROM predictions")).scalar_one() >= count:
                return


def consumer(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    """One ``warehouse sync`` of ``--rows`` records into DuckDB and PostgreSQL: rows/s."""
    from mlpipe import warehouse
    from mlpipe.config import Settings

    topic = f"bench-sync-{uuid.uuid4().hex[:6]}"
    _produce(bootstrap, topic, args.rows)
    out: dict[str, Any] = {"rows": args.rows}
    for backend, url in _warehouses():
        with url as warehouse_url:
            home = Path(tempfile.mkdtemp(prefix="mlpipe-bench-sync-"))
            settings = Settings(
                home=home,
                warehouse_url=warehouse_url,
                predlog={
                    "sink": "kafka",
                    "kafka_bootstrap": bootstrap,
                    "kafka_topic": topic,
                    "kafka_group": f"bench-{backend}",
                },
            )
            started = time.perf_counter()
            result = warehouse.sync(settings)
            seconds = time.perf_counter() - started
            out[backend] = {
                "loaded": result.rows_loaded,
                "seconds": round(seconds, 2),
                "rows_per_s": round(result.rows_loaded / seconds),
            }
    return out


def _produce(bootstrap: str, topic: str, rows: int) -> None:
    from confluent_kafka import Producer

    from mlpipe.predlog import ENCODER, TENANT_HEADER, PredictionRecord

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"}
    )
    now = time.time()
    for i in range(rows):
        tenant = f"tenant-{i % 8}"
        record = PredictionRecord(
            request_id=f"r{i}", ts=now + i * 1e-4, tenant=tenant, model="fraud", version="1",
            arm="champion", generation=1, entity_key=f"customer_id={i % 5000}",
            entity={"customer_id": i % 5000},
            features={"amount": float(i % 997), "txn_count_7d": float(i % 13), "avg": 42.0},
            score=0.25, label=0, latency_ms=3.0,
        )  # fmt: skip
        while True:
            try:
                producer.produce(
                    topic,
                    key=tenant.encode(),
                    value=ENCODER.encode(record),
                    headers=[(TENANT_HEADER, tenant.encode())],
                )
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)


def _warehouses() -> Iterator[tuple[str, contextlib.AbstractContextManager[str]]]:
    yield (
        "duckdb",
        contextlib.nullcontext(
            f"duckdb:///{Path(tempfile.mkdtemp(prefix='mlpipe-bench-wh-')) / 'w.duckdb'}"
        ),
    )
    admin = os.environ.get("MLPIPE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
    with contextlib.suppress(Exception):
        import psycopg

        psycopg.connect(admin, connect_timeout=3).close()
        yield "postgresql", _postgres(admin)


@contextlib.contextmanager
def _postgres(admin: str) -> Iterator[str]:
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"mlpipe_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(admin).set(drivername="postgresql+psycopg", database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def table(results: dict[str, Any]) -> str:
    lines = ["| measure | figure |", "|---|---|"]
    s = results.get("serving")
    if s:
        lines += [
            f"| serving c={s['concurrency']}, files: req/s per round | {s['files_rps']} |",
            f"| serving c={s['concurrency']}, Kafka: req/s per round | {s['kafka_rps']} |",
            f"| p99 ms files / Kafka | {s['files_p99_ms']} / {s['kafka_p99_ms']} |",
            f"| Kafka / files, paired median (range) | {s['ratio_median']} ({s['ratio_range']}) |",
            f"| broker CPU per round, ms (files / Kafka rounds; JIT {s['broker']['jit']}, "
            f"CPUs {s['broker']['cpus']}) | {s['files_broker_cpu_ms']} / "
            f"{s['kafka_broker_cpu_ms']} |",
            f"| this broker's CPU over the serving stage (warm-up and both variants), s "
            f"| {s['broker_cpu_s']} |",
            f"| load average (1 min) at the stage's start / end | {s['load_average']} |",
        ]
    e = results.get("latency")
    if e:
        lines.append(
            f"| answer → row in warehouse (sync --follow), {e['answered']} answered, "
            f"{e['in_warehouse']} loaded | p50 {e['p50_ms']} ms, p99 {e['p99_ms']} ms |"
        )
    c = results.get("consumer")
    if c:
        for backend in ("duckdb", "postgresql"):
            if backend in c:
                b = c[backend]
                lines.append(
                    f"| sync of {c['rows']} records into {backend} | "
                    f"{b['rows_per_s']} rows/s ({b['seconds']} s) |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    skip = set(args.skip.split(","))
    servers.install_signal_handlers()
    args.stack = ensure_home(args.home)  # the demo home the servers run on
    results: dict[str, Any] = {}
    with broker(args.broker_jit, args.broker_cpus) as bootstrap:
        if "serving" not in skip:
            results["serving"] = {**serving(args, bootstrap), "concurrency": args.concurrency}
        if "latency" not in skip:
            results["latency"] = latency(args, bootstrap)
        if "consumer" not in skip:
            results["consumer"] = consumer(args, bootstrap)
    servers.stop_all()
    text = table(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kafka-latest.json").write_text(json.dumps(results, indent=2))
    (args.out / "kafka-latest.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
