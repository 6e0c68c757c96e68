"""uvicorn's httptools protocol with a bound on a request head's size and on the time it takes.

uvicorn (0.55, as BentoML runs it) bounds neither: httptools buffers a header
value until its line ends (a 20 MB header was read whole and served; three
connections holding 50 MB of unfinished headers added 148 MB to a worker), and
its only timer is the keep-alive one, armed after a response, so a connection
that never completes its first request head is never closed (issue 23, item 4).

:class:`HeadGuard` counts the bytes of each head before the parser sees them
(the request line and headers, up to the blank line that ends them): past
``max_bytes`` it answers 431 and closes. A head must be complete ``timeout_s``
after the connection opened or its first byte arrived: otherwise the connection
is closed, with 408 if part of a head came. Bodies are the intake's (413, 408:
:class:`~mlpipe.serving.RequestIntake`); a response sent before its request's
body has all come (a refusal that did not read it) closes the connection, so
what the client sends after it is never read as a body with no timer running.
That close lingers, as nginx's ``lingering_close`` does (RFC 9112 section 9.6):
the answer is sent with a FIN, what the client still sends is read and dropped
for up to ``LINGER_S`` (never past the head timeout) or ``LINGER_BYTES``, then
the socket closes. A plain close with the client's body still arriving makes
the kernel answer it with a reset, and a client whose reset came before it read
the refusal lost the 401, 413 or 415 (issue 29's fuzz saw it in 3 of 4 runs).
The guard is the same parser with a few integer operations per read;
uvicorn's ``h11`` protocol, which has a size bound, parses in pure Python
(decision 025).

The guard also sheds load where it is cheapest. With :attr:`HeadGuard.shed`
set (the front door's :meth:`~mlpipe.serving.FrontDoor.shed`), a ``POST``
whose head the front door would refuse right now (a scoring request while the
worker is saturated) is answered here, from the head, with the front door's
own 503: no ASGI task, no middleware, no JSON encoding. Its body is read and
dropped as it comes and the answer goes out once it has all come, on a
connection kept alive as the front door keeps it. A body still to come
``shed_body_wait_s`` after the head is answered then and the connection
closed, lingering, as for any refusal that did not read its body (an
``Expect: 100-continue`` client, which waits for a word before it sends one,
gets its 503 that way). Above
saturation the refusals' own CPU decides how much is left for the admitted
requests (decision 009); this path costs a refusal about half of what the
front door's did (decision 046).

With :attr:`HeadGuard.lane` set, a ``POST`` the predict lane takes
(:class:`~mlpipe.serving._lane.PredictLane`: the usual ``/predict``) is not
given to the app either: the guard gathers its body (the lane's 408 and a
close if it has not all come in the lane's time), hands it to the lane, and
writes the lane's answer when it comes (:meth:`HeadGuard.give`), in the
request's turn on a pipelined connection (decision 047).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from mlpipe.serving._asgi import NO_CONTEXT

if TYPE_CHECKING:
    from mlpipe.serving._lane import Laned, PredictLane

_END = b"\r\n\r\n"  # llhttp accepts no other end of a head (a bare LF is a parse error)
LINGER_S = 2.0  # the longest a refused client's body in flight is read and dropped
LINGER_BYTES = 8 * 1024 * 1024  # the most of it read before the close comes anyway


class Shed(NamedTuple):
    """An answer the protocol gives itself, without running the app: a shed request's,
    or the guard's own 431 and 408."""

    status: int
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes


# The path of a POST → the answer to give it now instead of running the app, or None
Shedder = Callable[[str], Shed | None]


class _LingeringTransport:
    """The connection's transport as uvicorn sees it: ``close`` lingers while the
    request being answered still has body to come (see the module docstring), and an
    answer's head goes out with its body.

    uvicorn writes a response's head as the app starts it and its body as the app
    sends it: two sends on the socket for every answer. The first write of an answer
    is held until the next one, the answer's end or the loop's next turn, whichever
    comes first, so a whole answer is one send (decision 042).
    Everything else is the socket transport's own (hot methods bound once)."""

    def __init__(self, transport: asyncio.Transport, guard: HeadGuard) -> None:
        self._transport = transport
        self._guard = guard
        self._held: bytes | None = None
        self.is_closing = transport.is_closing

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            if self._guard.cycle is None or self._guard.cycle.response_complete:
                self._transport.write(data)  # not an answer's head (a refusal of the guard's)
                return
            self._held = data
            self._guard.loop.call_soon(self.flush, context=NO_CONTEXT)
            return
        self._held = None
        self._transport.write(held + data)

    def flush(self) -> None:
        """Send what is held."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        cycle = self._guard.cycle
        if cycle is not None and cycle.more_body and cycle.response_complete:
            self._guard.linger()
        else:
            self._transport.close()


class HeadGuard(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` that refuses a head over ``max_bytes`` or ``timeout_s``.

    Use :meth:`bounded` for a class with the limits set; 0 lifts a bound.
    """

    max_bytes: int = 64 * 1024
    timeout_s: float = 10.0
    shed: Shedder | None = None  # see the module docstring
    lane: PredictLane | None = None  # the predict lane (mlpipe.serving._lane)
    # How long a shed request's body may take to come after its head (clients often write
    # the two apart): its answer waits for it, so the connection is kept; then it is
    # answered and the connection closed
    shed_body_wait_s: float = 0.05

    _head_bytes: int | None  # bytes of the head now arriving; None while none is expected
    _head_tail: bytes  # the last bytes counted, for an end split between two reads
    _head_deadline: float | None  # loop time by which the head now arriving must be complete
    # One timer a connection, re-armed when it fires early, not one a request: a
    # timer made and cancelled per request made the guard cost 3.0 µs, not 1.8 µs.
    _head_timer: asyncio.TimerHandle | None

    @classmethod
    def bounded(
        cls,
        max_bytes: int,
        timeout_s: float,
        shed: Shedder | None = None,
        lane: PredictLane | None = None,
    ) -> type[HeadGuard]:
        """A subclass with these bounds, ``shed`` and ``lane`` (uvicorn builds the protocol
        from a class). ``shed`` is stored as a static method: it is a bound method of the
        front door, not one of the protocol's."""
        attrs: dict[str, Any] = {"max_bytes": max_bytes, "timeout_s": timeout_s, "lane": lane}
        attrs["shed"] = staticmethod(shed) if shed is not None else None
        return type(cls.__name__, (cls,), attrs)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._socket = transport
        self._linger_timer: asyncio.TimerHandle | None = None
        self._dropped: int | None = None  # bytes read and dropped while lingering
        self._answers = _LingeringTransport(transport, self)
        super().connection_made(cast("asyncio.Transport", self._answers))
        self._head_timer = None
        self._head_deadline = None
        self._shedding: tuple[RequestResponseCycle, Shed] | None = None
        self._shed_timer: asyncio.TimerHandle | None = None
        self._reading = False  # inside data_received: a shed answer can wait for its body
        self._laned: tuple[RequestResponseCycle, Laned] | None = None  # its body still to come
        self._lane_timer: asyncio.TimerHandle | None = None
        self._expect_head()
        self._start_clock()  # a connection that sends nothing is closed as well

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._linger_timer, self._shed_timer, self._lane_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._linger_timer = self._shed_timer = self._lane_timer = None
        self._shedding = None
        if self._laned is not None and self.lane is not None:
            self.lane.abandon(self._laned[1])
        self._laned = None
        super().connection_lost(exc)

    def linger(self) -> None:
        """Send the answer with a FIN, then read and drop what comes until the client stops,
        ``LINGER_BYTES`` came or ``LINGER_S`` (at most the head timeout) passed; then close."""
        if self._dropped is not None:
            return
        self._answers.flush()
        socket = self._socket
        if socket.is_closing() or not socket.can_write_eof():
            socket.close()
            return
        self._dropped = 0
        self._head_bytes = self._head_deadline = None
        socket.write_eof()
        socket.resume_reading()  # flow control may have paused it while a body buffered
        seconds = min(LINGER_S, self.timeout_s) if self.timeout_s > 0 else LINGER_S
        self._linger_timer = self.loop.call_later(seconds, socket.close)

    def data_received(self, data: bytes) -> None:
        if self._dropped is not None:
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:
                self._socket.close()
            return
        if self._head_bytes is not None:
            if self._head_deadline is None:
                self._start_clock()
            if self._count(data):
                self._refuse(431, "Request header fields too large.")
                return
        self._reading = True
        try:
            super().data_received(data)
        finally:
            self._reading = False
        if self._shedding is not None:  # a shed request's body did not all come in this read
            self._wait_for_shed_body()

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        self._head_deadline = None
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._shedding is None or self._shedding[0] is not self.cycle:
            super().on_body(body)
        # else: the body of a request answered from its head, dropped

    def on_message_complete(self) -> None:
        if self._laned is not None and self._laned[0] is self.cycle:
            self.cycle.more_body = False
            self._hand_to_lane()
        elif self._shedding is not None and self._shedding[0] is self.cycle:
            self.cycle.more_body = False
            self._answer_shed(close=False)
        else:
            super().on_message_complete()
        self._expect_head()  # whatever comes next on this connection is a new head

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        scope = cycle.scope
        if scope["method"] == "POST":
            if self.shed is not None and (answer := self.shed(scope["path"])) is not None:
                self._shed(cycle, answer)
                return
            if self.lane is not None and (taken := self.lane.take(scope)) is not None:
                self._lane(cycle, taken)
                return
        super()._start_asgi_task(cycle, app)

    def _lane(self, cycle: RequestResponseCycle, taken: Laned | Shed) -> None:
        """A request the predict lane took: answered now (a denial), or handed to it once its
        body has come (408 and a close if it has not within the lane's timeout)."""
        assert self.lane is not None
        if isinstance(taken, Shed):
            self.give(cycle, taken, close=True)
            return
        self._laned = (cycle, taken)
        if not cycle.more_body:  # a pipelined request whose body came while it waited
            self._hand_to_lane()
            return
        self._lane_timer = self.loop.call_later(
            self.lane.timeout_s, self._lane_body_late, context=NO_CONTEXT
        )

    def _hand_to_lane(self) -> None:
        assert self._laned is not None and self.lane is not None
        cycle, laned = self._laned
        self._laned = None
        if self._lane_timer is not None:
            self._lane_timer.cancel()
            self._lane_timer = None
        self.lane.submit(self, cycle, laned)

    def _lane_body_late(self) -> None:
        self._lane_timer = None
        if self._laned is None or self.lane is None or self.transport.is_closing():
            return
        cycle, laned = self._laned
        self._laned = None
        self.give(cycle, self.lane.too_slow(laned), close=True)

    def _shed(self, cycle: RequestResponseCycle, answer: Shed) -> None:
        self._shedding = (cycle, answer)
        if not cycle.more_body:  # a pipelined request whose body came while it waited
            self._answer_shed(close=False)
        elif not self._reading:  # a pipelined one whose body is still to come
            self._wait_for_shed_body()
        # else: answered when its body has come; if this read ends first, it waits for it

    def _wait_for_shed_body(self) -> None:
        if self._shed_timer is None:
            self._shed_timer = self.loop.call_later(
                self.shed_body_wait_s, self._answer_unfinished, context=NO_CONTEXT
            )

    def _answer_unfinished(self) -> None:
        """``shed_body_wait_s`` after a shed request's head, its body not all come: answer
        and close (lingering)."""
        self._shed_timer = None
        if self._shedding is not None and not self.transport.is_closing():
            self._answer_shed(close=True)

    def _answer_shed(self, *, close: bool) -> None:
        """Give the shed answer; close (lingering) if asked or the client asked to."""
        assert self._shedding is not None
        cycle, answer = self._shedding
        self._shedding = None
        if self._shed_timer is not None:
            self._shed_timer.cancel()
            self._shed_timer = None
        self.give(cycle, answer, close=close)

    def give(self, cycle: RequestResponseCycle, answer: Shed, *, close: bool) -> None:
        """Answer ``cycle``'s request with ``answer``, written by the protocol itself; close
        (lingering while its body is still to come) if asked or the client asked to."""
        close = close or not cycle.keep_alive
        cycle.response_complete = True
        if self.transport.is_closing():  # the client is gone: nobody to answer
            return
        self._socket.write(self._response(answer, close=close))
        if close:
            self.transport.close()  # lingers while its body is still to come
        self.on_response_complete()

    def on_response_complete(self) -> None:
        # Answered before its body had all come (a refusal that read none of it: 401, 413,
        # 415, 429, 503): the rest would be read as that body with no timer running (its
        # next byte cancels uvicorn's keep-alive timer and no head is expected), so a
        # client could hold the connection for ever. Close it (issue 29, item 2).
        self._answers.flush()
        cycle = self.cycle
        if cycle.more_body and cycle.response_complete and not self.transport.is_closing():
            self.transport.close()
        super().on_response_complete()

    def _expect_head(self) -> None:
        self._head_bytes = 0
        self._head_tail = b""

    def _count(self, data: bytes) -> bool:
        """Add the head's part of ``data``; whether the head is now over ``max_bytes``."""
        assert self._head_bytes is not None
        tail = self._head_tail
        if not tail:  # the usual case: a whole head in one read, nothing to join
            end = data.find(_END)
            self._head_bytes += len(data) if end < 0 else end + len(_END)
        else:
            end = (tail + data).find(_END)
            self._head_bytes += len(data) if end < 0 else max(0, end + len(_END) - len(tail))
        if end < 0:
            keep = len(_END) - 1
            self._head_tail = data[-keep:] if len(data) >= keep else (tail + data)[-keep:]
        return 0 < self.max_bytes < self._head_bytes

    def _start_clock(self) -> None:
        if self.timeout_s > 0:
            self._head_deadline = self.loop.time() + self.timeout_s
            if self._head_timer is None:
                self._head_timer = self.loop.call_at(self._head_deadline, self._check_clock)

    def _check_clock(self) -> None:
        self._head_timer = None
        if self._head_deadline is None or self.transport.is_closing():
            return  # no head under way: the next one starts the clock again
        if self.loop.time() < self._head_deadline:  # a later head than the timer was set for
            self._head_timer = self.loop.call_at(self._head_deadline, self._check_clock)
            return
        self._head_deadline = None
        if self._answering():  # a pipelined head behind an answer: close once it is sent
            self.cycle.keep_alive = False
        elif self._head_bytes:
            self._refuse(408, "Request header timeout.")
        else:
            self.transport.close()

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` and close, lingering; only close while an earlier request is
        being answered."""
        self._head_bytes = None
        self._head_deadline = None
        if self._answering():  # a pipelined head: an answer now would cut into the other one
            self.transport.close()
            return
        text = [(b"content-type", b"text/plain; charset=utf-8")]
        answer = Shed(status, text, message.encode("ascii"))
        self.transport.write(self._response(answer, close=True))
        self.linger()

    def _response(self, answer: Shed, *, close: bool) -> bytes:
        """A whole response written by the protocol itself: the server's default headers,
        ``answer``'s, its length and ``Connection: close`` if ``close`` (each unless
        ``answer`` has it already, as an app's answer may)."""
        lines = [STATUS_LINE[answer.status]]
        sized = closing = False
        for name, value in (*self.server_state.default_headers, *answer.headers):
            lines += [name, b": ", value, b"\r\n"]
            sized = sized or name == b"content-length"
            closing = closing or (name == b"connection" and value == b"close")
        if not sized:
            lines += [b"content-length: ", str(len(answer.body)).encode("ascii"), b"\r\n"]
        if close and not closing:
            lines.append(b"connection: close\r\n")
        lines += [b"\r\n", answer.body]
        return b"".join(lines)


__all__ = ["HeadGuard", "Shed", "Shedder"]
