"""What else used the machine while a point was measured.

The bench shares two cores with whatever else the machine runs, and a
process that takes a core for a few hundred milliseconds shows up as a
latency spike or a burst of 503s in an open-loop point. Here, once a minute,
RabbitMQ (a service of the machine, not of mlpipe) starts an Erlang VM that
burns ~250 ms of CPU; `perf sched` put it on a core during a 157 ms spike
(decision 005). Each measured point therefore
records the CPU that processes outside the bench used meanwhile (kernel
threads included) and the time the hypervisor took the vCPUs away (steal),
so a bad point can be told from a bad server.

The total is the machine's busy CPU (``/proc/stat``) less the bench's own, so
it is bounded by what the cores could give. Summing each process's CPU with
its reaped children's instead overstated it: a parent that reaps a child in
the middle of a point gets the child's whole lifetime at once (one CI point
of a few seconds read 17,510 ms, more than two cores can give). The names
beside the total are live processes' own CPU; what no live process used
(processes that exited meanwhile, ticks taken while idle) is named
``(exited)``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
NOISY_MS = 150  # CPU taken by others during a point that earns a note beside its result
_PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessCpu:
    """One process's CPU so far: its own, and its reaped children's (both in seconds)."""

    name: str
    started: int  # start time in ticks since boot: a pid is the same process while it is
    own_s: float
    reaped_s: float


@dataclass(frozen=True)
class Snapshot:
    """Every process's CPU by pid; the machine's busy CPU and the steal so far (seconds)."""

    cpu: dict[int, ProcessCpu]
    busy_s: float
    steal_s: float


@dataclass(frozen=True)
class Noise:
    """CPU used outside the bench during a measurement, in ms, and by whom."""

    other_cpu_ms: float = 0.0
    steal_ms: float = 0.0
    top: list[tuple[str, float]] = field(default_factory=list)

    def fields(self) -> dict[str, Any]:
        """The row fields: ``other_cpu_ms``, ``steal_ms``, ``other_top`` ("name ms, ...")."""
        return {
            "other_cpu_ms": round(self.other_cpu_ms),
            "steal_ms": round(self.steal_ms),
            "other_top": ", ".join(f"{name} {ms:.0f}" for name, ms in self.top),
        }


def snapshot(proc: Path = _PROC) -> Snapshot:
    """Every process's CPU so far (user + system, and its reaped children's); the machine's."""
    cpu: dict[int, ProcessCpu] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            parsed = _process_cpu(entry / "stat")
            if parsed is not None:
                cpu[int(entry.name)] = parsed
    busy_s, steal_s = _machine_s(proc / "stat")
    return Snapshot(cpu, busy_s, steal_s)


def between(before: Snapshot, after: Snapshot, ours: set[int], top: int = 3) -> Noise:
    """The CPU used from ``before`` to ``after`` by processes not in ``ours``.

    The total is the machine's busy CPU less what ``ours`` used (their own and
    their reaped children's). A process that started meanwhile counts whole (a
    pid is the same process while its start time is).
    """
    mine = 0.0
    named: Counter[str] = Counter()
    for pid, now in after.cpu.items():
        then = _earlier(before, pid, now)
        own = now.own_s - then.own_s if then is not None else now.own_s
        if pid in ours:
            mine += own + (now.reaped_s - then.reaped_s if then is not None else now.reaped_s)
        elif own > 0:
            named[now.name] += own * 1000.0
    other_ms = max(0.0, after.busy_s - before.busy_s - mine) * 1000.0
    unnamed = other_ms - sum(named.values())
    if unnamed >= 1.0:  # ms: below a tick is rounding
        named["(exited)"] = unnamed
    return Noise(
        other_cpu_ms=other_ms,
        steal_ms=max(0.0, after.steal_s - before.steal_s) * 1000.0,
        top=[(name, ms) for name, ms in named.most_common(top)],
    )


def split(before: Snapshot, after: Snapshot, pids: list[int]) -> list[int]:
    """The CPU each of ``pids`` used from ``before`` to ``after`` (ms), busiest first.

    A server's processes: whether its workers shared the load. Two uvicorn
    workers on one listening socket sometimes accept all 32 of a closed loop's
    connections in one of them, and the other sits idle for the whole point
    (the floor's low mode: decision 045).
    """
    used = []
    for pid in pids:
        now = after.cpu.get(pid)
        then = _earlier(before, pid, now) if now is not None else None
        if now is not None and then is not None:
            used.append(round((now.own_s - then.own_s) * 1000.0))
    return sorted(used, reverse=True)


def _earlier(before: Snapshot, pid: int, now: ProcessCpu) -> ProcessCpu | None:
    """``pid``'s reading in ``before`` if it is the same process as ``now`` (the same
    start time: a pid can be reused), else None."""
    then = before.cpu.get(pid)
    return then if then is not None and then.started == now.started else None


def bench_pids() -> set[int]:
    """This process and everything it started (the systems under test, the generator)."""
    from bench import servers

    return {os.getpid(), *servers.descendants(os.getpid())}


def since(before: Snapshot, server: int | None = None) -> dict[str, Any]:
    """The row fields for what ran outside the bench (:func:`bench_pids`) since ``before``;
    with ``server`` (the pid a system was started as), ``server_cpu_ms``: :func:`split`
    of that process and its descendants."""
    after = snapshot()
    fields = between(before, after, bench_pids()).fields()
    if server is not None:
        from bench import servers

        fields["server_cpu_ms"] = split(before, after, [server, *servers.descendants(server)])
    return fields


def note(row: dict[str, Any]) -> str:
    """A "; meanwhile ..." note when others or the hypervisor took ``NOISY_MS`` or more."""
    other, steal = row.get("other_cpu_ms", 0), row.get("steal_ms", 0)
    if other < NOISY_MS and steal < NOISY_MS:
        return ""
    others = f"other processes used {other} ms of CPU ({row['other_top']})"
    return f"; meanwhile {others}, steal {steal} ms"


def _process_cpu(stat: Path) -> ProcessCpu | None:
    try:
        text = stat.read_text()
    except OSError:  # exited meanwhile
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    # proc(5), counted from "state": utime, stime, cutime, cstime at 11-14, starttime at 19
    own, reaped = (int(fields[11]) + int(fields[12])), (int(fields[13]) + int(fields[14]))
    return ProcessCpu(name, int(fields[19]), own * _TICK_S, reaped * _TICK_S)


def _machine_s(stat: Path) -> tuple[float, float]:
    """The busy CPU of all cores and the steal so far, from ``/proc/stat``'s "cpu" line.

    Busy is user, nice, system, irq and softirq: without IRQ time accounting
    (the usual kernel build) a task's system time includes the interrupts it
    was interrupted by, so these are what the processes' own times add up to.
    """
    try:
        first = stat.read_text().splitlines()[0].split()
    except OSError:
        return 0.0, 0.0
    if first[0] != "cpu" or len(first) < 9:
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    return (user + nice + system + irq + softirq) * _TICK_S, steal * _TICK_S


__all__ = [
    "Noise",
    "ProcessCpu",
    "Snapshot",
    "bench_pids",
    "between",
    "note",
    "since",
    "snapshot",
    "split",
]
