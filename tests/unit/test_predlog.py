"""Prediction log: append, roll, fsync setting, PII hashing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import mlpipe.predlog.segments as segments
from mlpipe.config import load_settings
from mlpipe.predlog import DECODER, PiiHasher, PredictionRecord, SegmentWriter, open_sink


def _record(i: int) -> PredictionRecord:
    return PredictionRecord(
        request_id=f"r{i}",
        ts=time.time(),
        tenant="default",
        model="fraud",
        version="1",
        arm="champion",
        generation=1,
        entity_key=f"customer_id={i}",
        entity={"customer_id": i},
        features={"amount": float(i)},
        score=0.5,
        label=1,
        latency_ms=1.0,
    )


def _rows(directory: Path) -> list[PredictionRecord]:
    out = []
    for f in sorted(directory.iterdir()):
        out += [DECODER.decode(line) for line in f.read_bytes().splitlines() if line]
    return out


def test_append_is_in_the_file_before_close(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, "w1", fsync_interval_s=10)
    w.append([_record(1), _record(2)])
    (open_seg,) = tmp_path.iterdir()
    assert open_seg.name.startswith("w1-") and open_seg.name.endswith(".jsonl.open")
    assert [r.request_id for r in _rows(tmp_path)] == ["r1", "r2"]
    w.close()
    (closed,) = tmp_path.iterdir()
    assert closed.name.endswith(".jsonl") and not closed.name.endswith(".open")
    assert [r.request_id for r in _rows(tmp_path)] == ["r1", "r2"]


def test_rolls_by_size(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, "w1", max_bytes=1024, fsync_interval_s=10)
    for i in range(40):
        w.append([_record(i)])
    w.close()
    files = list(tmp_path.iterdir())
    assert len(files) > 2 and all(f.stat().st_size <= 1024 for f in files)
    assert sorted(r.request_id for r in _rows(tmp_path)) == sorted(f"r{i}" for i in range(40))


def test_rolls_by_age_even_when_idle(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, "w1", max_age_s=0.2, fsync_interval_s=0.05)
    w.append([_record(1)])
    deadline = time.monotonic() + 3
    while w.current_path is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.current_path is None
    assert [f.name.endswith(".jsonl") for f in tmp_path.iterdir()] == [True]
    w.append([_record(2)])
    w.close()
    assert len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize(("interval", "per_append"), [(0, True), (10, False)])
def test_fsync_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interval: float, per_append: bool
) -> None:
    calls: list[int] = []
    real = segments.os.fsync
    monkeypatch.setattr(segments.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    w = SegmentWriter(tmp_path, "w1", fsync_interval_s=interval)
    for i in range(5):
        w.append([_record(i)])
    assert (len(calls) == 5) is per_append
    w.flush()
    w.close()


def test_background_fsync_on_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = segments.os.fsync
    monkeypatch.setattr(segments.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    w = SegmentWriter(tmp_path, "w1", fsync_interval_s=0.05)
    w.append([_record(1)])
    time.sleep(0.3)
    assert calls
    w.close()


def test_appends_go_on_while_the_background_fsync_waits_on_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = threading.Event()  # set: the disk answers the fsync
    started = threading.Event()
    synced: list[int] = []
    real = segments.os.fsync

    def slow_fsync(fd: int) -> None:
        started.set()
        assert disk.wait(10)
        real(fd)
        synced.append(fd)

    monkeypatch.setattr(segments.os, "fsync", slow_fsync)
    w = SegmentWriter(tmp_path, "w1", fsync_interval_s=0.05)
    w.append([_record(1)])
    assert started.wait(5)  # the background thread is inside fsync now

    appended = threading.Thread(target=w.append, args=([_record(2)],))
    appended.start()
    appended.join(timeout=2)
    assert not appended.is_alive(), "append waited for the background fsync"
    lines = w.current_path.read_bytes().splitlines()  # type: ignore[union-attr]
    assert [DECODER.decode(line).request_id for line in lines] == ["r1", "r2"]

    disk.set()
    deadline = time.monotonic() + 5
    while len(synced) < 2 and time.monotonic() < deadline:  # r2 was left dirty: synced again
        time.sleep(0.01)
    assert len(synced) >= 2
    w.close()
    assert [p.name.endswith(".jsonl") for p in tmp_path.iterdir()] == [True]


def test_closed_writer_refuses(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, "w1")
    w.close()
    with pytest.raises(RuntimeError):
        w.append([_record(1)])


def test_open_sink_uses_settings(tmp_path: Path) -> None:
    s = load_settings(home=tmp_path, predlog={"fsync_interval_s": 0, "segment_max_bytes": 2048})
    w = open_sink(s, "w9")
    assert (w.directory, w.fsync_interval_s, w.max_bytes) == (s.predlog_path, 0, 2048)
    w.close()


def test_pii_hashing() -> None:
    h = PiiHasher(["email"], "k1")
    red = h.redact({"email": "a@b.c", "amount": 3.0})
    assert red["amount"] == 3.0 and red["email"] != "a@b.c" and len(red["email"]) == 32
    assert red == h.redact({"email": "a@b.c", "amount": 3.0})
    assert PiiHasher(["email"], "k2").redact({"email": "a@b.c"})["email"] != red["email"]
    assert h.redact_key({"email": "a@b.c"}, "email=a@b.c") == f"email={red['email']}"
    assert not PiiHasher([], "k")
    assert PiiHasher([], "k").redact_key({"id": 1}, "id=1") == "id=1"


def test_sink_none_logs_nothing_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mlpipe.predlog.segments import NullSink

    settings = load_settings(home=tmp_path, predlog={"sink": "none"})
    sink = open_sink(settings, "w1")
    assert isinstance(sink, NullSink)
    assert "predictions are NOT logged" in caplog.text
    sink.append([_record(i) for i in range(3)])
    sink.close()
    assert list(tmp_path.rglob("*.jsonl*")) == []
