"""Segment files: append, roll, fsync, and what the loader reads back from them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mlpipe.predlog import DECODER, ENCODER, PredictionRecord, SegmentWriter
from mlpipe.predlog import _segments as segments
from mlpipe.warehouse import SkippedLine, parse_segment

MakeRecord = Callable[[int], PredictionRecord]


def _rows(directory: Path) -> list[PredictionRecord]:
    out = []
    for f in sorted(directory.iterdir()):
        out += [DECODER.decode(line) for line in f.read_bytes().splitlines() if line]
    return out


def test_append_is_in_the_file_before_close(tmp_path: Path, make_record: MakeRecord) -> None:
    w = SegmentWriter(tmp_path, "w1", fsync_interval_s=10)
    w.append([make_record(1), make_record(2)])
    (open_seg,) = tmp_path.iterdir()
    assert open_seg.name.startswith("w1-") and open_seg.name.endswith(".jsonl.open")
    assert [r.request_id for r in _rows(tmp_path)] == ["r1", "r2"]
    w.close()
    (closed,) = tmp_path.iterdir()
    assert closed.name.endswith(".jsonl") and not closed.name.endswith(".open")
    assert [r.request_id for r in _rows(tmp_path)] == ["r1", "r2"]


def test_rolls_by_size(tmp_path: Path, make_record: MakeRecord) -> None:
    w = SegmentWriter(tmp_path, "w1", max_bytes=1024, fsync_interval_s=10)
    for i in range(40):
        w.append([make_record(i)])
    w.close()
    files = list(tmp_path.iterdir())
    assert len(files) > 2 and all(f.stat().st_size <= 1024 for f in files)
    assert sorted(r.request_id for r in _rows(tmp_path)) == sorted(f"r{i}" for i in range(40))


def test_rolls_by_age_even_when_idle(tmp_path: Path, make_record: MakeRecord) -> None:
    w = SegmentWriter(tmp_path, "w1", max_age_s=0.2, fsync_interval_s=0.05)
    w.append([make_record(1)])
    deadline = time.monotonic() + 3
    while w.current_path is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.current_path is None
    assert [f.name.endswith(".jsonl") for f in tmp_path.iterdir()] == [True]
    w.append([make_record(2)])
    w.close()
    assert len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize(("interval", "per_append"), [(0, True), (10, False)])
def test_fsync_setting(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    interval: float,
    per_append: bool,
    make_record: MakeRecord,
) -> None:
    calls: list[int] = []
    real = segments.os.fsync
    monkeypatch.setattr(segments.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    w = SegmentWriter(tmp_path, "w1", fsync_interval_s=interval)
    for i in range(5):
        w.append([make_record(i)])
    assert (len(calls) == 5) is per_append
    w.flush()
    w.close()


def test_background_fsync_on_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_record: MakeRecord
) -> None:
    calls: list[int] = []
    real = segments.os.fsync
    monkeypatch.setattr(segments.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    w = SegmentWriter(tmp_path, "w1", fsync_interval_s=0.05)
    w.append([make_record(1)])
    # Waited for, not assumed done after a fixed sleep: on a busy machine the tick is late.
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls, "no background fsync within 10 s"
    w.close()


def test_appends_go_on_while_the_background_fsync_waits_on_the_disk(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_record: MakeRecord,
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
    w.append([make_record(1)])
    assert started.wait(5)  # the background thread is inside fsync now

    appended = threading.Thread(target=w.append, args=([make_record(2)],))
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


def test_closed_writer_refuses(tmp_path: Path, make_record: MakeRecord) -> None:
    w = SegmentWriter(tmp_path, "w1")
    w.close()
    with pytest.raises(RuntimeError):
        w.append([make_record(1)])


# -- reading a segment back (the warehouse loader's parse_segment) --


def test_parse_segment_reads_back_every_row_a_writer_appended(
    tmp_path: Path, make_record: MakeRecord
) -> None:
    w = SegmentWriter(tmp_path, "w1", fsync_interval_s=0)
    rows = [make_record(i) for i in range(3)]
    w.append(rows)
    w.close()
    (segment,) = tmp_path.iterdir()
    parsed = parse_segment(segment.read_bytes(), segment.name)
    assert parsed.records == rows
    assert parsed.skipped == []


def test_parse_segment_skips_a_torn_last_line_and_names_it(make_record: MakeRecord) -> None:
    whole = ENCODER.encode_lines([make_record(1), make_record(2)])
    torn = ENCODER.encode(make_record(3))[:20]  # a worker killed mid-write: no newline
    parsed = parse_segment(whole + torn, "w1-1.jsonl.open")
    assert [r.request_id for r in parsed.records] == ["r1", "r2"]
    assert parsed.skipped == [
        SkippedLine("w1-1.jsonl.open", 3, "half-written last line (no newline)", "half-written")
    ]


def test_parse_segment_keeps_a_whole_last_record_without_its_newline(
    make_record: MakeRecord,
) -> None:
    data = ENCODER.encode_lines([make_record(1)]) + ENCODER.encode(make_record(2))
    parsed = parse_segment(data, "w1-1.jsonl.open")
    assert [r.request_id for r in parsed.records] == ["r1", "r2"]
    assert parsed.skipped == []


def test_parse_segment_skips_a_garbage_line_and_loads_the_rest(make_record: MakeRecord) -> None:
    data = (
        ENCODER.encode_lines([make_record(1)])
        + b"not a record\n\n"  # a garbage line, then a blank one (ignored, but counted)
        + ENCODER.encode_lines([make_record(2)])
    )
    parsed = parse_segment(data, "w1-1.jsonl")
    assert [r.request_id for r in parsed.records] == ["r1", "r2"]
    (skipped,) = parsed.skipped
    assert (skipped.segment, skipped.line) == ("w1-1.jsonl", 2)
    assert skipped.reason.startswith("not a prediction record: ")


def test_parse_segment_of_an_empty_file_is_empty() -> None:
    parsed = parse_segment(b"", "w1-1.jsonl.open")
    assert parsed.records == []
    assert parsed.skipped == []
