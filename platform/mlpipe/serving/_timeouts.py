"""One timer for all of a layer's request timeouts.

``asyncio.timeout`` schedules a timer for every block it guards and cancels it when
the block ends: two a request (the body's and the request's), ~5 % of a worker's
time at c=32 (decision 042). A layer gives every request the same timeout, so the
deadlines fall in the order the requests came: :class:`Timeouts` keeps them in that
order and one timer for the oldest. An overdue block is expired through
``asyncio.Timeout`` itself (its task cancelled, ``TimeoutError`` at the block's end,
``expired()`` true), so it behaves as under ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from mlpipe.serving._asgi import NO_CONTEXT


class Timeouts:
    """``async with timeouts() as t:`` is ``async with asyncio.timeout(seconds) as t:``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._due: dict[asyncio.Timeout, float] = {}  # in the order they fall due
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __call__(self) -> Watched:
        return Watched(self)

    def disarm(self, timeout: asyncio.Timeout) -> None:
        """Let ``timeout``'s block run to its end (``Timeout.reschedule(None)``)."""
        self._due.pop(timeout, None)

    def _arm(self, timeout: asyncio.Timeout) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop: the old one's blocks will never end
            self._due.clear()
            self._loop, self._timer = loop, None
        when = loop.time() + self.seconds
        self._due[timeout] = when
        if self._timer is None:
            self._schedule(when)

    def _schedule(self, when: float) -> None:
        assert self._loop is not None
        # not in the context of the request that armed it, which the timer would keep alive
        self._timer = self._loop.call_at(when, self._expire, context=NO_CONTEXT)

    def _expire(self) -> None:
        assert self._loop is not None
        self._timer = None
        now = self._loop.time()
        while self._due:
            timeout, when = next(iter(self._due.items()))
            if when > now:
                self._schedule(when)
                return
            del self._due[timeout]
            timeout.reschedule(now)  # asyncio cancels its task on the loop's next turn


class Watched:
    """One block under :class:`Timeouts`: an ``asyncio.Timeout`` with no timer of its own."""

    __slots__ = ("_timeouts", "timeout")

    def __init__(self, timeouts: Timeouts) -> None:
        self._timeouts = timeouts
        self.timeout = asyncio.Timeout(None)

    async def __aenter__(self) -> asyncio.Timeout:
        await self.timeout.__aenter__()
        self._timeouts._arm(self.timeout)
        return self.timeout

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._timeouts.disarm(self.timeout)
        await self.timeout.__aexit__(exc_type, exc, tb)  # raises TimeoutError if expired


__all__ = ["Timeouts", "Watched"]
