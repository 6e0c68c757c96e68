"""Hostile requests for each endpoint the scoring server exposes.

:func:`hostile_requests` makes a fixed number of requests per endpoint from a
:class:`random.Random` seeded by the endpoint's label, so every run sends the
same ones. Each is the endpoint's own request with a few things changed (its
method, path, query, headers, key or body); each body is a valid one with a few
parts made hostile, so most cases get past the first check to the code behind
it. Infer is two endpoints here: its JSON form and Triton's binary tensor
extension. The first cases of each endpoint are fixed ones with a known answer:
its valid request (200), and for infer the three that were 500s with a
traceback (issue 29, item 3): a shape of 65 dimensions, a BYTES element holding
a 400-digit integer for an FP64 input, an ``Inference-Header-Content-Length``
of ``²``.

The bodies come from :mod:`tests.e2e.hostile_bodies`;
:mod:`tests.e2e.hostile_answers` sends the requests and says what is wrong with
an answer.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.e2e.hostile_bodies import (
    FEATURES,
    HOSTILE_TEXT,
    JSON,
    MODEL,
    OCTETS,
    binary_body,
    bytes_element,
    dump,
    encoded,
    hostile_value,
    infer_body,
    predict_body,
)

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE")


@dataclass(frozen=True)
class Endpoint:
    """One route as ``/docs.json`` labels its operation (``label``), and how many cases it gets."""

    label: str
    method: str
    path: str  # with the served model's name in place of {name}
    body: str = ""  # "predict", "infer" or "binary": what its requests carry
    cases: int = 500


@dataclass(frozen=True)
class HostileRequest:
    """One case: sent as is (``target`` is the path and query, bytes, unnormalised)."""

    endpoint: Endpoint
    method: str
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes | None
    own: bool  # the endpoint's own method and path: a 2xx must be the endpoint's answer
    expect: int | None = None  # the status a fixed case must get
    chunked: bool = False  # the body sent in chunks, without a Content-Length

    def __str__(self) -> str:
        head = " ".join(f"{k.decode()}: {v!r}" for k, v in self.headers if k != b"authorization")
        body = "" if self.body is None else f" body={self.body[:300]!r}"
        return f"{self.endpoint.label}: {self.method} {self.target[:300]!r} [{head}]{body}"


_INFER = f"/v2/models/{MODEL}/infer"
ENDPOINTS = (
    Endpoint("GET /healthz", "GET", "/healthz"),
    Endpoint("GET /livez", "GET", "/livez"),
    Endpoint("GET /readyz", "GET", "/readyz"),
    Endpoint("GET /metrics", "GET", "/metrics"),
    Endpoint("POST /predict", "POST", "/predict", "predict"),
    Endpoint("GET /v2", "GET", "/v2"),
    Endpoint("GET /v2/health/live", "GET", "/v2/health/live"),
    Endpoint("GET /v2/health/ready", "GET", "/v2/health/ready"),
    Endpoint("GET /v2/models/{name}", "GET", f"/v2/models/{MODEL}"),
    Endpoint("GET /v2/models/{name}/ready", "GET", f"/v2/models/{MODEL}/ready"),
    Endpoint("POST /v2/models/{name}/infer", "POST", _INFER, "infer"),
    Endpoint("POST /v2/models/{name}/infer (binary)", "POST", _INFER, "binary"),
    # The documentation: no input but the request itself, and the dearest answers (~10 ms
    # for /docs.json, which the gateway rewrites), so fewer cases.
    Endpoint("GET /docs.json", "GET", "/docs.json", cases=100),
    Endpoint("GET /", "GET", "/", cases=100),
    Endpoint("GET /schema.json", "GET", "/schema.json", cases=100),
)


def _percent(text: str) -> str:
    """``text`` for a URL: letters and digits as they are, every other byte %-escaped."""
    return "".join(
        c if c.isascii() and c.isalnum() else "".join(f"%{b:02X}" for b in c.encode())
        for c in text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    )


# -- the request around the body --


def _target(rng: random.Random, endpoint: Endpoint) -> tuple[bytes, bool]:
    """(path and query, whether the path is the endpoint's own)."""
    path, own = endpoint.path, True
    if rng.random() < 0.2:
        own = False
        path = rng.choice(_PATH_CHANGES)(rng, path)
    query = ""
    if rng.random() < 0.25:
        pairs = [
            f"{_percent(rng.choice(HOSTILE_TEXT)[:20])}={_percent(str(hostile_value(rng))[:40])}"
            for _ in range(rng.randint(1, 4))
        ]
        raw = rng.choice(("binary_data_output=true", "name=%ZZ", "a=1&a=2", "&&=", "x[]=1"))
        query = "?" + "&".join([*pairs, raw])
    elif rng.random() < 0.003:
        query = "?q=" + "x" * 70_000  # a head over max_header_bytes
    return (path + query).encode(), own


_PATH_CHANGES: tuple[Callable[[random.Random, str], str], ...] = (
    lambda rng, p: p.rstrip("/") + "/",
    lambda rng, p: "/" + p,
    lambda rng, p: p.upper(),
    lambda rng, p: p + "/x",
    lambda rng, p: p + "/..",
    lambda rng, p: p.replace("/", "/./", 1),
    lambda rng, p: p.replace("v", "%76", 1).replace("e", "%65", 1),
    lambda rng, p: p.replace(MODEL, _percent(rng.choice(HOSTILE_TEXT)) or "%2F"),
    lambda rng, p: p.replace(MODEL, f"{MODEL}/versions/{rng.choice(('1', 'zz', '%00'))}"),
    lambda rng, p: p + ";x=1",
    lambda rng, p: p + "%00",
)


def _headers(
    rng: random.Random, key: str, endpoint: Endpoint, content_type: bytes | None
) -> list[tuple[bytes, bytes]]:
    headers: list[tuple[bytes, bytes]] = []
    bearer = f"Bearer {key}".encode()
    if rng.random() < 0.93:
        headers.append((b"authorization", bearer))
    else:
        headers += rng.choice(
            (
                [],
                [(b"authorization", b"Bearer wrong")],
                [(b"authorization", b"Basic Zm9vOmJhcg==")],
                [(b"authorization", b"Bearer")],
                [(b"authorization", bearer[:-1])],
                [(b"authorization", bearer.lower())],
                [(b"x-api-key", key.encode())],
                [(b"authorization", bearer), (b"authorization", b"Bearer wrong")],
                [(b"authorization", bearer + b", " + bearer)],
            )
        )
    if content_type is not None and rng.random() < 0.9:
        headers.append((b"content-type", content_type))
    elif rng.random() < 0.15:
        headers.append((b"content-type", rng.choice(_CONTENT_TYPES)))
    for name, values in _EXTRA_HEADERS:
        if rng.random() < 0.05:
            headers.append((name, rng.choice(values)))
    return headers


_CONTENT_TYPES = (
    JSON,
    b"application/json; charset=utf-8",
    b"application/json;charset=latin-1",
    b"APPLICATION/JSON",
    OCTETS,
    b"text/plain",
    b"multipart/form-data; boundary=x",
    b"application/x-www-form-urlencoded",
    b"",
    b"\xc3\xa9/\xc3\xa9",
    b"application/json, text/plain",
)
_EXTRA_HEADERS: tuple[tuple[bytes, tuple[bytes, ...]], ...] = (
    (b"accept", (b"application/openmetrics-text", b"*/*;q=x", b"text/html", b"\xff")),
    (b"accept-encoding", (b"gzip", b"br, zstd", b"identity;q=0", b"*")),
    (b"x-request-id", (b"abc", b"\xe2\x80\xae", b"\x7f", b"x" * 4000)),
    (b"traceparent", (b"00-" + b"0" * 32 + b"-" + b"0" * 16 + b"-01", b"zz", b"\xff")),
    (b"user-agent", (b"\xf0\x9f\x98\x80", b"")),
    (b"inference-header-content-length", (b"\xb2", b"0", b"99999", b"-1")),
    (b"cookie", (b"a=b; a=c", b"=")),
    (b"x-bentoml-request-id", (b"1", b"x")),
    (b"connection", (b"close",)),
    (b"expect", (b"100-continue",)),
)


def _case(rng: random.Random, key: str, endpoint: Endpoint) -> HostileRequest:
    method = endpoint.method if rng.random() < 0.88 else rng.choice(METHODS)
    target, own = _target(rng, endpoint)
    body: bytes | None = None
    content_type: bytes | None = None
    length = b""
    if endpoint.body == "predict":
        body, content_type = encoded(rng, predict_body(rng)), JSON
    elif endpoint.body == "infer":
        body, content_type = encoded(rng, infer_body(rng)), JSON
    elif endpoint.body == "binary":
        body, length = binary_body(rng)
        content_type = OCTETS
    elif rng.random() < 0.1:  # a body where none is read
        body = encoded(rng, hostile_value(rng))
    headers = _headers(rng, key, endpoint, content_type)
    if endpoint.body == "binary":
        headers.append((b"inference-header-content-length", length))
    chunked = body is not None and rng.random() < 0.05  # Transfer-Encoding: chunked
    return HostileRequest(
        endpoint,
        method,
        target,
        tuple(headers),
        body,
        own and method == endpoint.method,
        None,
        chunked,
    )


def _fixed(key: str, endpoint: Endpoint) -> list[HostileRequest]:
    """The endpoint's valid request (200) and, for infer, issue 29 item 3's three cases."""
    auth = (b"authorization", f"Bearer {key}".encode())
    target = endpoint.path.encode()

    def case(body: Any, status: int, *headers: tuple[bytes, bytes], raw: bytes = b"") -> Any:
        content = raw or (None if body is None else dump(body).encode())
        return HostileRequest(
            endpoint, endpoint.method, target, (auth, *headers), content, True, status
        )

    valid: dict[str, Any] = {
        "predict": {"model": MODEL, "features": {"amount": 120.5, "n_items": 3.0}},
        "infer": {
            "inputs": [
                {"name": name, "datatype": "FP64", "shape": [1], "data": [2.0]} for name in FEATURES
            ]
        },
    }
    json_type = (b"content-type", JSON)
    if endpoint.body in ("predict", "infer"):
        cases = [case(valid[endpoint.body], 200, json_type)]
    elif endpoint.body != "binary":
        return [case(None, 200)]
    if endpoint.body == "infer":
        n_items = valid["infer"]["inputs"][1]
        past_64 = {"name": "amount", "datatype": "FP64", "shape": [1] * 65, "data": [1.0]}
        huge = {"name": "amount", "datatype": "BYTES", "shape": [1], "data": [10**400]}
        cases.append(case({"inputs": [past_64, n_items]}, 400, json_type))
        cases.append(case({"inputs": [huge, n_items]}, 422, json_type))
    if endpoint.body == "binary":
        tensors = [
            {"name": name, "datatype": "FP64", "shape": [1], "parameters": {"binary_data_size": 8}}
            for name in FEATURES
        ]
        head = dump({"inputs": tensors}).encode()
        blobs = struct.pack("<d", 2.0) * 2
        octets = (b"content-type", OCTETS)
        length = str(len(head)).encode()
        header = b"inference-header-content-length"
        cases = [
            case(None, 200, octets, (header, length), raw=head + blobs),
            case(None, 400, octets, (header, b"\xb2"), raw=head + blobs),  # "²"
        ]
        tensors[0] = {**tensors[0], "datatype": "BYTES", "parameters": {"binary_data_size": 404}}
        head = dump({"inputs": tensors}).encode()
        raw = head + bytes_element(b"1" * 400) + blobs[:8]
        cases.append(case(None, 422, octets, (header, str(len(head)).encode()), raw=raw))
    return cases


def hostile_requests(key: str) -> list[HostileRequest]:
    """Every endpoint's cases (its fixed ones first): /metrics's, then the others interleaved
    one endpoint after another, so the dear answers (/docs.json, scoring) overlap cheap ones."""
    per_endpoint = []
    for endpoint in ENDPOINTS:
        rng = random.Random(endpoint.label)  # str seeds are hashed stably: the same every run
        cases = _fixed(key, endpoint)
        cases += [_case(rng, key, endpoint) for _ in range(endpoint.cases - len(cases))]
        per_endpoint.append(cases)
    # /metrics first: its answer renders every series the other cases add (a label set per
    # route and status), ~3 ms while they are few, 20-150 ms once the rest have been sent.
    metrics = [c for c in per_endpoint if c[0].endpoint.label == "GET /metrics"]
    rest = [c for c in per_endpoint if c[0].endpoint.label != "GET /metrics"]
    longest = max(len(c) for c in rest)
    return [*metrics[0], *(c[i] for i in range(longest) for c in rest if i < len(c))]
