"""The group committer writes the batches queued meanwhile as one, each answered for itself."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import pytest

from mlpipe.errors import StoreUnavailable
from mlpipe.predlog import GroupCommitter, PredictionRecord

Make = Callable[[int], PredictionRecord]
Batches = Sequence[Sequence[PredictionRecord]]


class GatedGroupSink:
    """Holds its first write until ``release``; refuses every batch holding request ``bad``."""

    waits_for_acks = True

    def __init__(self, bad: str = "") -> None:
        self.bad = bad
        self.groups: list[list[list[str]]] = []
        self.first_started = threading.Event()
        self.gate = threading.Event()

    def append_groups(self, batches: Batches) -> list[Exception | None]:
        self.first_started.set()
        self.gate.wait(5)
        self.groups.append([[r.request_id for r in batch] for batch in batches])
        return [
            StoreUnavailable("not acknowledged")
            if any(r.request_id == self.bad for r in b)
            else None
            for b in batches
        ]

    def append(self, records: Sequence[PredictionRecord]) -> None:
        raise AssertionError("a group sink is written by append_groups")

    def close(self) -> None:
        pass


def _queue_behind_the_first(
    committer: GroupCommitter, sink: GatedGroupSink, make: Make
) -> list[Future[None]]:
    """Submit r0 (held in flight), then r1, r2, r3 one batch each while it waits."""
    futures = [committer.submit([make(0)])]
    assert sink.first_started.wait(5)
    futures += [committer.submit([make(i)]) for i in (1, 2, 3)]
    sink.gate.set()
    return futures


def test_batches_queued_during_a_write_go_in_one_group_in_submit_order(make_record: Make) -> None:
    sink = GatedGroupSink()
    committer = GroupCommitter(sink)
    futures = _queue_behind_the_first(committer, sink, make_record)
    for f in futures:
        assert f.result(5) is None
    committer.close()
    assert sink.groups == [[["r0"]], [["r1"], ["r2"], ["r3"]]]
    assert (committer.groups, committer.batches) == (2, 4)


def test_only_the_batch_with_a_failed_record_is_refused(make_record: Make) -> None:
    sink = GatedGroupSink(bad="r2")
    committer = GroupCommitter(sink)
    first, one, two, three = _queue_behind_the_first(committer, sink, make_record)
    with pytest.raises(StoreUnavailable, match="not acknowledged"):
        two.result(5)
    assert first.result(5) is None and one.result(5) is None and three.result(5) is None
    committer.close()


def test_a_sink_that_raises_fails_every_batch_of_the_group(make_record: Make) -> None:
    class Broken(GatedGroupSink):
        def append_groups(self, batches: Batches) -> list[Exception | None]:
            raise StoreUnavailable("broker gone")

    committer = GroupCommitter(Broken())
    futures = [committer.submit([make_record(i)]) for i in range(3)]
    for f in futures:
        with pytest.raises(StoreUnavailable, match="broker gone"):
            f.result(5)
    committer.close()


def test_a_plain_sink_is_appended_a_batch_at_a_time_each_answered_alone(
    make_record: Make,
) -> None:
    class Plain:
        waits_for_acks = True

        def __init__(self) -> None:
            self.batches: list[list[str]] = []

        def append(self, records: Sequence[PredictionRecord]) -> None:
            if records[0].request_id == "r1":
                raise StoreUnavailable("disk full")
            self.batches.append([r.request_id for r in records])

        def close(self) -> None:
            pass

    sink = Plain()
    committer = GroupCommitter(sink)
    futures = [committer.submit([make_record(i)]) for i in range(3)]
    with pytest.raises(StoreUnavailable, match="disk full"):
        futures[1].result(5)
    assert futures[0].result(5) is None and futures[2].result(5) is None
    committer.close()
    assert sink.batches == [["r0"], ["r2"]]


def test_close_writes_what_is_queued_then_refuses_more(make_record: Make) -> None:
    sink = GatedGroupSink()
    committer = GroupCommitter(sink)
    futures = [committer.submit([make_record(0)])]
    assert sink.first_started.wait(5)
    futures.append(committer.submit([make_record(1)]))
    sink.gate.set()
    committer.close()
    assert all(f.done() and f.result() is None for f in futures)
    with pytest.raises(RuntimeError, match="the prediction log's group committer is closed"):
        committer.submit([make_record(2)])


def test_a_batch_cancelled_before_its_write_is_not_written(make_record: Make) -> None:
    sink = GatedGroupSink()
    committer = GroupCommitter(sink)
    first = committer.submit([make_record(0)])
    assert sink.first_started.wait(5)
    gave_up = committer.submit([make_record(1)])
    assert gave_up.cancel()
    sink.gate.set()
    assert first.result(5) is None
    assert committer.submit([make_record(2)]).result(5) is None  # the thread goes on
    committer.close()
    assert sink.groups == [[["r0"]], [["r2"]]]
