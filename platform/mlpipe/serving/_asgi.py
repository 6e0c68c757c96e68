"""What the serving middleware share: ASGI types, reading a whole body, a JSON reply.

Auth, intake, the Open Inference Protocol layer, the overload gate and the
gateway are pure-ASGI middleware; each answers some requests with a JSON body
and some read the request body, so those two steps live here once.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, overload

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ClientDisconnected(Exception):
    """The client went away before its body was complete."""


CONNECTION_CLOSE = (b"connection", b"close")
# The context of a callback a request schedules to run later (a timer, a flush): a handle
# keeps its context until it runs, and a request's context holds that request's state,
# which must not outlive it (decision 006).
NO_CONTEXT = contextvars.Context()


@overload
async def read_body(scope: Scope, receive: Receive) -> bytes: ...
@overload
async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes | None: ...


async def read_body(scope: Scope, receive: Receive, limit: int | None = None) -> bytes | None:
    """The whole request body, or None when it is declared or grows past ``limit`` bytes.

    Without a ``limit`` the body is read whole: the layers below the intake, which
    has already enforced ``serving.max_body_bytes`` (413), read it this way.
    Raises :class:`ClientDisconnected` if the client leaves first (nobody to answer).
    """
    if limit is not None:
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def response_head(
    content_type: bytes, body: bytes, extra: Sequence[tuple[bytes, bytes]] = ()
) -> list[tuple[bytes, bytes]]:
    """An answer's headers in the order every mlpipe answer has them: its type, its length,
    then ``extra`` (the app's answers and the predict lane's, which must match)."""
    return [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]


async def send_json(
    send: Send,
    status: int,
    body: dict[str, Any],
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with ``body`` as JSON (Content-Type and Content-Length set) and ``headers``."""
    data = json.dumps(body).encode()
    head = response_head(b"application/json", data, headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": data, "more_body": False})


__all__ = [
    "response_head",
    "CONNECTION_CLOSE",
    "NO_CONTEXT",
    "ASGIApp",
    "ClientDisconnected",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "read_body",
    "send_json",
]
