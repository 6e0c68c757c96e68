"""bench/noise.py: the CPU that processes outside the bench used while a point was measured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import noise

BURN = """
import sys, time
print("ready", flush=True)
sys.stdin.readline()
start = time.process_time()
while time.process_time() - start < 0.5:
    pass
print("burnt", flush=True)
time.sleep(60)
"""

# a server-like parent whose child burns 0.5 s on "go"
SERVER = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {BURN!r}], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
print("ready", flush=True)
sys.stdin.readline()
child.stdin.write("go\\n"); child.stdin.flush()
assert child.stdout.readline().strip() == "burnt"
print("burnt", flush=True)
sys.stdin.readline()
child.kill(); child.wait()
"""

# a parent outside the bench whose child burns 0.5 s, then waits; on "go" the parent reaps it
REAP = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {BURN!r}], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
child.stdin.write("go\\n"); child.stdin.flush()
assert child.stdout.readline().strip() == "burnt"
print("ready", flush=True)
sys.stdin.readline()
child.kill(); child.wait()
print("reaped", flush=True)
sys.stdin.readline()
"""


def _stat(pid: int, name: str, ticks: tuple[int, int, int, int]) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime ...
    before = "S 1 1 1 0 -1 0 0 0 0 0"
    after = "20 0 1 0 100 1000 50"
    return f"{pid} ({name}) {before} {' '.join(map(str, ticks))} {after}\n"


def _fake_proc(
    root: Path, procs: dict[int, tuple[str, tuple[int, int, int, int]]], steal: int
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for pid, (name, ticks) in procs.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "stat").write_text(_stat(pid, name, ticks))
    (root / "self").mkdir()  # not a pid: skipped
    (root / "stat").write_text(f"cpu  100 0 50 900 1 0 2 {steal} 0 0\ncpu0 1 2 3\n")
    return root


def _cpu(name: str, started: int, own_s: float, reaped_s: float = 0.0) -> noise.ProcessCpu:
    return noise.ProcessCpu(name, started, own_s, reaped_s)


def test_snapshot_reads_own_and_reaped_cpu_the_machines_busy_cpu_and_the_steal(
    tmp_path: Path,
) -> None:
    tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
    proc = _fake_proc(
        tmp_path / "proc", {7: ("beam.smp", (10, 5, 3, 2)), 8: ("odd) name (x", (1, 0, 0, 0))}, 40
    )
    snap = noise.snapshot(proc)
    assert set(snap.cpu) == {7, 8}
    beam = snap.cpu[7]
    assert (beam.name, beam.started) == ("beam.smp", 100)
    assert beam.own_s * 1000 == pytest.approx(15 * tick_ms)  # utime + stime
    assert beam.reaped_s * 1000 == pytest.approx(5 * tick_ms)  # cutime + cstime
    assert snap.cpu[8].name == "odd) name (x"  # the name is what lies between the outer parentheses
    # busy: user 100 + nice 0 + system 50 + irq 0 + softirq 2; idle and iowait are not busy
    assert snap.busy_s * 1000 == pytest.approx(152 * tick_ms)
    assert snap.steal_s * 1000 == pytest.approx(40 * tick_ms)


def test_between_is_the_machines_busy_cpu_less_the_benchs_named_by_process() -> None:
    before = noise.Snapshot(
        {1: _cpu("bench", 5, 1.0), 2: _cpu("server", 6, 5.0), 3: _cpu("beam.smp", 7, 2.0)},
        busy_s=100.0,
        steal_s=10.0,
    )
    after = noise.Snapshot(
        {
            1: _cpu("bench", 5, 1.5, reaped_s=0.5),  # the bench reaped its load generator
            2: _cpu("server", 6, 6.0),
            3: _cpu("beam.smp", 7, 2.25),
            4: _cpu("kdamond.0", 8, 0.05),  # started meanwhile: counts whole
        },
        busy_s=102.3,
        steal_s=10.1,
    )
    found = noise.between(before, after, ours={1, 2})
    # 2.3 s busy, 2.0 of it the bench's (0.5 own, 0.5 reaped, 1.0 the server's)
    assert found.other_cpu_ms == pytest.approx(300.0)
    assert found.steal_ms == pytest.approx(100.0)
    assert found.fields() == {
        "other_cpu_ms": 300,
        "steal_ms": 100,
        "other_top": "beam.smp 250, kdamond.0 50",
    }


def test_a_child_reaped_outside_the_bench_does_not_count_its_lifetime() -> None:
    # CI's bench-quick once read 17,510 ms for a point of a few seconds: a parent that reaps a
    # long-lived child gets the child's whole CPU in its own at once; only the busy CPU counts
    before = noise.Snapshot(
        {1: _cpu("bench", 5, 1.0), 9: _cpu("process_api", 3, 4.0, reaped_s=2.0)}, 50.0, 0.0
    )
    after = noise.Snapshot(
        {1: _cpu("bench", 5, 2.8), 9: _cpu("process_api", 3, 4.1, reaped_s=19.51)}, 52.0, 0.0
    )
    found = noise.between(before, after, ours={1})
    assert found.other_cpu_ms == pytest.approx(200.0)  # 2.0 s busy, 1.8 of it the bench's
    assert dict(found.top) == {
        "process_api": pytest.approx(100.0),
        "(exited)": pytest.approx(100.0),
    }


def test_what_no_live_process_used_is_named_exited_and_the_total_is_never_negative() -> None:
    before = noise.Snapshot({1: _cpu("bench", 5, 1.0)}, 10.0, 0.0)
    after = noise.Snapshot({1: _cpu("bench", 5, 1.2, reaped_s=5.0)}, 10.4, 0.0)
    # the bench reaped more than the machine was busy (a child's earlier CPU): nothing is other
    assert noise.between(before, after, ours={1}).other_cpu_ms == 0.0
    exited = noise.between(before, noise.Snapshot({1: _cpu("bench", 5, 1.2)}, 10.4, 0.0), {1})
    assert exited.top == [("(exited)", pytest.approx(200.0))]


def test_a_pid_is_the_same_process_while_its_start_time_is() -> None:
    # a kernel worker's name changes with the queue it serves: only its new CPU counts
    before = noise.Snapshot(
        {5: _cpu("kworker/u8:3-writeback", 40, 2.0), 6: _cpu("sh", 41, 3.0)}, 0.0, 0.0
    )
    after = noise.Snapshot(
        {5: _cpu("kworker/u8:3-ext4", 40, 2.01), 6: _cpu("beam.smp", 90, 0.2)}, 0.21, 0.0
    )
    found = noise.between(before, after, ours=set())
    # pid 6 was reused by a process started later: all of its CPU counts
    assert found.top == [
        ("beam.smp", pytest.approx(200.0)),
        ("kworker/u8:3-ext4", pytest.approx(10.0)),
    ]


def test_a_busy_process_outside_the_bench_is_named_with_its_cpu() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "ready"  # its start-up is spent before `before`
        before = noise.snapshot()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "burnt"
        after = noise.snapshot()
        outside = noise.between(before, after, ours={os.getpid()})
        inside = noise.between(before, after, ours={os.getpid(), child.pid})
    finally:
        child.kill()
        child.wait()
    burnt = dict(outside.top)
    name = Path(sys.executable).name[:15]  # the kernel keeps 15 characters of a name
    # it burnt 0.5 s of CPU between the snapshots, whatever else the machine was doing
    assert burnt.get(name, 0) >= 450
    assert outside.other_cpu_ms - inside.other_cpu_ms >= 450


def test_a_parent_reaping_a_busy_child_during_a_point_is_not_charged_its_lifetime() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", REAP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdin is not None and parent.stdout is not None
        assert parent.stdout.readline().strip() == "ready"  # the child has burnt its 0.5 s
        before = noise.snapshot()
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "reaped"
        after = noise.snapshot()
    finally:
        parent.kill()
        parent.wait()
    reaped = after.cpu[parent.pid].reaped_s - before.cpu[parent.pid].reaped_s
    assert reaped >= 0.45  # the parent's own counters took the child's lifetime at once
    everyone_else = set(after.cpu) - {parent.pid}
    found = noise.between(before, after, ours=everyone_else)
    assert found.other_cpu_ms < 250  # not the 500 ms the child spent before the point


def test_split_is_each_processs_own_cpu_during_the_point_busiest_first() -> None:
    before = noise.Snapshot(
        {1: _cpu("arbiter", 5, 1.0), 2: _cpu("w1", 6, 5.0), 3: _cpu("w2", 6, 2.0)}, 0.0, 0.0
    )
    after = noise.Snapshot(
        {
            1: _cpu("arbiter", 5, 1.01, reaped_s=3.0),  # a reaped child is not its work
            2: _cpu("w1", 6, 5.2),
            3: _cpu("w2", 6, 6.48),
            4: _cpu("w3", 9, 1.0),  # started meanwhile: no figure for the whole point
        },
        0.0,
        0.0,
    )
    assert noise.split(before, after, [1, 2, 3, 4, 99]) == [4480, 200, 10]


def test_since_splits_the_cpu_of_a_server_and_its_descendants() -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdin is not None and server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        before = noise.snapshot()
        server.stdin.write("go\n")
        server.stdin.flush()
        assert server.stdout.readline().strip() == "burnt"
        fields = noise.since(before, server.pid)
    finally:
        server.kill()
        server.wait()
    busiest, parent = fields["server_cpu_ms"]  # the burning child, then the waiting parent
    assert busiest >= 450 and parent < 100
