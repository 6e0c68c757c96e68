"""Stopping a server and every process under it, even those in sessions of their own.

BentoML's arbiter starts each worker in a session of its own (``setsid``), so a
signal to the arbiter's process group misses the workers, and once the arbiter
dies hard they run on, re-parented to init, holding their memory. So the tree is
read from ``/proc`` while the arbiter still lives (its parent pids lead there),
and whatever of it outlives the grace period is killed. A process is named by its
pid and its start time: a pid the kernel has given to another process since is
never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

_PROC = Path("/proc")
_POLL_S = 0.05


@dataclass(frozen=True, kw_only=True, slots=True)
class Process:
    """One process for good: its pid, and its start time (clock ticks after boot)."""

    pid: int
    started: int


class _Stat(NamedTuple):
    parent: int
    started: int
    state: str


def _stat(pid: int) -> _Stat | None:
    """The parent, start time and state of ``pid`` from ``/proc/<pid>/stat``; None if gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (name) state ppid ... starttime ...": the name may hold spaces and parentheses
    fields = text[text.rindex(")") + 2 :].split()
    return _Stat(parent=int(fields[1]), started=int(fields[19]), state=fields[0])


def descendants(pid: int) -> list[Process]:
    """The processes under ``pid``: its children, theirs, and so on ([] without ``/proc``)."""
    children: dict[int, list[Process]] = {}
    for entry in _PROC.glob("[0-9]*"):
        stat = _stat(int(entry.name))
        if stat is not None:
            child = Process(pid=int(entry.name), started=stat.started)
            children.setdefault(stat.parent, []).append(child)
    found: list[Process] = []
    parents = [pid]
    while parents:
        for child in children.get(parents.pop(), []):
            found.append(child)
            parents.append(child.pid)
    return found


def is_running(process: Process) -> bool:
    """Whether the process still runs (a zombie has finished: only its exit code is left)."""
    stat = _stat(process.pid)
    return stat is not None and stat.started == process.started and stat.state != "Z"


def kill(processes: list[Process]) -> None:
    """SIGKILL each process that still runs. The pidfd holds the process found, so the
    start-time check and the signal are about the same process."""
    for process in processes:
        try:
            handle = os.pidfd_open(process.pid)
        except ProcessLookupError:
            continue
        try:
            if is_running(process):
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(handle, signal.SIGKILL)
        finally:
            os.close(handle)


def _wait_gone(processes: list[Process], deadline: float) -> list[Process]:
    """Those of ``processes`` still running at ``deadline`` (sooner once none is)."""
    running = [p for p in processes if is_running(p)]
    while running and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        running = [p for p in running if is_running(p)]
    return running


def stop_tree(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Stop ``proc`` (the leader of its own process group) and every process under it.

    SIGTERM to the group, so a server drains; what still runs ``grace_s`` later (the
    leader, its group, and descendants in other sessions) is killed. Returns once the
    leader has exited and the killed descendants have ended (up to ``grace_s`` more).
    """
    deadline = time.monotonic() + grace_s
    tree = descendants(proc.pid)  # now: once the leader dies, its orphans belong to init
    pgid = os.getpgid(proc.pid)
    os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        tree = list(dict.fromkeys([*tree, *descendants(proc.pid)]))  # and those started since
        os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)  # members of the group that outlived the leader
    survivors = _wait_gone(tree, deadline)
    kill(survivors)
    _wait_gone(survivors, time.monotonic() + grace_s)  # SIGKILL acts when each next runs


__all__ = ["Process", "descendants", "is_running", "kill", "stop_tree"]
