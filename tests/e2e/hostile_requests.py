"""Hostile requests for each endpoint the scoring server exposes, and what a well-formed answer is.

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

:func:`defects` says what is wrong with an answer: a 5xx, a refusal that is not
a JSON error (but for the HTTP layer's own plain-text ones, and the router's
outside ``/v2``), a body its content type does not describe, or a 2xx to the
endpoint's own request that is not that endpoint's answer. :func:`send_all`
sends them over a few kept-alive connections.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11

MODEL = "fraud"
FEATURES = ("amount", "n_items")
DATATYPES = (  # the protocol's tensor datatypes
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
)
_PACK = {"FP64": "<d", "FP32": "<f", "INT64": "<q", "INT32": "<i", "UINT8": "<B", "BOOL": "<?"}
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE")
JSON = b"application/json"
OCTETS = b"application/octet-stream"


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


# -- values --


class _Raw(str):
    """A JSON token written as is: NaN, 1e999, a 400-digit number, a deep nest."""


HOSTILE_TEXT = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\x1b[31m",
    "\x7f",
    "\x85",
    "\u202e",
    "\u200b",
    "\ud800",
    "é",
    "😀",
    "%00",
    "../..",
    "<script>",
    "' OR 1=1",
    "\\",
    '"',
    "\r\n",
    "NaN",
    "-Infinity",
    "1e999",
    "1" * 400,
    "x" * 1001,
    "fraud",
    "FRAUD",
)
HOSTILE_TOKENS = tuple(
    _Raw(t)
    for t in (
        "0",
        "-0",
        "-0.0",
        "1e308",
        "1e309",
        "-1e309",
        "5e-324",
        "1e-400",
        "NaN",
        "Infinity",
        "-Infinity",
        "1" * 400,
        "-" + "9" * 30,
        str(2**63),
        str(-(2**63) - 1),
        str(2**64),
        "true",
        "false",
        "null",
        "[]",
        "{}",
        "[1, [2, [3]]]",
        '{"a": 1}',
        "[" * 5000 + "]" * 5000,
    )
)


def _value(rng: random.Random) -> Any:
    """Something where a value goes: hostile text, a hostile JSON token, or a number."""
    roll = rng.random()
    if roll < 0.35:
        return rng.choice(HOSTILE_TEXT)
    if roll < 0.8:
        return rng.choice(HOSTILE_TOKENS)
    return rng.choice((rng.uniform(-1e6, 1e6), rng.randint(-(2**70), 2**70), rng.random()))


def _dump(value: Any) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_dump(v) for v in value) + "]"
    return json.dumps(value)


def _number(rng: random.Random) -> float:
    return round(rng.uniform(0, 500), rng.randint(0, 6))


def _percent(text: str) -> str:
    """``text`` for a URL: letters and digits as they are, every other byte %-escaped."""
    return "".join(
        c if c.isascii() and c.isalnum() else "".join(f"%{b:02X}" for b in c.encode())
        for c in text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    )


# -- bodies: a valid one, then a few hostile changes --


def _predict_body(rng: random.Random) -> Any:
    body: dict[str, Any] = {
        "model": MODEL,
        "features": {"amount": _number(rng), "n_items": float(rng.randint(1, 8))},
    }
    if rng.random() < 0.3:
        body["entity"] = {"customer_id": rng.choice((rng.randint(1, 10**6), f"c{rng.random()}"))}
    if rng.random() < 0.3:
        body["request_id"] = f"fz-{rng.getrandbits(32):x}"
    for _ in range(_changes(rng)):
        rng.choice(_PREDICT_CHANGES)(rng, body)
    if rng.random() < 0.03:
        return rng.choice(([body], "body", 1, None, [], {"model": {"$ne": 1}}))
    return body


def _changes(rng: random.Random) -> int:
    """How many parts of a body to make hostile: none in a third of them (those are scored)."""
    return rng.choice((0, 0, 1, 1, 2, 3))


def _predict_model(rng: random.Random, body: dict[str, Any]) -> None:
    body["model"] = _value(rng)


def _features(body: dict[str, Any]) -> dict[str, Any]:
    """The body's features, a new dict where a change before made them no dict."""
    if not isinstance(body.get("features"), dict):
        body["features"] = {}
    features: dict[str, Any] = body["features"]
    return features


def _predict_feature(rng: random.Random, body: dict[str, Any]) -> None:
    _features(body)[rng.choice(FEATURES)] = _value(rng)


def _predict_feature_gone(rng: random.Random, body: dict[str, Any]) -> None:
    _features(body).pop(rng.choice(FEATURES), None)


def _predict_junk_features(rng: random.Random, body: dict[str, Any]) -> None:
    n = rng.choice((1, 3, 1001))
    _features(body).update({f"{rng.choice(HOSTILE_TEXT)[:50]}{i}": _value(rng) for i in range(n)})


def _predict_entity(rng: random.Random, body: dict[str, Any]) -> None:
    roll = rng.random()
    if roll < 0.3:
        body["entity"] = {rng.choice(HOSTILE_TEXT)[:120]: rng.randint(0, 9)}
    elif roll < 0.6:
        body["entity"] = {"customer_id": _value(rng)}
    elif roll < 0.8:
        body["entity"] = {f"k{i}": i for i in range(rng.choice((16, 17, 100)))}
    else:
        body["entity"] = _value(rng)


def _predict_request_id(rng: random.Random, body: dict[str, Any]) -> None:
    body["request_id"] = rng.choice((_value(rng), "r" * 129, "r" * 128))


def _predict_gateway_fields(rng: random.Random, body: dict[str, Any]) -> None:
    """Fields the gateway sets itself: a client's value is overwritten or refused."""
    body[rng.choice(("received_ns", "tenant", "pin"))] = rng.choice(
        ("canary", "champion", "other", -1, 2**64, _value(rng))
    )


def _predict_features_shape(rng: random.Random, body: dict[str, Any]) -> None:
    body["features"] = rng.choice(([1.0, 2.0], "amount", None, _Raw("[" * 3000 + "]" * 3000)))


_PREDICT_CHANGES: tuple[Callable[[random.Random, dict[str, Any]], None], ...] = (
    _predict_model,
    _predict_feature,
    _predict_feature,
    _predict_feature_gone,
    _predict_junk_features,
    _predict_entity,
    _predict_request_id,
    _predict_gateway_fields,
    _predict_features_shape,
)


def _infer_body(rng: random.Random) -> dict[str, Any]:
    rows = rng.choice((1, 1, 2, 3, 8))
    inputs: list[dict[str, Any]]
    if rng.random() < 0.15:  # the features as one [N, 2] matrix
        data = [_number(rng) for _ in range(2 * rows)]
        inputs = [{"name": "features", "datatype": "FP64", "shape": [rows, 2], "data": data}]
    else:
        inputs = [
            {
                "name": name,
                "datatype": rng.choice(("FP64", "FP64", "FP32", "INT64")),
                "shape": rng.choice(([rows], [rows], [rows, 1])),
                "data": [float(rng.randint(1, 8)) for _ in range(rows)],
            }
            for name in FEATURES
        ]
        for tensor in inputs:
            if tensor["datatype"] == "INT64":
                tensor["data"] = [int(v) for v in tensor["data"]]
    body: dict[str, Any] = {"inputs": inputs}
    if rng.random() < 0.3:
        body["id"] = f"fz-{rng.getrandbits(32):x}"
    if rng.random() < 0.2:
        body["outputs"] = [{"name": n} for n in rng.sample(("score", "label", "version"), 2)]
    for _ in range(_changes(rng)):
        rng.choice(_INFER_CHANGES)(rng, body)
    return body


def _a_tensor(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    """One of the body's input tensors (a new one where a change before left none)."""
    inputs = body.get("inputs")
    tensors = [t for t in inputs if isinstance(t, dict)] if isinstance(inputs, list) else []
    if not tensors:
        tensors = [{"name": "amount", "datatype": "FP64", "shape": [1], "data": [1.0]}]
        body["inputs"] = tensors
    tensor: dict[str, Any] = rng.choice(tensors)
    return tensor


def _infer_shape(rng: random.Random, body: dict[str, Any]) -> None:
    _a_tensor(rng, body)["shape"] = rng.choice(
        (
            [1] * rng.randint(65, 300),  # past 64 dimensions (issue 29, item 3)
            [1] * 64,
            [2 ** rng.randint(31, 70)],
            [2**40, 2**40, 0],
            [-1],
            [0],
            [],
            ["1"],
            [1.5],
            [3, 3],
            None,
        )
    )


def _infer_datatype(rng: random.Random, body: dict[str, Any]) -> None:
    _a_tensor(rng, body)["datatype"] = rng.choice((*DATATYPES, "fp64", "FP128", "", 7, None))


def _infer_bytes(rng: random.Random, body: dict[str, Any]) -> None:
    """A number input sent as BYTES: text numbers, hostile text, integers past float64."""
    tensor = _a_tensor(rng, body)
    tensor["datatype"] = "BYTES"
    n = math.prod(s for s in tensor.get("shape") or [1] if isinstance(s, int) and 0 < s < 99)
    tensor["data"] = [
        rng.choice(("1.5", "NaN", "inf", "-0", "1" * 400, 10**400, "", None, _value(rng)))
        for _ in range(n)
    ]


def _infer_data(rng: random.Random, body: dict[str, Any]) -> None:
    tensor = _a_tensor(rng, body)
    data = tensor.get("data")
    if isinstance(data, list) and data and rng.random() < 0.7:
        data[rng.randrange(len(data))] = _value(rng)
    else:
        tensor["data"] = rng.choice(([[1.0, 2.0], [3.0]], [], _value(rng), [[[1.0]]]))


def _infer_rows(rng: random.Random, body: dict[str, Any]) -> None:
    """Rows at and past the limit, or none (the 1,024-row case is scored: rare)."""
    n = rng.choice((0, 1025, 1025, 1024))
    body["inputs"] = [
        {"name": name, "datatype": "FP64", "shape": [n], "data": [1.0] * n} for name in FEATURES
    ]


def _infer_names(rng: random.Random, body: dict[str, Any]) -> None:
    inputs = body.get("inputs")
    roll = rng.random()
    if roll < 0.3 and isinstance(inputs, list) and len(inputs) > 1:
        inputs.pop()
    elif roll < 0.5:
        body["inputs"] = [*(inputs if isinstance(inputs, list) else []), _a_tensor(rng, body)]
    else:
        _a_tensor(rng, body)["name"] = rng.choice((*HOSTILE_TEXT, "features", "customer_id", 1))


def _infer_binary_size(rng: random.Random, body: dict[str, Any]) -> None:
    """A binary size in a request without a binary part, or a hostile one."""
    size = rng.choice((0, 8, 2**63, -1, "8", 1.5, None))
    _a_tensor(rng, body)["parameters"] = {"binary_data_size": size}


def _infer_parameters(rng: random.Random, body: dict[str, Any]) -> None:
    body["parameters"] = rng.choice(
        ({"binary_data_output": True}, {"binary_data_output": "yes"}, {"x": _value(rng)}, [], 1)
    )


def _infer_outputs(rng: random.Random, body: dict[str, Any]) -> None:
    body["outputs"] = rng.choice(
        (
            [{"name": "label", "parameters": {"binary_data": True}}, {"name": "score"}],
            [{"name": n} for n in ("score", "label", "version", "arm", "request_id")],
            [{"name": "probabilities"}],
            [{"name": _value(rng)}],
            [{"name": "score"}] * 50,
            "score",
            [1, 2],
            [],
        )
    )


def _infer_id(rng: random.Random, body: dict[str, Any]) -> None:
    body["id"] = rng.choice((_value(rng), "i" * 500, 1, ["x"]))


def _infer_structure(rng: random.Random, body: dict[str, Any]) -> None:
    roll = rng.random()
    if roll < 0.5:
        body["inputs"] = rng.choice(([], {}, "amount", None, [None], [[]]))
    else:
        body.pop("inputs", None)


_INFER_CHANGES: tuple[Callable[[random.Random, dict[str, Any]], None], ...] = (
    _infer_shape,
    _infer_datatype,
    _infer_bytes,
    _infer_data,
    _infer_data,
    _infer_rows,
    _infer_names,
    _infer_binary_size,
    _infer_parameters,
    _infer_outputs,
    _infer_id,
    _infer_structure,
)


def _binary_body(rng: random.Random) -> tuple[bytes, bytes]:
    """(body, the Inference-Header-Content-Length value) of a binary infer request."""
    rows = rng.choice((1, 1, 2, 3, 8))
    inputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name in FEATURES:
        values = [float(rng.randint(1, 8)) for _ in range(rows)]
        dtype = rng.choice(("FP64", "FP64", "FP32", "INT64", "INT32", "UINT8", "BYTES"))
        if dtype == "BYTES":
            blob = b"".join(_bytes_element(str(v).encode()) for v in values)
        else:
            blob = b"".join(struct.pack(_PACK[dtype], _cast(dtype, v)) for v in values)
        tensor: dict[str, Any] = {"name": name, "datatype": dtype, "shape": [rows]}
        if rng.random() < 0.85:
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:  # JSON data beside binary ones
            tensor["data"] = values
        inputs.append(tensor)
    head: dict[str, Any] = {"inputs": inputs}
    if rng.random() < 0.3:
        head["parameters"] = {"binary_data_output": True}
    changes = _changes(rng)
    for _ in range(changes):
        rng.choice(_BINARY_CHANGES)(rng, head, blobs)
    text = _dump(head).encode()
    body = text + b"".join(blobs)
    length = str(len(text)).encode()
    if changes and rng.random() < 0.35:
        length = rng.choice(
            (
                str(len(text) + rng.choice((-1, 1, -len(text), len(body)))).encode(),
                b"\xb2",  # "²" in latin-1: str.isdigit() is true, int() fails
                b"\xb9",
                b"\xb3",
                b"-1",
                b"+12",
                b"1e3",
                b"0x1f",
                b"9" * 18,
                b"9" * 19,
                b"",
            )
        )
    if changes and rng.random() < 0.1:
        body += rng.choice((b"\x00" * 3, b"trailing", b"\xff" * 9))
    return body, length


def _bytes_element(raw: bytes) -> bytes:
    return struct.pack("<I", len(raw)) + raw


def _cast(dtype: str, v: float) -> float | int | bool:
    return v if dtype.startswith("FP") else bool(v) if dtype == "BOOL" else int(v)


def _binary_size(rng: random.Random, head: dict[str, Any], blobs: list[bytes]) -> None:
    tensor = rng.choice(head["inputs"])
    tensor["parameters"] = {"binary_data_size": rng.choice((0, 7, 9999, 2**62, -1, "8", None))}


def _binary_dtype(rng: random.Random, head: dict[str, Any], blobs: list[bytes]) -> None:
    """A datatype the bytes are not: FP64 over 7 bytes, BOOL over 0xff, BYTES over floats."""
    rng.choice(head["inputs"])["datatype"] = rng.choice(DATATYPES)


def _binary_blob(rng: random.Random, head: dict[str, Any], blobs: list[bytes]) -> None:
    """Bytes that are no tensor: NaN and infinity bits, lengths past the end, bad UTF-8."""
    if not blobs:
        return
    i = rng.randrange(len(blobs))
    blobs[i] = rng.choice(
        (
            struct.pack("<d", math.nan) * (len(blobs[i]) // 8 or 1),
            struct.pack("<d", math.inf) * (len(blobs[i]) // 8 or 1),
            struct.pack("<I", 1000) + b"12",
            _bytes_element(b"\xff\xfe"),
            _bytes_element(b"1" * 400),
            b"\x07" * len(blobs[i]),
            b"",
        )
    )


def _binary_shape(rng: random.Random, head: dict[str, Any], blobs: list[bytes]) -> None:
    _infer_shape(rng, head)


def _binary_blob_gone(rng: random.Random, head: dict[str, Any], blobs: list[bytes]) -> None:
    if blobs:
        blobs.pop()


_BINARY_CHANGES: tuple[Callable[[random.Random, dict[str, Any], list[bytes]], None], ...] = (
    _binary_size,
    _binary_dtype,
    _binary_blob,
    _binary_blob,
    _binary_shape,
    _binary_blob_gone,
)


def _bytes_of(rng: random.Random, body: Any) -> bytes:
    """A JSON body's bytes, now and then broken on the way."""
    raw = _dump(body).encode("utf-8", "surrogatepass")
    roll = rng.random()
    if roll < 0.9:
        return raw
    return rng.choice(
        (
            raw[: rng.randrange(len(raw) or 1)],  # cut short
            raw + b"}{",
            b"\xef\xbb\xbf" + raw,  # a byte order mark
            raw.replace(b'"', b'"\xff', 1),
            raw.decode("utf-8", "replace").encode("utf-16"),
            b'{"model": 1, ' + raw[1:] if raw.startswith(b"{") else raw,  # a key twice
            bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64))),
            b"x" * 70_000,  # over max_body_bytes
        )
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
            f"{_percent(rng.choice(HOSTILE_TEXT)[:20])}={_percent(str(_value(rng))[:40])}"
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
        body, content_type = _bytes_of(rng, _predict_body(rng)), JSON
    elif endpoint.body == "infer":
        body, content_type = _bytes_of(rng, _infer_body(rng)), JSON
    elif endpoint.body == "binary":
        body, length = _binary_body(rng)
        content_type = OCTETS
    elif rng.random() < 0.1:  # a body where none is read
        body = _bytes_of(rng, _value(rng))
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
        content = raw or (None if body is None else _dump(body).encode())
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
        head = _dump({"inputs": tensors}).encode()
        blobs = struct.pack("<d", 2.0) * 2
        octets = (b"content-type", OCTETS)
        length = str(len(head)).encode()
        header = b"inference-header-content-length"
        cases = [
            case(None, 200, octets, (header, length), raw=head + blobs),
            case(None, 400, octets, (header, b"\xb2"), raw=head + blobs),  # "²"
        ]
        tensors[0] = {**tensors[0], "datatype": "BYTES", "parameters": {"binary_data_size": 404}}
        head = _dump({"inputs": tensors}).encode()
        raw = head + _bytes_element(b"1" * 400) + blobs[:8]
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


# -- sending --


@dataclass(frozen=True)
class Answer:
    """What came back for one case: ``status`` 0 where nothing did (``error`` says why)."""

    case: HostileRequest
    status: int
    headers: dict[bytes, bytes]
    body: bytes
    error: str = ""


async def send_all(url: str, cases: list[HostileRequest], connections: int) -> list[Answer]:
    """Send every case, ``connections`` at a time, each over a kept-alive connection while the
    server keeps it; the answers in the order of the cases.

    A request goes out as it is (h11 frames it; nothing normalises its target) and in one
    write, head and body together: the server refuses some before reading their body (401,
    413, 415) and closes, and a body arriving after that close is answered with a reset,
    which can take the refusal with it.
    """
    host, _, port = url.partition("://")[2].rpartition(":")
    answers: list[Answer | None] = [None] * len(cases)
    pending = iter(enumerate(cases))  # shared: each sender takes the next case

    async def sender() -> None:
        link: _Link | None = None
        for i, case in pending:
            link = link or await _Link.open(host, int(port))
            answers[i] = await link.exchange(case)
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
