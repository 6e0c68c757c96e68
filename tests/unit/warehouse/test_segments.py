"""Reading prediction-log segments: whole records kept, every other line named and skipped."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from mlpipe.predlog import ENCODER
from mlpipe.warehouse._segments import (
    CHUNK_BYTES,
    NOT_A_RECORD,
    TORN,
    NotWhole,
    chunks,
    parse_segment,
    read_chunk,
    record_lines,
    segment_files,
)
from tests.unit.warehouse.logged import records

NOW = datetime(2026, 12, 6, 12, 0, 0)


def _lines(n: int, prefix: str = "r") -> bytes:
    return b"".join(ENCODER.encode(r) + b"\n" for r in records(n, prefix))


def test_whole_records_are_kept_and_a_torn_tail_is_named() -> None:
    torn = ENCODER.encode(records(1, "x")[0])[:30]
    parsed = parse_segment(_lines(3) + torn, "seg-1.jsonl")
    assert [r.request_id for r in parsed.records] == ["r0", "r1", "r2"]
    [skipped] = parsed.skipped
    assert (skipped.segment, skipped.line, skipped.kind) == ("seg-1.jsonl", 4, TORN)
    assert skipped.reason == "half-written last line (no newline)"
    assert parsed.lines[4] == torn  # its bytes, for the quarantine


def test_a_line_that_is_not_a_record_is_skipped_and_the_rest_kept() -> None:
    data = _lines(1, "a") + b"{not json}\n\n" + _lines(1, "b")
    parsed = parse_segment(data, "s.jsonl")
    assert [r.request_id for r in parsed.records] == ["a0", "b0"]
    [skipped] = parsed.skipped
    assert (skipped.line, skipped.kind) == (2, NOT_A_RECORD)
    assert skipped.reason.startswith("not a prediction record: ")


def test_segment_files_are_closed_and_open_ones_in_path_order(tmp_path: Path) -> None:
    for name in ("w2/b.jsonl", "w1/a.jsonl.open", "w1/notes.txt", "w1/c.jsonl"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    found = [p.relative_to(tmp_path).as_posix() for p in segment_files(tmp_path)]
    assert found == ["w1/a.jsonl.open", "w1/c.jsonl", "w2/b.jsonl"]
    assert segment_files(tmp_path / "missing") == []


def test_a_chunk_closes_once_it_holds_chunk_bytes() -> None:
    half, big = CHUNK_BYTES // 2, CHUNK_BYTES * 2
    segments = [(f"s{i}", Path(f"s{i}"), size) for i, size in enumerate([half] * 4 + [big, 1])]
    grouped = [[rel for rel, _, _ in chunk] for chunk in chunks(segments)]
    assert grouped == [["s0", "s1"], ["s2", "s3"], ["s4"], ["s5"]]


def test_record_lines_counts_lines_that_start_a_record(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_lines(5))
    assert record_lines(path) == 5
    path.write_bytes(_lines(2) + b"oops\n")
    with pytest.raises(NotWhole):
        record_lines(path)
    path.write_bytes(b"")
    assert record_lines(path) == 0


def test_read_chunk_reads_good_segments_whole_and_parses_one_with_a_bad_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "good.jsonl").write_bytes(_lines(3, "g"))
    bad = _lines(1, "b") + b'{"request_id": 5}\n'
    (tmp_path / "bad.jsonl").write_bytes(bad)
    chunk = [(p.name, p, p.stat().st_size) for p in sorted(tmp_path.iterdir())]
    batch = read_chunk(chunk, tmp_path, NOW)
    ids = sorted(i for t in batch.tables for i in t.column("request_id").to_pylist())
    assert ids == ["b0", "g0", "g1", "g2"]
    assert [(s.segment, s.line) for s in batch.skipped] == [("bad.jsonl", 2)]
    assert sorted((rel, rows, skipped) for rel, _, rows, skipped in batch.finished) == [
        ("bad.jsonl", 1, 1),
        ("good.jsonl", 3, 0),
    ]
    assert [line for _, line in batch.quarantine] == [b'{"request_id": 5}']
