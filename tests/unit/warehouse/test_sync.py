"""Loading the prediction log: idempotent, reused ids counted, bad lines skipped and kept."""

from __future__ import annotations

import time
from datetime import datetime

import sqlalchemy as sa

from mlpipe import warehouse
from mlpipe.config import Settings
from mlpipe.predlog import ENCODER
from mlpipe.warehouse import _schema
from tests.unit.warehouse.logged import records, write_segment
from tests.unit.warehouse.test_mirror import Change


def test_a_sync_again_or_a_replayed_segment_adds_nothing(settings: Settings) -> None:
    logged = records(20)
    write_segment(settings, "w1/seg-1.jsonl", logged)
    first = warehouse.sync(settings)
    assert (first.segments_read, first.rows_read, first.rows_loaded, first.rows_total) == (
        1,
        20,
        20,
        20,
    )
    again = warehouse.sync(settings)
    assert (again.segments_read, again.segments_unchanged, again.rows_total) == (0, 1, 20)
    write_segment(settings, "w2/replay.jsonl", logged)  # the same rows elsewhere
    write_segment(settings, "w2/shadow.jsonl", records(1, arm="shadow"))  # another arm's
    third = warehouse.sync(settings)
    assert (third.rows_read, third.rows_loaded, third.duplicates) == (21, 1, 20)
    assert (third.reused_ids, third.rows_total) == (0, 21)


def test_a_request_id_reused_at_another_time_keeps_the_first_row(settings: Settings) -> None:
    start = time.time() - 600
    write_segment(settings, "a.jsonl", records(3, start=start))
    warehouse.sync(settings)
    write_segment(settings, "b.jsonl", records(3, start=start + 60))  # same ids, a minute on
    result = warehouse.sync(settings)
    assert (result.rows_loaded, result.reused_ids, result.rows_total) == (0, 3, 3)
    p = _schema.predictions
    with warehouse.read(settings) as conn:
        segments = set(conn.scalars(sa.select(p.c.segment)))
    assert segments == {"a.jsonl"}


def test_bad_lines_are_skipped_and_those_of_closed_segments_quarantined(
    settings: Settings,
) -> None:
    torn = ENCODER.encode(records(1, "torn")[0])[:40]
    write_segment(settings, "closed.jsonl", records(2, "c"), tail=b"{not json}\n")
    write_segment(settings, "open.jsonl.open", records(2, "o"), tail=torn)
    result = warehouse.sync(settings)
    assert result.rows_total == 4
    assert sorted((s.segment, s.line, s.kind) for s in result.skipped) == [
        ("closed.jsonl", 3, "not a record"),
        ("open.jsonl.open", 3, "half-written"),
    ]
    assert result.skipped_counts == {"not a record": 1, "half-written": 1}
    assert result.quarantined == 1  # an open segment's lines wait until it is closed
    q = _schema.quarantine
    with warehouse.read(settings) as conn:
        kept = conn.execute(sa.select(q.c.segment, q.c.line, q.c.record)).all()
    assert [tuple(r) for r in kept] == [("closed.jsonl", 3, "{not json}")]


def test_the_history_handed_in_is_mirrored_once(settings: Settings) -> None:
    at = datetime(2026, 12, 6, 12, 0, 0)
    history = [Change("fraud", 1, at), Change("fraud", 2, at)]
    assert warehouse.sync(settings, history=history).deployments_loaded == 2
    assert warehouse.sync(settings, history=history).deployments_loaded == 0
    assert warehouse.sync(settings).deployments_loaded == 0
    assert warehouse.mirrored_generations(settings) == {"fraud": 2}
