"""Bodies for the hostile requests (:mod:`tests.e2e.hostile_requests`): a valid one, then a few
parts made hostile, so most get past the first check to the code behind it.

``/predict``'s JSON, the Open Inference Protocol's infer request as JSON and as
Triton's binary tensor extension (a JSON head, then the tensors' bytes), and the
values that go in them: text with control, bidirectional and zero-width
characters, JSON tokens no Python float holds (``NaN``, ``1e999``, a 400-digit
integer, 5,000 nested lists). Each takes a :class:`random.Random`: the same
seed, the same bodies.
"""

from __future__ import annotations

import json
import math
import random
import struct
from collections.abc import Callable
from typing import Any, get_args

from mlpipe.serving._oip_schema import Datatype

MODEL = "fraud"
FEATURES = ("amount", "n_items")
DATATYPES = get_args(Datatype)  # the protocol's tensor datatypes, as serving declares them
_PACK = {"FP64": "<d", "FP32": "<f", "INT64": "<q", "INT32": "<i", "UINT8": "<B", "BOOL": "<?"}
JSON = b"application/json"
OCTETS = b"application/octet-stream"


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


def hostile_value(rng: random.Random) -> Any:
    """Something where a value goes: hostile text, a hostile JSON token, or a number."""
    roll = rng.random()
    if roll < 0.35:
        return rng.choice(HOSTILE_TEXT)
    if roll < 0.8:
        return rng.choice(HOSTILE_TOKENS)
    return rng.choice((rng.uniform(-1e6, 1e6), rng.randint(-(2**70), 2**70), rng.random()))


def dump(value: Any) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(dump(v) for v in value) + "]"
    return json.dumps(value)


def _number(rng: random.Random) -> float:
    return round(rng.uniform(0, 500), rng.randint(0, 6))


# -- bodies: a valid one, then a few hostile changes --


def predict_body(rng: random.Random) -> Any:
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
    body["model"] = hostile_value(rng)


def _features(body: dict[str, Any]) -> dict[str, Any]:
    """The body's features, a new dict where a change before made them no dict."""
    if not isinstance(body.get("features"), dict):
        body["features"] = {}
    features: dict[str, Any] = body["features"]
    return features


def _predict_feature(rng: random.Random, body: dict[str, Any]) -> None:
    _features(body)[rng.choice(FEATURES)] = hostile_value(rng)


def _predict_feature_gone(rng: random.Random, body: dict[str, Any]) -> None:
    _features(body).pop(rng.choice(FEATURES), None)


def _predict_junk_features(rng: random.Random, body: dict[str, Any]) -> None:
    n = rng.choice((1, 3, 1001))
    _features(body).update(
        {f"{rng.choice(HOSTILE_TEXT)[:50]}{i}": hostile_value(rng) for i in range(n)}
    )


def _predict_entity(rng: random.Random, body: dict[str, Any]) -> None:
    roll = rng.random()
    if roll < 0.3:
        body["entity"] = {rng.choice(HOSTILE_TEXT)[:120]: rng.randint(0, 9)}
    elif roll < 0.6:
        body["entity"] = {"customer_id": hostile_value(rng)}
    elif roll < 0.8:
        body["entity"] = {f"k{i}": i for i in range(rng.choice((16, 17, 100)))}
    else:
        body["entity"] = hostile_value(rng)


def _predict_request_id(rng: random.Random, body: dict[str, Any]) -> None:
    body["request_id"] = rng.choice((hostile_value(rng), "r" * 129, "r" * 128))


def _predict_gateway_fields(rng: random.Random, body: dict[str, Any]) -> None:
    """Fields the gateway sets itself: a client's value is overwritten or refused."""
    body[rng.choice(("received_ns", "tenant", "pin"))] = rng.choice(
        ("canary", "champion", "other", -1, 2**64, hostile_value(rng))
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


def infer_body(rng: random.Random) -> dict[str, Any]:
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
        rng.choice(("1.5", "NaN", "inf", "-0", "1" * 400, 10**400, "", None, hostile_value(rng)))
        for _ in range(n)
    ]


def _infer_data(rng: random.Random, body: dict[str, Any]) -> None:
    tensor = _a_tensor(rng, body)
    data = tensor.get("data")
    if isinstance(data, list) and data and rng.random() < 0.7:
        data[rng.randrange(len(data))] = hostile_value(rng)
    else:
        tensor["data"] = rng.choice(([[1.0, 2.0], [3.0]], [], hostile_value(rng), [[[1.0]]]))


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
        (
            {"binary_data_output": True},
            {"binary_data_output": "yes"},
            {"x": hostile_value(rng)},
            [],
            1,
        )
    )


def _infer_outputs(rng: random.Random, body: dict[str, Any]) -> None:
    body["outputs"] = rng.choice(
        (
            [{"name": "label", "parameters": {"binary_data": True}}, {"name": "score"}],
            [{"name": n} for n in ("score", "label", "version", "arm", "request_id")],
            [{"name": "probabilities"}],
            [{"name": hostile_value(rng)}],
            [{"name": "score"}] * 50,
            "score",
            [1, 2],
            [],
        )
    )


def _infer_id(rng: random.Random, body: dict[str, Any]) -> None:
    body["id"] = rng.choice((hostile_value(rng), "i" * 500, 1, ["x"]))


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


def binary_body(rng: random.Random) -> tuple[bytes, bytes]:
    """(body, the Inference-Header-Content-Length value) of a binary infer request."""
    rows = rng.choice((1, 1, 2, 3, 8))
    inputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name in FEATURES:
        values = [float(rng.randint(1, 8)) for _ in range(rows)]
        dtype = rng.choice(("FP64", "FP64", "FP32", "INT64", "INT32", "UINT8", "BYTES"))
        if dtype == "BYTES":
            blob = b"".join(bytes_element(str(v).encode()) for v in values)
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
    text = dump(head).encode()
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


def bytes_element(raw: bytes) -> bytes:
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
            bytes_element(b"\xff\xfe"),
            bytes_element(b"1" * 400),
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


def encoded(rng: random.Random, body: Any) -> bytes:
    """A JSON body's bytes, now and then broken on the way."""
    raw = dump(body).encode("utf-8", "surrogatepass")
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
