"""What reaches the prediction log when things go wrong: a full disk, a request that timed out.

The disk is made "full" for real with ``RLIMIT_FSIZE``: the kernel refuses a
write past the limit with EFBIG, the same failed ``os.write`` a full disk gives
(ENOSPC), on the real :class:`SegmentWriter`.
"""

from __future__ import annotations

import resource
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mlpipe.config import load_settings
from mlpipe.predlog import DECODER, SegmentWriter
from mlpipe.serving import PredictRequest
from tests.unit.serving.test_pipeline import ListSink, fake_runtime

LIMIT = 16 * 1024


@contextmanager
def disk_full_past(limit: int) -> Iterator[None]:
    """Files of this process cannot grow past ``limit`` bytes while inside."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def _runtime(tmp_path: Path, sink: Any, **overrides: Any) -> Any:
    return fake_runtime(load_settings(home=tmp_path, **overrides), sink).rt


def _req(i: int, received_ns: int | None = None) -> PredictRequest:
    return PredictRequest(
        model="fraud",
        entity={"customer_id": i},
        features={"amount": float(i)},
        request_id=f"r{i}",
        received_ns=time.time_ns() if received_ns is None else received_ns,
    )


def _fill(rt: Any, start: int) -> tuple[int, list[dict[str, Any]]]:
    """Send one-request batches until one is not answered 200; (index, that batch's answers)."""
    for i in range(start, start + 10_000):
        out = rt.pipeline.predict_batch([_req(i), _req(i + 100_000)])
        if "error" in out[0]:
            return i, out
    raise AssertionError("the log never filled up")


def _lines(directory: Path) -> list[bytes]:
    files = sorted(directory.glob("*.jsonl*"))
    return [line for f in files for line in f.read_bytes().splitlines()]


def test_a_write_that_fails_midway_leaves_only_whole_lines(tmp_path: Path) -> None:
    sink = ListSink()
    _runtime(tmp_path / "home", sink).pipeline.predict_batch([_req(1)])
    writer = SegmentWriter(tmp_path / "log", "w1", fsync_interval_s=0)
    with disk_full_past(LIMIT), pytest.raises(OSError):
        for _ in range(10_000):
            writer.append(sink.rows * 7)  # ~3 KB a write: the one that fails is cut short
    data = writer.current_path.read_bytes()  # type: ignore[union-attr]
    assert data.endswith(b"\n") and LIMIT - 4096 < len(data) <= LIMIT
    assert all(DECODER.decode(line) for line in data.splitlines())  # every line a whole record
    writer.append(sink.rows)  # room again: appends go on after the last whole line
    writer.close()
    assert len(_lines(tmp_path / "log")) == len(data.splitlines()) + 1


def test_fail_closed_refuses_with_503_logs_it_and_counts_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = SegmentWriter(tmp_path / "log", "w1", fsync_interval_s=0)
    rt = _runtime(tmp_path / "home", writer)  # predlog.on_write_error defaults to fail_closed
    with disk_full_past(LIMIT):
        failed_at, out = _fill(rt, 0)
        again = rt.pipeline.predict_batch([_req(failed_at + 1)])
    assert [o["status"] for o in out] == [503, 503]
    assert out[0]["error"] == "prediction log unavailable (OSError); not answered"
    assert again[0]["status"] == 503
    logged = {DECODER.decode(line).request_id for line in _lines(tmp_path / "log")}
    assert f"r{failed_at}" not in logged and f"r{failed_at - 1}" in logged
    assert "predlog.on_write_error=fail_closed: refusing requests (503)" in caplog.text
    assert caplog.text.count("prediction log write failed") == 1  # one line per 10 s, not per batch
    assert rt.metrics.predlog_errors.labels("fail_closed")._value.get() == 3
    # Space again (the limit lifted): answered and logged as before.
    assert "score" in rt.pipeline.predict_batch([_req(failed_at + 2)])[0]
    writer.close()


def test_fail_open_answers_and_counts_the_lost_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = SegmentWriter(tmp_path / "log", "w1", fsync_interval_s=0)
    rt = _runtime(tmp_path / "home", writer, predlog={"on_write_error": "fail_open"})
    with disk_full_past(LIMIT):
        failed_at = _fill_open(rt)
    logged = {DECODER.decode(line).request_id for line in _lines(tmp_path / "log")}
    assert f"r{failed_at}" not in logged
    assert "predlog.on_write_error=fail_open: answering" in caplog.text
    assert rt.metrics.predlog_errors.labels("fail_open")._value.get() == 2
    writer.close()


def _fill_open(rt: Any) -> int:
    """Under fail_open every request is answered; the first one the log lost, by its metric."""
    counter = rt.metrics.predlog_errors.labels("fail_open")
    for i in range(10_000):
        out = rt.pipeline.predict_batch([_req(i), _req(i + 100_000)])
        assert all("score" in o for o in out), out
        if counter._value.get():
            return i
    raise AssertionError("the log never filled up")


def test_a_request_past_its_deadline_gets_504_and_a_timeout_row(tmp_path: Path) -> None:
    sink = ListSink()
    rt = _runtime(tmp_path, sink, serving={"request_timeout_s": 0.5})
    stale = time.time_ns() - 2 * 10**9  # queued for 2 s
    out = rt.pipeline.predict_batch([_req(1, received_ns=stale), _req(2)])
    assert out[0] == {
        "error": "request timed out: not answered within 0.5 s",
        "status": 504,
        "request_id": "r1",
    }
    assert out[1]["score"] >= 0 and "error" not in out[1]
    rows = {r.request_id: r for r in sink.rows}
    assert (rows["r1"].status, rows["r2"].status) == ("timeout", "ok")
    assert rows["r1"].latency_ms >= 2000
