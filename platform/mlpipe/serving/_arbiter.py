"""The scoring server's main process: one listening socket, ``serving.workers`` workers on it.

What ``bentoml serve`` runs for a service, with mlpipe's worker
(:mod:`mlpipe.serving._worker`) in place of BentoML's, which is the only way to
give uvicorn a protocol of its own (decision 039). The supervisor is circus's
arbiter, as under ``bentoml serve``: it binds the socket, starts each worker
with the socket's fd and an index (1..n: a crashed worker's replacement gets
its index back), and on SIGTERM or SIGINT signals every worker, each of which
answers (and logs) what it has accepted, within ``--timeout-graceful-shutdown``,
and exits; then it exits too.

Run as ``python -m mlpipe.serving._arbiter`` (``mlpipe serve`` execs it:
:func:`mlpipe.serving.server_command`); settings come from the environment.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import shlex
import socket
import sys
import tempfile
from pathlib import Path

from circus.arbiter import Arbiter
from circus.sockets import CircusSocket
from circus.watcher import Watcher

from mlpipe.serving._server import MLPIPE_WORKER, WORKER_ENV

SOCKET = "api"
_log = logging.getLogger("mlpipe.serving")


def worker_argv(service: str, *, backlog: int, graceful_s: int) -> list[str]:
    """The worker's command line, with circus's placeholders for the socket and index."""
    return [
        "-m",
        "mlpipe.serving._worker",
        service,
        "--fd",
        f"$(circus.sockets.{SOCKET})",
        "--worker-id",
        "$(CIRCUS.WID)",
        "--backlog",
        str(backlog),
        "--timeout-graceful-shutdown",
        str(graceful_s),
    ]


def worker_env(metrics_dir: str) -> dict[str, str]:
    """The workers' environment: this process's, :data:`WORKER_ENV` where it is unset,
    BentoML's Prometheus directory (its metrics client and prometheus_client both read it),
    and :data:`MLPIPE_WORKER` (the service tells a worker of another server by its absence)."""
    return {
        **WORKER_ENV,
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": metrics_dir,
        MLPIPE_WORKER: "1",
    }


def build_arbiter(
    service: str,
    *,
    working_dir: Path,
    host: str,
    port: int,
    workers: int,
    graceful_s: int,
    control_dir: Path,
    backlog: int = 2048,
) -> Arbiter:
    """circus's arbiter for the server: its socket, its workers, its control endpoints
    (Unix sockets under ``control_dir``, so servers side by side never share one)."""
    from mlpipe.serving._bentoml_private import fresh_metrics_dir

    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    watcher = Watcher(
        name="scoring",
        cmd=shlex.quote(sys.executable),
        args=worker_argv(service, backlog=backlog, graceful_s=graceful_s),
        numprocesses=workers,
        working_dir=str(working_dir),
        env=worker_env(fresh_metrics_dir()),
        copy_env=False,
        use_sockets=True,
        stop_children=True,
        close_child_stdin=True,
        # each worker bounds its own drain (uvicorn's graceful shutdown, graceful_s)
        graceful_timeout=86400,
        respawn=True,
    )
    return Arbiter(
        [watcher],
        endpoint=f"ipc://{control_dir / 'control'}",
        pubsub_endpoint=f"ipc://{control_dir / 'pubsub'}",
        sockets=[CircusSocket(name=SOCKET, host=host, port=port, family=family, backlog=backlog)],
        check_delay=10,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mlpipe.serving._arbiter")
    parser.add_argument("service", help="the service's import string, e.g. service:Scoring")
    parser.add_argument("--working-dir", type=Path, required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout-graceful-shutdown", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(name)s] %(message)s", force=True)
    logging.getLogger("circus").setLevel(logging.WARNING)  # its start and stop, step by step
    with tempfile.TemporaryDirectory(prefix="mlpipe-arbiter-") as control_dir:
        arbiter = build_arbiter(
            args.service,
            working_dir=args.working_dir,
            host=args.host,
            port=args.port,
            workers=args.workers,
            graceful_s=args.timeout_graceful_shutdown,
            control_dir=Path(control_dir),
        )
        _log.info(
            "scoring server on http://%s:%d, %d worker(s), arbiter pid %d",
            args.host,
            args.port,
            args.workers,
            os.getpid(),
        )
        arbiter.start()


if __name__ == "__main__":
    main()
