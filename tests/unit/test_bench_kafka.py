"""bench/kafka.py: the broker's CPU per serving round, read from bench.ab's noise column."""

from __future__ import annotations

from bench.kafka import _java_ms


def test_the_broker_cpu_is_the_java_entry_of_the_noise_column() -> None:
    assert _java_ms({"other_top": "bash 150, java 910, python 80"}) == 910
    assert _java_ms({"other_top": "mypy 1600, python 60"}) == 0
    assert _java_ms({}) == 0
