"""bench/kafka.py: the broker's CPU per serving round, read from bench.ab's noise column."""

from __future__ import annotations

import os

from bench.kafka import _java_ms, process_cpu_s


def test_the_broker_cpu_is_the_java_entry_of_the_noise_column() -> None:
    assert _java_ms({"other_top": "bash 150, java 910, python 80"}) == 910
    assert _java_ms({"other_top": "mypy 1600, python 60"}) == 0
    assert _java_ms({}) == 0


def test_a_process_cpu_is_read_from_proc_and_is_zero_once_gone() -> None:
    assert process_cpu_s(os.getpid()) > 0
    assert process_cpu_s(2**22 + 1) == 0.0  # above Linux's pid_max: never a process
