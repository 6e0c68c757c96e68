"""``python -m bench.kafka_cpu``: where the CPU of a request goes, segment files against Kafka.

Closed-loop throughput at c=32 on a machine the load saturates is the inverse of
the CPU a request costs, everything on the machine counted: the server, the
load generator, and, for the Kafka sink, the broker on the same cores. This
serves one server per sink (files, Kafka) on the bench's demo stack, measures
them in alternating rounds like ``bench.ab``, and reads from ``/proc`` the CPU
each party used during a round, per answered request (µs):

- ``server``: the server's Python threads (event loop, log thread, ...);
- ``librdkafka``: the producer's own threads (``rdk:*``) in the server;
- ``broker``: the broker's JVM (a ``kafka.Kafka`` process);
- ``loadgen``: the load generator (this process's children).

The broker is started like ``bench.kafka``'s (``--broker-jit``,
``--broker-cpus``). Prints one line a round and the medians; writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench import loadgen, servers
from bench.kafka import BROKER_PIDS, broker, process_cpu_s
from bench.run import RESULTS
from bench.workload import Cases, ensure_home, mlpipe_bodies
from mlpipe.serving import free_port

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.kafka_cpu", description=__doc__.splitlines()[0]
    )
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per round and sink")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of load per sink first")
    p.add_argument("--broker-jit", action="store_true", help="the broker's JVM with the full JIT")
    p.add_argument("--broker-cpus", default="", help="pin the broker to these CPUs (taskset -c)")
    p.add_argument("--home", type=Path, default=RESULTS / "home")
    return p.parse_args(argv)


def _stat(path: Path) -> tuple[str, float]:
    """(name, user + system CPU seconds) of a process or thread; ("", 0) once it is gone."""
    try:
        text = path.read_text()
    except OSError:
        return "", 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return text[text.index("(") + 1 : text.rindex(")")], (
        int(fields[11]) + int(fields[12])
    ) * _TICK_S


def _server_cpu(pids: list[int]) -> dict[str, float]:
    """The servers' CPU so far: their Python threads, and librdkafka's (``rdk:*``)."""
    out = {"server": 0.0, "librdkafka": 0.0}
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                name, seconds = _stat(task / "stat")
                out["librdkafka" if name.startswith("rdk:") else "server"] += seconds
    return out


def _round(
    pids: list[int], port: int, broker_pid: int, args: argparse.Namespace
) -> dict[str, float]:
    """One round on one server; the broker counted is this bench's only (by ``broker_pid``),
    not another on the machine (the project's Kafka tests start their own)."""
    body = mlpipe_bodies(Cases())
    before, broker_before = _server_cpu(pids), process_cpu_s(broker_pid)
    children_before = sum(os.times()[2:4])
    sample = loadgen.closed_loop(
        "127.0.0.1",
        port,
        "/predict",
        body,
        concurrency=args.concurrency,
        duration_s=args.duration,
    )
    after = _server_cpu(pids)
    answered = max(1, len(sample.latencies_s))
    per = {k: (after[k] - before[k]) / answered * 1e6 for k in after}
    per["broker"] = (process_cpu_s(broker_pid) - broker_before) / answered * 1e6
    per["loadgen"] = (sum(os.times()[2:4]) - children_before) / answered * 1e6
    per["rps"] = answered / sample.elapsed_s
    return per


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    servers.install_signal_handlers()
    home = ensure_home(args.home)
    rows: dict[str, list[dict[str, float]]] = {"files": [], "kafka": []}
    try:
        with (
            broker(args.broker_jit, args.broker_cpus) as bootstrap,
            contextlib.ExitStack() as stack,
        ):
            kafka = {
                "MLPIPE_PREDLOG__SINK": "kafka",
                "MLPIPE_PREDLOG__KAFKA_BOOTSTRAP": bootstrap,
                "MLPIPE_PREDLOG__KAFKA_TOPIC": "bench-cpu",
            }
            started: dict[str, tuple[int, list[int]]] = {}
            for label, env in (("files", {}), ("kafka", kafka)):
                port = free_port()
                spec = servers.mlpipe_spec(home, port, env, label=f"cpu-{label}")
                run = servers.start(spec, port, RESULTS / "logs")
                stack.callback(servers.stop, run)
                servers.wait_ready(run)
                started[label] = (port, [run.proc.pid, *servers.descendants(run.proc.pid)])
            for port, _ in started.values():
                loadgen.closed_loop(
                    "127.0.0.1",
                    port,
                    "/predict",
                    mlpipe_bodies(Cases()),
                    concurrency=args.concurrency,
                    duration_s=args.warmup,
                )
            for r in range(args.rounds):
                for label in ("files", "kafka") if r % 2 == 0 else ("kafka", "files"):
                    port, pids = started[label]
                    row = _round(pids, port, BROKER_PIDS[bootstrap], args)
                    rows[label].append(row)
                    print(_line(f"round {r} {label}", row), file=sys.stderr, flush=True)
    finally:
        servers.stop_all()
    for label, got in rows.items():
        print(_line(f"median {label}", {k: statistics.median(r[k] for r in got) for k in got[0]}))
    ratios = [k["rps"] / f["rps"] for f, k in zip(rows["files"], rows["kafka"], strict=True)]
    print(f"Kafka / files req/s, paired median {statistics.median(ratios):.3f}")
    return 0


def _line(what: str, row: dict[str, Any]) -> str:
    total = sum(v for k, v in row.items() if k != "rps")
    parts = ", ".join(f"{k} {row[k]:.0f}" for k in ("server", "librdkafka", "broker", "loadgen"))
    return f"{what}: {row['rps']:.0f} req/s; CPU µs a request: {parts} (total {total:.0f})"


if __name__ == "__main__":
    raise SystemExit(main())
