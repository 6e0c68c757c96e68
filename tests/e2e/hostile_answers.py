"""The hostile requests (:mod:`tests.e2e.hostile_requests`) sent, and what a good answer is.

:func:`send_all` sends them over a few kept-alive connections; :func:`defects`
says what is wrong with an answer: a 5xx, a refusal that is not a JSON error
(but for the HTTP layer's own plain-text ones, and the router's outside
``/v2``), a body its content type does not describe, or a 2xx to the endpoint's
own request that is not that endpoint's answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
from collections.abc import Callable
from typing import Any

import h11

from tests.e2e.hostile_bodies import FEATURES, JSON, MODEL, OCTETS
from tests.e2e.hostile_requests import HostileRequest

# -- sending --


@dataclasses.dataclass(frozen=True)
class Answer:
    """What came back for one case: ``status`` 0 where nothing did (``error`` says why).

    ``reset``: the first try got a connection reset, not an answer; this one is the
    replay's, a refusal that closed the connection (:func:`send_all`).
    """

    case: HostileRequest
    status: int
    headers: dict[bytes, bytes]
    body: bytes
    error: str = ""
    reset: bool = False


async def send_all(url: str, cases: list[HostileRequest], connections: int) -> list[Answer]:
    """Send every case, ``connections`` at a time, each over a kept-alive connection while the
    server keeps it; the answers in the order of the cases.

    A request goes out as it is (h11 frames it; nothing normalises its target), head and
    body in one write. The server refuses some requests before reading their body (401,
    413, 415) and closes the connection, lingering: the rest of the body is read and
    dropped, not answered with a reset that can take the refusal with it (RFC 9112 section
    9.6). Before it lingered, a body over the size limit lost its answer once in five runs
    of 6,300 cases: a case with a body that got no answer is sent once more on a new
    connection, and a refusal that closes it is taken as its answer, marked ``reset``
    (which the test counts as a failure).
    """
    host, _, port = url.partition("://")[2].rpartition(":")
    answers: list[Answer | None] = [None] * len(cases)
    pending = iter(enumerate(cases))  # shared: each sender takes the next case

    async def sender() -> None:
        link: _Link | None = None
        for i, case in pending:
            link = link or await _Link.open(host, int(port))
            answer = await link.exchange(case)
            if answer.error and case.body is not None:
                link.close()
                link = await _Link.open(host, int(port))
                again = await link.exchange(case)
                closed = again.headers.get(b"connection") == b"close"
                if 400 <= again.status < 500 and closed:
                    answer = dataclasses.replace(again, reset=True)
            answers[i] = answer
            if not link.open_for_more():
                link.close()
                link = None
        if link is not None:
            link.close()

    await asyncio.gather(*(sender() for _ in range(connections)))
    return [a for a in answers if a is not None]


class _Link:
    """One client connection: h11's state for it and its stream."""

    def __init__(self, host: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.host = host.encode()
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.broken = False

    @classmethod
    async def open(cls, host: str, port: int) -> _Link:
        reader, writer = await asyncio.open_connection(host, port, limit=2**20)
        return cls(f"{host}:{port}", reader, writer)

    def open_for_more(self) -> bool:
        if not self.broken and self.h11.our_state is self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            return True
        return False

    def close(self) -> None:
        self.writer.close()

    async def exchange(self, case: HostileRequest) -> Answer:
        headers = [(b"host", self.host), *case.headers]
        body = case.body or b""
        if case.body is not None:
            framing = b"chunked" if case.chunked else str(len(body)).encode()
            headers.append((b"transfer-encoding" if case.chunked else b"content-length", framing))
        out = self.h11.send(h11.Request(method=case.method, target=case.target, headers=headers))
        third = len(body) // 3 or 1
        pieces = (
            [body[i : i + third] for i in range(0, len(body), third)] if case.chunked else [body]
        )
        for piece in pieces:
            out += self.h11.send(h11.Data(data=piece)) if piece else b""
        out += self.h11.send(h11.EndOfMessage())
        try:
            self.writer.write(out)
            await self.writer.drain()
            return await self._answer(case)
        except (OSError, TimeoutError, h11.RemoteProtocolError) as exc:
            self.broken = True
            return Answer(case, 0, {}, b"", f"no answer: {type(exc).__name__}: {exc}")

    async def _answer(self, case: HostileRequest) -> Answer:
        status, headers, body = 0, {}, bytearray()
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await asyncio.wait_for(self.reader.read(2**16), 30))
            elif isinstance(event, h11.Response):
                status, headers = event.status_code, dict(event.headers)  # lower-cased names
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return Answer(case, status, headers, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("closed before an answer")


# -- answers --

# The HTTP layer's own refusals (uvicorn's parser, HeadGuard), before any route: plain text.
HTTP_REFUSALS = {400: b"Invalid HTTP request received.", 431: b"Request header fields too large."}
# The router's (BentoML's Starlette app): plain text too, but never under /v2, where mlpipe's
# protocol layer answers every path and method in JSON.
ROUTER_REFUSALS = {404: b"Not Found", 405: b"Method Not Allowed"}
_METRIC_LINE = re.compile(
    rb"# (HELP|TYPE) \S+ .*|# EOF|[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [-+0-9.eEInfa]+( \d+)?"
)


def _json_error(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and bool(data.get("error") or data.get("detail"))


def defects(case: HostileRequest, status: int, headers: dict[bytes, bytes], body: bytes) -> str:
    """What is wrong with this answer to ``case`` ("" where nothing is)."""
    if status >= 500:
        return f"{status}: {body[:300]!r}"
    if case.expect is not None and status != case.expect:
        return f"{status}, not {case.expect}: {body[:300]!r}"
    if not 200 <= status < 500:
        return f"status {status}"
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip()
    if case.method == "HEAD":
        return "" if not body else "a body in the answer to HEAD"
    if body and not content_type:
        return f"{status} without a content type: {body[:100]!r}"
    if content_type == JSON:
        try:
            json.loads(body)
        except ValueError:
            return f"{status} says JSON and is not: {body[:200]!r}"
    if 300 <= status < 400:
        return "" if headers.get(b"location") else f"{status} without a Location"
    if status >= 400:
        under_v2 = case.target == b"/v2" or case.target.startswith((b"/v2/", b"/v2?"))
        plain = content_type == b"text/plain" and (
            HTTP_REFUSALS.get(status) == body
            or (ROUTER_REFUSALS.get(status) == body and not under_v2)
        )
        if _json_error(body) or plain:
            return ""
        return f"{status} that is not a JSON error: {body[:200]!r}"
    if case.own:
        return _ANSWER_CHECKS.get(case.endpoint.label, _json_answer)(body, headers)
    return ""


def _empty_line(body: bytes, headers: dict[bytes, bytes]) -> str:
    return "" if body == b"\n" else f"not the probe's answer: {body[:100]!r}"


def _metrics(body: bytes, headers: dict[bytes, bytes]) -> str:
    if not headers.get(b"content-type", b"").startswith(b"text/plain"):
        return f"metrics as {headers.get(b'content-type')!r}"
    bad = [line for line in body.splitlines() if line and not _METRIC_LINE.fullmatch(line)]
    if bad or b"\nmlpipe_" not in body:
        return f"not the Prometheus text format: {bad[:3]!r}"
    return ""


def _page(body: bytes, headers: dict[bytes, bytes]) -> str:
    html = headers.get(b"content-type", b"").startswith(b"text/html")
    return "" if html and body.lstrip().startswith(b"<!DOCTYPE html>") else f"{body[:100]!r}"


def _json_answer(body: bytes, headers: dict[bytes, bytes]) -> str:
    return "" if isinstance(_json_or_none(body), dict) else f"not a JSON object: {body[:200]!r}"


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _equal(expected: Any) -> Callable[[bytes, dict[bytes, bytes]], str]:
    def check(body: bytes, headers: dict[bytes, bytes]) -> str:
        return "" if _json_or_none(body) == expected else f"not {expected}: {body[:200]!r}"

    return check


def _keys(*keys: str) -> Callable[[bytes, dict[bytes, bytes]], str]:
    def check(body: bytes, headers: dict[bytes, bytes]) -> str:
        data = _json_or_none(body)
        missing = set(keys) - set(data) if isinstance(data, dict) else set(keys)
        return f"no {sorted(missing)}: {body[:200]!r}" if missing else ""

    return check


def _model(body: bytes, headers: dict[bytes, bytes]) -> str:
    data = _json_or_none(body)
    if not isinstance(data, dict) or data.get("name") != MODEL:
        return f"not {MODEL}'s metadata: {body[:200]!r}"
    names = [t.get("name") for t in data.get("inputs", [])]
    return "" if names == list(FEATURES) else f"inputs {names}"


def _prediction(body: bytes, headers: dict[bytes, bytes]) -> str:
    data = _json_or_none(body)
    ok = (
        isinstance(data, dict)
        and data.get("model") == MODEL
        and data.get("arm") in ("champion", "canary")
        and isinstance(data.get("request_id"), str)
        and isinstance(data.get("score"), float)
        and 0.0 <= data["score"] <= 1.0
        and data.get("label") in (0, 1)
    )
    return "" if ok else f"not a prediction: {body[:300]!r}"


def _inference(body: bytes, headers: dict[bytes, bytes]) -> str:
    """An infer answer: JSON, or a JSON head and the binary outputs it sizes exactly."""
    length = headers.get(b"inference-header-content-length")
    binary = headers.get(b"content-type", b"").startswith(OCTETS)
    if binary != (length is not None) or (length is not None and not length.isdigit()):
        return f"content type and Inference-Header-Content-Length disagree: {length!r}"
    head_len = int(length) if length is not None else len(body)
    data = _json_or_none(body[:head_len])
    if not isinstance(data, dict) or data.get("model_name") != MODEL or not data.get("outputs"):
        return f"not an infer answer: {body[:300]!r}"
    sized, rows = 0, set()
    for tensor in data["outputs"]:
        shape = tensor.get("shape")
        rows.add(shape[0] if isinstance(shape, list) and shape else None)
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            sized += size
        elif len(tensor.get("data") or []) != math.prod(shape or [0]):
            return f"output {tensor.get('name')}: data does not fill shape {shape}"
    if len(rows) != 1 or None in rows:
        return f"outputs of different rows: {data['outputs']!r:.300}"
    if sized != len(body) - head_len:
        return f"binary outputs of {len(body) - head_len} bytes, sized {sized}"
    return ""


_ANSWER_CHECKS: dict[str, Callable[[bytes, dict[bytes, bytes]], str]] = {
    "GET /healthz": _empty_line,
    "GET /livez": _empty_line,
    "GET /readyz": _empty_line,
    "GET /metrics": _metrics,
    "POST /predict": _prediction,
    "GET /v2": _keys("name", "version", "extensions"),
    "GET /v2/health/live": _equal({"live": True}),
    "GET /v2/health/ready": _equal({"ready": True}),
    "GET /v2/models/{name}": _model,
    "GET /v2/models/{name}/ready": _equal({"name": MODEL, "ready": True}),
    "POST /v2/models/{name}/infer": _inference,
    "POST /v2/models/{name}/infer (binary)": _inference,
    "GET /docs.json": _keys("openapi", "paths"),
    "GET /": _page,
    "GET /schema.json": _json_answer,
}
