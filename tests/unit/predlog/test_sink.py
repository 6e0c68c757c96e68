"""Choosing the sink: segment files by default, none for benchmarks (Kafka: test_kafka.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mlpipe.config import load_settings
from mlpipe.predlog import PredictionRecord, open_sink
from mlpipe.predlog._sink import NullSink

MakeRecord = Callable[[int], PredictionRecord]


def test_open_sink_uses_settings(tmp_path: Path) -> None:
    s = load_settings(home=tmp_path, predlog={"fsync_interval_s": 0, "segment_max_bytes": 2048})
    w = open_sink(s, "w9")
    assert (w.directory, w.fsync_interval_s, w.max_bytes) == (s.predlog_path, 0, 2048)
    w.close()


def test_sink_none_logs_nothing_and_says_so(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    make_record: MakeRecord,
) -> None:
    settings = load_settings(home=tmp_path, predlog={"sink": "none"})
    sink = open_sink(settings, "w1")
    assert isinstance(sink, NullSink)
    assert "predictions are NOT logged" in caplog.text
    sink.append([make_record(i) for i in range(3)])
    sink.close()
    assert list(tmp_path.rglob("*.jsonl*")) == []
