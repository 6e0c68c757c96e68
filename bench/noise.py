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
class Snapshot:
    """Per pid: (name, start time in ticks, CPU seconds with its reaped children); the steal."""

    cpu: dict[int, tuple[str, int, float]]
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
    """Every process's CPU so far (user + system, with its reaped children's) and the steal."""
    cpu: dict[int, tuple[str, int, float]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            parsed = _process_cpu(entry / "stat")
            if parsed is not None:
                cpu[int(entry.name)] = parsed
    return Snapshot(cpu, _steal_s(proc / "stat"))


def between(before: Snapshot, after: Snapshot, ours: set[int], top: int = 3) -> Noise:
    """The CPU processes not in ``ours`` used from ``before`` to ``after``.

    A process that started meanwhile counts whole (a pid is the same process if
    its start time is); one that exited meanwhile is lost unless its parent
    reaped it (then its CPU is in the parent's).
    """
    used: Counter[str] = Counter()
    for pid, (name, started, seconds) in after.cpu.items():
        if pid in ours:
            continue
        earlier = before.cpu.get(pid)
        delta = seconds - earlier[2] if earlier and earlier[1] == started else seconds
        if delta > 0:
            used[name] += delta * 1000.0
    return Noise(
        other_cpu_ms=sum(used.values()),
        steal_ms=max(0.0, after.steal_s - before.steal_s) * 1000.0,
        top=[(name, ms) for name, ms in used.most_common(top)],
    )


def bench_pids() -> set[int]:
    """This process and everything it started (the systems under test, the generator)."""
    from bench import servers

    return {os.getpid(), *servers.descendants(os.getpid())}


def since(before: Snapshot) -> dict[str, Any]:
    """The row fields for what ran outside the bench (:func:`bench_pids`) since ``before``."""
    return between(before, snapshot(), bench_pids()).fields()


def note(row: dict[str, Any]) -> str:
    """A "; meanwhile ..." note when others or the hypervisor took ``NOISY_MS`` or more."""
    other, steal = row.get("other_cpu_ms", 0), row.get("steal_ms", 0)
    if other < NOISY_MS and steal < NOISY_MS:
        return ""
    others = f"other processes used {other} ms of CPU ({row['other_top']})"
    return f"; meanwhile {others}, steal {steal} ms"


def _process_cpu(stat: Path) -> tuple[str, int, float] | None:
    try:
        text = stat.read_text()
    except OSError:  # exited meanwhile
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    # proc(5), counted from "state": utime, stime, cutime, cstime at 11-14, starttime at 19
    return name, int(fields[19]), sum(int(v) for v in fields[11:15]) * _TICK_S


def _steal_s(stat: Path) -> float:
    try:
        first = stat.read_text().splitlines()[0].split()
    except OSError:
        return 0.0
    return int(first[8]) * _TICK_S if first[0] == "cpu" and len(first) > 8 else 0.0


__all__ = ["Noise", "Snapshot", "bench_pids", "between", "note", "since", "snapshot"]
