"""Group commit: the batches queued while a log write was in flight, written as one.

A sink that waits for acks (Kafka) pays a round trip and a produce request to
the broker a write. :class:`GroupCommitter` holds one thread that takes every
batch queued since its last write, hands them to the sink together (one
``flush``, one wait for acks) and then answers each batch's future with its own
outcome: a batch succeeds only when all of its records were acknowledged. Batches
are written in the order they were submitted, so per-tenant order holds.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Protocol, cast, runtime_checkable

from mlpipe.predlog._record import PredictionRecord
from mlpipe.predlog._sink import PredictionSink

logger = logging.getLogger("mlpipe.predlog")


@runtime_checkable
class GroupSink(Protocol):
    """A sink that writes several batches with one wait: ``append_groups`` returns, for
    each batch in order, ``None`` when all of its records are durable, else the error
    that batch's caller should see."""

    def append_groups(
        self, batches: Sequence[Sequence[PredictionRecord]]
    ) -> list[Exception | None]: ...


class GroupCommitter:
    """Writes batches to ``sink`` on one thread, coalescing those that queue meanwhile.

    ``groups`` and ``batches`` count the writes made and the batches they held, so
    ``batches / groups`` is how much coalescing the load gave.
    """

    def __init__(self, sink: PredictionSink, name: str = "mlpipe-log") -> None:
        self._sink = sink
        self._groups_at_once = isinstance(sink, GroupSink)
        self._queue: deque[tuple[Sequence[PredictionRecord], Future[None]]] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self.groups = 0
        self.batches = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, records: Sequence[PredictionRecord]) -> Future[None]:
        """Queue ``records`` for the next write; the future is done once they are durable,
        or raises what the sink raised for them (:class:`~mlpipe.errors.StoreUnavailable`).

        Raises RuntimeError once :meth:`close` was called.
        """
        done: Future[None] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the prediction log's group committer is closed")
            self._queue.append((records, done))
            self._ready.notify()
        return done

    def close(self) -> None:
        """Write what is queued, then stop the thread (logging how much coalescing it saw)."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join()
        logger.info("prediction log: %d batches in %d group writes", self.batches, self.groups)

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                # a batch whose caller gave up before its write began is not written
                group = [(r, f) for r, f in self._queue if f.set_running_or_notify_cancel()]
                self._queue.clear()
            if not group:
                continue
            self.groups += 1
            self.batches += len(group)
            for (_, done), failure in zip(group, self._write([r for r, _ in group]), strict=True):
                if failure is None:
                    done.set_result(None)
                else:
                    done.set_exception(failure)

    def _write(self, batches: list[Sequence[PredictionRecord]]) -> list[Exception | None]:
        """One outcome a batch; whatever the sink raises fails every batch of the group."""
        try:
            if self._groups_at_once:
                return cast(GroupSink, self._sink).append_groups(batches)
            return [self._append_one(records) for records in batches]
        except Exception as exc:
            return [exc] * len(batches)

    def _append_one(self, records: Sequence[PredictionRecord]) -> Exception | None:
        try:
            self._sink.append(records)
        except Exception as exc:
            return exc
        return None
