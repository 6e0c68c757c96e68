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


def test_snapshot_reads_user_system_and_reaped_children_and_the_steal(tmp_path: Path) -> None:
    tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
    proc = _fake_proc(
        tmp_path / "proc", {7: ("beam.smp", (10, 5, 3, 2)), 8: ("odd) name (x", (1, 0, 0, 0))}, 40
    )
    snap = noise.snapshot(proc)
    assert set(snap.cpu) == {7, 8}
    assert snap.cpu[7][:2] == ("beam.smp", 100)  # name and start time
    assert snap.cpu[7][2] * 1000 == pytest.approx(20 * tick_ms)
    assert snap.cpu[8][0] == "odd) name (x"  # the name is what lies between the outer parentheses
    assert snap.steal_s * 1000 == pytest.approx(40 * tick_ms)


def test_between_counts_others_by_name_and_leaves_the_bench_out() -> None:
    before = noise.Snapshot(
        {1: ("bench", 5, 1.0), 2: ("server", 6, 5.0), 3: ("beam.smp", 7, 2.0)}, 10.0
    )
    after = noise.Snapshot(
        {
            1: ("bench", 5, 9.0),
            2: ("server", 6, 15.0),
            3: ("beam.smp", 7, 2.25),
            4: ("kdamond.0", 8, 0.05),  # started meanwhile: counts whole
        },
        10.1,
    )
    found = noise.between(before, after, ours={1, 2})
    assert found.other_cpu_ms == pytest.approx(300.0)
    assert found.steal_ms == pytest.approx(100.0)
    assert [name for name, _ in found.top] == ["beam.smp", "kdamond.0"]
    assert found.fields() == {
        "other_cpu_ms": 300,
        "steal_ms": 100,
        "other_top": "beam.smp 250, kdamond.0 50",
    }


def test_a_pid_is_the_same_process_while_its_start_time_is() -> None:
    # a kernel worker's name changes with the queue it serves: only its new CPU counts
    before = noise.Snapshot({5: ("kworker/u8:3-writeback", 40, 2.0), 6: ("sh", 41, 3.0)}, 0.0)
    after = noise.Snapshot({5: ("kworker/u8:3-ext4", 40, 2.01), 6: ("beam.smp", 90, 0.2)}, 0.0)
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
