"""Segments released once loaded: the log directory stays bounded, nothing unloaded is lost."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from mlpipe import warehouse
from mlpipe.config import Settings, load_settings
from mlpipe.predlog import ENCODER, PredictionRecord, SegmentWriter
from mlpipe.warehouse import _engine, _schema

pytestmark = pytest.mark.integration


def _record(i: int, tenant: str = "t") -> PredictionRecord:
    return PredictionRecord(
        request_id=f"r{i}",
        ts=time.time(),
        tenant=tenant,
        model="fraud",
        version="1",
        arm="champion",
        generation=1,
        entity_key=f"customer_id={i}",
        entity={"customer_id": i},
        features={"amount": float(i)},
        score=0.5,
        label=i % 2,
        latency_ms=1.0,
    )


def _write(path: Path, records: list[PredictionRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))


def _count(settings) -> int:
    with warehouse.read(settings) as conn:
        return conn.execute(
            sa.select(sa.func.count()).select_from(_schema.predictions)
        ).scalar_one()


def test_writer_and_sync_loop_keep_the_directory_bounded_and_every_row(tmp_path):
    settings = load_settings(home=tmp_path, predlog={"keep_loaded_hours": 0})
    writer = SegmentWriter(settings.predlog_path, "w1", max_bytes=4096, fsync_interval_s=0)
    acknowledged = 0
    stop = threading.Event()

    def write() -> None:
        nonlocal acknowledged
        i = 0
        while not stop.is_set():
            writer.append([_record(i + k) for k in range(5)])
            acknowledged += 5  # append returned: the rows are acknowledged
            i += 5
            time.sleep(0.01)

    thread = threading.Thread(target=write)
    thread.start()
    most = 0
    released = 0
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            released += warehouse.sync(settings).segments_released
            most = max(most, len(list(settings.predlog_path.iterdir())))
    finally:
        stop.set()
        thread.join()
        writer.close()
    released += warehouse.sync(settings).segments_released
    assert acknowledged > 300
    assert released > 10  # many segments rolled, loaded and let go
    assert _count(settings) == acknowledged  # every acknowledged row reached the warehouse
    assert list(settings.predlog_path.iterdir()) == []
    # bounded: at most half of what was written was ever on disk at once (a sync that runs
    # slow on a busy machine lets a few more pile up between two syncs, never all of them)
    assert most <= released // 2, (most, released)


def test_an_unloaded_segment_is_never_released(tmp_path):
    settings = load_settings(home=tmp_path, predlog={"keep_loaded_hours": 0})
    root = settings.predlog_path
    loaded, grown = root / "w1-1.jsonl", root / "w1-2.jsonl"
    _write(loaded, [_record(1)])
    _write(grown, [_record(2)])
    with warehouse.write(settings) as conn:  # a segment recorded at another size: loaded in part
        conn.execute(
            _schema.segments.insert().values(
                path="w1-2.jsonl", size=1, rows=1, skipped_lines=0, loaded_at=_epoch()
            )
        )
    open_ = root / "w2-3.jsonl.open"
    _write(open_, [_record(3)])
    result = warehouse.sync(settings)
    # w1-1 loaded whole and released; w1-2 read again at its new size, so loaded whole too
    assert result.segments_released == 2
    assert sorted(p.name for p in root.iterdir()) == ["w2-3.jsonl.open"]  # still open: kept
    assert _count(settings) == 3
    with open_.open("ab") as f:  # the worker goes on writing
        f.write(ENCODER.encode(_record(4)) + b"\n")
    warehouse.sync(settings)
    assert open_.exists() and _count(settings) == 4


def test_a_segment_changed_since_its_load_is_kept(tmp_path):
    from datetime import datetime

    from mlpipe.warehouse._release import release_loaded

    settings = load_settings(home=tmp_path, predlog={"keep_loaded_hours": 1})
    root = settings.predlog_path
    _write(root / "w1-1.jsonl", [_record(1)])
    _write(root / "w1-2.jsonl", [_record(2)])
    _write(root / "w1-3.jsonl", [_record(3)])
    old = _epoch()
    with warehouse.write(settings) as conn:
        for name, size, at in [
            ("w1-1.jsonl", (root / "w1-1.jsonl").stat().st_size, old),  # loaded, long ago
            ("w1-2.jsonl", 3, old),  # loaded at another size: not whole
            ("w1-3.jsonl", (root / "w1-3.jsonl").stat().st_size, datetime.now()),  # too recent
        ]:
            conn.execute(
                _schema.segments.insert().values(
                    path=name, size=size, rows=1, skipped_lines=0, loaded_at=at
                )
            )
    with _engine.writer(settings) as conn:
        done = release_loaded(conn, settings, datetime.now())
    assert done.segments == 1
    assert sorted(p.name for p in root.iterdir()) == ["w1-2.jsonl", "w1-3.jsonl"]


def test_archive_dir_keeps_the_released_segments(tmp_path):
    settings = load_settings(
        home=tmp_path, predlog={"keep_loaded_hours": 0, "archive_dir": "archive"}
    )
    _write(settings.predlog_path / "w1" / "w1-1.jsonl", [_record(1)])
    assert warehouse.sync(settings).segments_released == 1
    assert (tmp_path / "archive" / "w1" / "w1-1.jsonl").is_file()
    assert not (settings.predlog_path / "w1" / "w1-1.jsonl").exists()
    assert warehouse.sync(settings).rows_loaded == 0  # an archived segment is not loaded again


def test_default_keeps_loaded_segments_a_day(tmp_path):
    settings = load_settings(home=tmp_path)
    _write(settings.predlog_path / "w1-1.jsonl", [_record(1)])
    assert warehouse.sync(settings).segments_released == 0
    assert (settings.predlog_path / "w1-1.jsonl").exists()


def _epoch():
    from datetime import datetime

    return datetime(2000, 1, 1)


def test_doctor_shows_the_log_disk_use_and_warns_on_a_full_disk(tmp_path):
    from mlpipe import stack

    settings = load_settings(home=tmp_path, feature_store=False)
    stack.init(settings)
    _write(settings.predlog_path / "w1-1.jsonl", [_record(1)])
    _write(settings.predlog_path / f"w1-{time.time_ns() - 90 * 10**9}.jsonl.open", [_record(2)])
    warehouse.sync(settings)  # loads the first whole; the open one only in part

    def with_floor(percent: float) -> Settings:
        predlog = settings.predlog.model_copy(update={"min_free_percent": percent})
        return settings.model_copy(update={"predlog": predlog})

    # at 0 % no disk is too full, at 100 % every one is: the host's own free space decides neither
    check = next(c for c in stack.doctor(with_floor(0)) if c.store == "prediction log")
    assert check.ok, check.detail
    assert "2 segment(s)" in check.detail and "1 not loaded, oldest 9" in check.detail

    check = next(c for c in stack.doctor(with_floor(100)) if c.store == "prediction log")
    assert not check.ok and "under predlog.min_free_percent (100%)" in check.detail
