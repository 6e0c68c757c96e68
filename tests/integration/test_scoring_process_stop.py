"""Stopping a server stops every process under it, as ``ScoringProcess.stop`` does: a worker in
a session of its own (as BentoML starts each one) is killed with its leader when the leader
ignores SIGTERM, and stops on its own when the leader drains it. Real processes, no BentoML."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlpipe.serving._process_tree import Process, descendants, is_running, kill, stop_tree

pytestmark = pytest.mark.integration

# leader: ignores SIGTERM (stubborn) or drains its worker and exits (graceful); starts a
# sleeper in its own group and a worker that calls setsid and starts a sleeper of its own.
TREE = """
import os, signal, subprocess, sys, time
from pathlib import Path

role, out = sys.argv[1], Path(sys.argv[2])
here = [sys.executable, __file__]
if role == "sleeper":
    time.sleep(600)
elif role == "worker":
    os.setsid()
    sleeper = subprocess.Popen([*here, "sleeper", str(out)])
    def drain(*_):
        sleeper.terminate()
        sleeper.wait()
        (out / "drained").touch()
        sys.exit(0)
    signal.signal(signal.SIGTERM, drain)
    (out / "worker").write_text(f"{os.getpid()} {sleeper.pid}")
    time.sleep(600)
else:
    worker = subprocess.Popen([*here, "worker", str(out)])
    sleeper = subprocess.Popen([*here, "sleeper", str(out)])
    if role == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        def drain(*_):
            worker.terminate()
            sys.exit(worker.wait())
        signal.signal(signal.SIGTERM, drain)
    while not (out / "worker").exists():
        time.sleep(0.05)
    (out / "pids.tmp").write_text(f"{sleeper.pid} " + (out / "worker").read_text())
    (out / "pids.tmp").rename(out / "pids")
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _start(tmp_path: Path, role: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    """The tree started as ``ScoringProcess`` starts a server; its pids once all run."""
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    proc = subprocess.Popen(
        [sys.executable, str(script), role, str(tmp_path)], start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "pids").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the tree did not start"
        time.sleep(0.05)
    return proc, [proc.pid, *map(int, (tmp_path / "pids").read_text().split())]


@pytest.fixture
def cleanup() -> Iterator[list[int]]:
    """Pids to SIGKILL after the test, should it fail with them running."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_leader_that_ignores_sigterm_is_killed_with_workers_in_other_sessions(
    tmp_path: Path, cleanup: list[int]
) -> None:
    proc, pids = _start(tmp_path, "stubborn")
    cleanup += pids
    leader, sleeper, worker, worker_sleeper = pids
    assert os.getsid(worker) == worker != os.getsid(leader)  # outside the leader's group
    assert {p.pid for p in descendants(leader)} == {sleeper, worker, worker_sleeper}
    stop_tree(proc, grace_s=1.0)
    assert proc.returncode == -signal.SIGKILL
    assert [pid for pid in pids if _alive(pid)] == []
    assert not (tmp_path / "drained").exists()


def test_a_leader_that_drains_stops_gracefully(tmp_path: Path, cleanup: list[int]) -> None:
    proc, pids = _start(tmp_path, "graceful")
    cleanup += pids
    stop_tree(proc, grace_s=60.0)
    assert proc.returncode == 0  # the leader's own exit, not a kill
    assert (tmp_path / "drained").exists()  # the worker answered SIGTERM
    assert [pid for pid in pids if _alive(pid)] == []


def test_a_pid_now_held_by_another_process_is_not_killed(cleanup: list[int]) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    cleanup.append(sleeper.pid)
    found = next(p for p in descendants(os.getpid()) if p.pid == sleeper.pid)
    recycled = Process(pid=sleeper.pid, started=found.started - 1)  # an earlier holder
    assert is_running(found) and not is_running(recycled)
    kill([recycled])
    sleeper.terminate()  # had kill sent its SIGKILL, that would have ended the sleeper first
    assert sleeper.wait(timeout=60) == -signal.SIGTERM
