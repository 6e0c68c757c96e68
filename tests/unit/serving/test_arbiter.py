"""The server's main process: circus's arbiter with mlpipe's workers on one socket."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe.serving import WORKER_ENV, unguarded_worker
from mlpipe.serving._arbiter import SOCKET, build_arbiter, worker_argv, worker_env


def test_each_worker_gets_the_socket_and_its_index_from_circus() -> None:
    argv = worker_argv("service:Scoring", backlog=64, graceful_s=15)
    assert argv[:3] == ["-m", "mlpipe.serving._worker", "service:Scoring"]
    assert argv[argv.index("--fd") + 1] == f"$(circus.sockets.{SOCKET})"
    assert argv[argv.index("--worker-id") + 1] == "$(CIRCUS.WID)"
    assert argv[argv.index("--timeout-graceful-shutdown") + 1] == "15"


def test_the_workers_run_optimized_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYTHONOPTIMIZE", raising=False)
    monkeypatch.setenv("MLPIPE_HOME", "/somewhere")
    env = worker_env("/metrics-dir")
    assert env["PYTHONOPTIMIZE"] == WORKER_ENV["PYTHONOPTIMIZE"] == "1"
    assert env["MLPIPE_HOME"] == "/somewhere"  # the server's settings reach the workers
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/metrics-dir"
    assert unguarded_worker(env) is None  # the service knows its worker is mlpipe's
    monkeypatch.setenv("PYTHONOPTIMIZE", "0")  # typeguard's checks on, for debugging
    assert worker_env("/metrics-dir")["PYTHONOPTIMIZE"] == "0"


def test_the_arbiter_holds_one_socket_and_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENTOML_HOME", str(tmp_path / "bentoml"))
    stale = tmp_path / "bentoml" / "prometheus_multiproc_dir" / "counter_1.db"
    stale.parent.mkdir(parents=True)
    stale.write_text("from the last run")
    arbiter = build_arbiter(
        "service:Scoring",
        working_dir=tmp_path,
        host="::1",
        port=4321,
        workers=3,
        graceful_s=15,
        control_dir=tmp_path,
    )
    (watcher,) = arbiter.watchers
    assert (watcher.name, watcher.numprocesses, watcher.working_dir) == (
        "scoring",
        3,
        str(tmp_path),
    )
    assert watcher.use_sockets and watcher.stop_children and watcher.respawn
    (sock,) = arbiter.sockets.values()
    assert (sock.name, sock.host, sock.port) == (SOCKET, "::1", 4321)
    assert arbiter.endpoint == f"ipc://{tmp_path / 'control'}"
    # BentoML's metrics directory, emptied for this run's workers
    assert watcher.env["PROMETHEUS_MULTIPROC_DIR"] == str(stale.parent)
    assert not stale.exists()
