"""How to start the scoring service as a process: the command line and its environment.

The server reads its settings from the environment, so the launcher passes the
project home, profile and serving overrides as ``MLPIPE_*`` variables.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from mlpipe.errors import NotFound, StoreUnavailable
from mlpipe.serving._generations import READY_LOG
from mlpipe.serving._process_tree import stop_tree

if TYPE_CHECKING:
    from mlpipe.config import Settings

SERVICE = "service:Scoring"
# The workers' environment, unless the server's sets it: optimized, where typeguard's
# decorator is off by design (Feast's checks cost seconds of a start; decision 038).
# `bentos/scoring/service.py` declares the same to BentoML, for `bentoml serve`.
WORKER_ENV = {"PYTHONOPTIMIZE": "1"}
# Set by mlpipe's arbiter in its workers' environment (``_arbiter.worker_env``): a worker
# without it was started by another server, such as ``bentoml serve`` (decision 039).
MLPIPE_WORKER = "MLPIPE_WORKER"
_DRAIN_MARGIN_S = 5
_REGISTRY_RETRIES = {  # the serving workers' MLflow client; the user's own values win
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}


def unguarded_worker(environ: Mapping[str, str] = os.environ) -> str | None:
    """What this worker lacks when another server than mlpipe's started it, or None.

    ``bentoml serve`` runs BentoML's own worker, whose HTTP protocol is uvicorn's: the
    request head is bounded neither in size nor in time. The service logs this at
    start, so a deployment that skipped ``mlpipe serve`` is told, not left unguarded
    in silence.
    """
    if environ.get(MLPIPE_WORKER) == "1":
        return None
    return (
        "this worker was not started by `mlpipe serve` (by `bentoml serve`?): its HTTP "
        "protocol bounds no request head, so serving.max_header_bytes (431) and "
        "serving.header_timeout_s (408) are not enforced; serve with `mlpipe serve`, "
        "as the image's default command does"
    )


def service_dir() -> Path:
    """The scoring service the package carries (``bentos/scoring`` of the source tree).

    ``MLPIPE_SCORING_DIR`` names another one. Raises NotFound when it has no service.py.
    """
    explicit = os.environ.get("MLPIPE_SCORING_DIR")
    packaged = Path(str(files("mlpipe").joinpath("_bundled", "scoring")))
    path = Path(explicit) if explicit else packaged
    if not (path / "service.py").is_file():
        raise NotFound(f"no scoring service at {path} (set MLPIPE_SCORING_DIR)")
    return path


def server_command(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, env) that run the scoring server (:mod:`mlpipe.serving._arbiter`) for these settings.

    On SIGTERM the server drains: each worker stops accepting, answers (and logs)
    what it has accepted, then closes its log segment in the shutdown hook. A
    request still running ``serving.request_timeout_s`` + 5 s after the signal is
    cancelled, so the drain is bounded (inside Kubernetes' default 30 s grace
    period at the default 10 s timeout) and the segment is still closed cleanly.
    """
    s = settings.serving
    host = host or s.host
    port = port or s.port
    argv = [
        sys.executable,
        "-m",
        "mlpipe.serving._arbiter",
        SERVICE,
        "--working-dir",
        str(service_dir()),
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers or s.workers),
        "--timeout-graceful-shutdown",
        str(math.ceil(s.request_timeout_s) + _DRAIN_MARGIN_S),
    ]
    env = dict(os.environ)
    env.update(
        MLPIPE_HOME=str(settings.home),
        MLPIPE_PROFILE=settings.profile,
        MLPIPE_SERVING__HOST=host,
        MLPIPE_SERVING__PORT=str(port),
        BENTOML_DO_NOT_TRACK="true",
        # BentoML keeps its Prometheus multiprocess files in BENTOML_HOME and wipes
        # them when a server starts: a home per server keeps each /metrics its own.
        BENTOML_HOME=str(settings.state_path / "bentoml" / f"{host}-{port}"),
    )
    # A reload poll against a registry server that is down should fail in seconds (the
    # loaded generation serves meanwhile), not retry for MLflow's default ~4 minutes.
    for name, value in _REGISTRY_RETRIES.items():
        env.setdefault(name, value)
    if workers is not None:
        env["MLPIPE_SERVING__WORKERS"] = str(workers)
    return argv, env


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it; another process may take it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def exec_server(argv: list[str], env: dict[str, str]) -> NoReturn:
    """Replace this process with the server command (what ``mlpipe serve`` runs).

    An exec, not a child process: a supervisor signals the process it started
    (Kubernetes and Docker send SIGTERM to the main process only, and a
    container's PID 1 ignores a signal it has no handler for), so that process
    must be the server, which drains on SIGTERM. A parent that died on the
    signal would leave the server running, orphaned. ``argv`` and ``env`` come
    from :func:`server_command`. Raises StoreUnavailable when the exec fails.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        raise StoreUnavailable(f"cannot run {argv[0]}: {exc}") from exc


class ScoringProcess:
    """The scoring service as a child process in its own process group (for demos and tests).

    ``with ScoringProcess(settings, port=...) as server:`` starts it, waits until
    ``/readyz`` answers and every worker has loaded its models, and, on exit,
    stops the server and every process under it (SIGTERM, then SIGKILL).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        port: int,
        workers: int = 1,
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        argv, base_env = server_command(settings, host="127.0.0.1", port=port, workers=workers)
        self.url = f"http://127.0.0.1:{port}"
        self.workers = workers
        self.log_path = log_path or settings.state_path / f"serve-{port}.log"
        self._argv, self._env = argv, {**base_env, **(env or {})}
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ScoringProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, ready_timeout_s: float = 180.0) -> None:
        """Start the server and wait until every worker is ready; StoreUnavailable if never."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self._argv,
                env=self._env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise StoreUnavailable(f"the scoring service exited; see {self.log_path}")
            if self._ready():
                return
            time.sleep(0.5)
        self.stop()
        raise StoreUnavailable(f"the scoring service was not ready in {ready_timeout_s:.0f}s")

    @property
    def pid(self) -> int:
        """The server's main process: the arbiter that owns the socket and the workers.

        This is the process a supervisor signals (Kubernetes and Docker send SIGTERM
        to the container's main process only); on SIGTERM it stops the workers, each
        of which finishes the requests it has accepted before it exits.
        """
        if self._proc is None:
            raise StoreUnavailable("the scoring service is not started")
        return self._proc.pid

    def wait(self, timeout: float) -> int:
        """Wait for the server to exit; its exit code. Raises subprocess.TimeoutExpired."""
        if self._proc is None:
            raise StoreUnavailable("the scoring service is not started")
        return self._proc.wait(timeout=timeout)

    def _ready(self) -> bool:
        import httpx

        try:
            answered = httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False
        return answered and self._every_worker_loaded()

    def _every_worker_loaded(self) -> bool:
        """``/readyz`` is answered by whichever worker takes the connection, so it says 200
        as soon as one is ready while a sibling may still be loading (and refusing with
        "not ready"); each worker logs ``READY_LOG`` once its models are loaded."""
        return self.log_path.read_text(errors="replace").count(READY_LOG) >= self.workers

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the server and its workers (SIGTERM, SIGKILL after ``grace_s``); idempotent.

        The workers run in sessions of their own, outside the server's process group:
        :func:`stop_tree` finds them under the server and kills those that outlive it.
        """
        if self._proc is None or self._proc.poll() is not None:
            return
        stop_tree(self._proc, grace_s)


__all__ = [
    "MLPIPE_WORKER",
    "SERVICE",
    "WORKER_ENV",
    "ScoringProcess",
    "exec_server",
    "free_port",
    "server_command",
    "service_dir",
    "unguarded_worker",
]
