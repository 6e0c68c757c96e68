"""The production profile's services on loopback: PostgreSQL databases, an MLflow server, Redis.

Each helper is a context manager that creates what it needs and removes it on
exit: a fresh database ``mlpipe_test_<hex>`` (dropped WITH (FORCE) afterwards),
an ``mlflow server`` on a free loopback port whose backend store is such a
database and whose artifacts are proxied into a temp dir (its process group is
killed afterwards), a Redis client. Where PostgreSQL or Redis is not running,
they call :func:`pytest.skip` with the reason; test modules mark themselves
``postgres`` / ``redis`` so ``-m "not postgres"`` deselects them up front.

The services are found at ``MLPIPE_TEST_PG`` (a libpq URL to an administrative
database; default ``postgresql://postgres@127.0.0.1:5432/test``, trust auth) and
``MLPIPE_TEST_REDIS`` (default ``redis://127.0.0.1:6379/0``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from mlpipe.config import Settings
from mlpipe.serving import free_port

if TYPE_CHECKING:
    from mlpipe.serving import ScoringProcess

ADMIN_URL = os.environ.get("MLPIPE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("MLPIPE_TEST_REDIS", "redis://127.0.0.1:6379/0")
MLFLOW = str(Path(sys.executable).parent / "mlflow")
SERVER_START_TIMEOUT_S = 120.0


def start_side_by_side(servers: Sequence[ScoringProcess], **start: Any) -> None:
    """Start ``servers`` at once (each takes a while to load), each with ``start``'s
    keyword arguments; the first failure is raised in the caller's thread once all are done."""
    errors: list[BaseException] = []

    def run(server: ScoringProcess) -> None:
        try:
            server.start(**start)
        except BaseException as exc:  # reported below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _skip(reason: str) -> NoReturn:
    """Skip, saying why; under CI (``CI`` set) fail instead: CI must run every service test."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test, but {reason}")
    pytest.skip(reason)


def _admin_connect():  # type: ignore[no-untyped-def]
    """An autocommit psycopg connection to the admin database, or skip the test."""
    try:
        import psycopg
    except ImportError:
        _skip("psycopg is not installed (pip install 'mlpipe[prod]')")
    try:
        return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _skip(f"PostgreSQL is not reachable at {ADMIN_URL}: {first}")


def sqlalchemy_url(database: str) -> str:
    """The SQLAlchemy (psycopg 3) URL of ``database`` on the test server."""
    from sqlalchemy.engine import make_url

    return (
        make_url(ADMIN_URL)
        .set(drivername="postgresql+psycopg", database=database)
        .render_as_string(hide_password=False)
    )


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh, empty database; yields its SQLAlchemy URL and drops it afterwards."""
    name = f"mlpipe_test_{uuid.uuid4().hex[:12]}"
    with _admin_connect() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = sqlalchemy_url(name)
    try:
        yield url
    finally:
        _dispose_engines(url)
        with _admin_connect() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _dispose_engines(url: str) -> None:
    """Close this process's pooled connections to ``url`` before its database is dropped."""
    from mlpipe import engines

    engines.engine_for(url).dispose()
    engines.engine_for.cache_clear()
    from mlpipe.deployments._plane import plane_for

    plane_for.cache_clear()


class MlflowServer:
    """``mlflow server`` on loopback; ``url`` is its HTTP address. The port stays the same
    across :meth:`stop` and :meth:`start`, so a test can take the server down and back."""

    def __init__(self, backend_url: str, artifacts: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.command = [
            MLFLOW,
            "server",
            "--backend-store-uri",
            backend_url,
            "--artifacts-destination",
            str(artifacts),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = SERVER_START_TIMEOUT_S) -> None:
        """Start it and wait until ``/health`` answers; RuntimeError if it never does."""
        import httpx

        env = {
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
            # no huey job runner beside the server: mlpipe runs no MLflow jobs (GenAI
            # judges, trace rollups), and it was a second process starting on the same cores
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group, killed as one in stop()
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited early:\n{self._tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"mlflow server not healthy after {timeout_s:.0f}s:\n{self._tail()}")

    def stop(self) -> None:
        """Kill its process group (SIGKILL): a server that goes away, as in an outage.

        Its graceful stop (SIGTERM) took ~6 s, four times a run; nothing of it is
        kept (its database is dropped, its artifacts are in a temp dir).
        """
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)

    def _tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


@contextmanager
def mlflow_server(tmp: Path) -> Iterator[MlflowServer]:
    """An MLflow tracking server on loopback, PostgreSQL backend store, artifacts under ``tmp``."""
    with postgres_database() as backend:
        server = MlflowServer(backend, tmp / "mlflow-artifacts", tmp / "mlflow-server.log")
        try:
            server.start()
            yield server
        finally:
            server.stop()


@contextmanager
def redis_client() -> Iterator[object]:
    """A redis-py client on the test Redis, or skip the test."""
    try:
        import redis
    except ImportError:
        _skip("redis-py is not installed (pip install 'mlpipe[prod]')")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        _skip(f"Redis is not reachable at {REDIS_URL}: {exc}")
    try:
        yield client
    finally:
        client.close()


def redis_connection_string() -> str:
    """``host:port,db=N`` as Feast's Redis online store wants it."""
    from urllib.parse import urlsplit

    parts = urlsplit(REDIS_URL)
    db = (parts.path or "/0").lstrip("/") or "0"
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379},db={db}"


@pytest.fixture(
    name="settings", params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def either_warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """``settings`` whose warehouse is a fresh DuckDB file, or a fresh PostgreSQL database
    (import it into a test module to run its tests on both)."""
    if request.param == "duckdb":
        yield Settings(home=tmp_path)
        return
    with postgres_database() as url:
        yield Settings(home=tmp_path, warehouse_url=url)
