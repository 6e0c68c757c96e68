"""The Open Inference Protocol's tensors: infer requests into ``/predict`` rows, answers back.

:func:`decode_request` reads the JSON part of a request (validated against
:class:`~mlpipe.serving._oip_schema.InferenceRequest`) and each input's data,
as JSON or in Triton's binary tensor extension; :func:`request_rows` turns the
tensors into one ``/predict`` body per row, by the model's inputs
(:func:`model_metadata`); :func:`encode_response` puts the answers back
together as output tensors, binary where the request asked. Everything a
request can get wrong raises a :class:`ProtocolError`, whose class gives the status to
answer (:data:`~mlpipe.serving._error_bodies.HTTP_STATUS`).

The outputs follow the task of the deployed version (:func:`outputs_of`):
binary ``score`` (FP64) and ``label`` (INT64), as ever; multiclass
``probabilities`` (FP64, ``[N, K]``, columns in the version's class order) and
``label`` (the class: INT64 for integer classes, BYTES for named ones);
regression ``prediction`` (FP64). ``version``, ``arm`` and ``request_id``
(BYTES) can be asked for with any task (they name who answered); the metadata
lists them after the task's outputs, as it always has.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
from pydantic import ValidationError

from mlpipe.registry import OIP_TYPES
from mlpipe.serving._error_bodies import InvalidRequest, MalformedRequest, ServerFailure
from mlpipe.serving._oip_schema import InferenceRequest
from mlpipe.serving._schema import control_character, describe_validation_error
from mlpipe.tasks import TaskSpec

MATRIX_INPUT = "features"
# Who answered each row: asked for by name, with any task.
ANSWERED_BY = {"version": "BYTES", "arm": "BYTES", "request_id": "BYTES"}
# A binary model's outputs (a version that names no task is one).
OUTPUTS = {"score": "FP64", "label": "INT64", **ANSWERED_BY}
_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


class ProtocolError(MalformedRequest):
    """A request this layer refuses before anything reaches ``/predict`` (400)."""


class InvalidTensor(InvalidRequest, ProtocolError):
    """A tensor's values that no row of ``/predict`` would take either (422)."""


class UnsharedOutputs(ServerFailure, ProtocolError):
    """Outputs the deployed versions do not share, so the server cannot answer them (500)."""


def _inputs_of(served: Any) -> tuple[list[str], list[str]]:
    """(request-time features in the champion's order, entity join keys) over the primaries."""
    features: list[str] = []
    keys: list[str] = []
    for plan in served.primary_versions():
        features += [f for f in plan.model.features if f in plan.request_features]
        if plan.spec is not None:
            keys += list(plan.spec.join_keys)
    return list(dict.fromkeys(features)), list(dict.fromkeys(keys))


def _input_types(served: Any) -> dict[str, str]:
    """Each request-time feature's OIP datatype, from the primaries' input schemas.

    A string input is BYTES, a number FP64, an integer INT64, a boolean BOOL; an
    input no schema types (a version registered before schemas) is FP64.
    """
    types: dict[str, str] = {}
    for plan in served.primary_versions():
        schema = getattr(plan.model, "input_schema", None)
        for column in schema.columns if schema is not None else ():
            types.setdefault(column.name, OIP_TYPES[column.kind])
    return types


def task_of(served: Any) -> TaskSpec:
    """The served model's task: its champion's (binary for one that names none)."""
    return getattr(served, "task", None) or TaskSpec()


def outputs_of(task: TaskSpec) -> dict[str, str]:
    """Output name -> datatype for a model of ``task``: its predictions, then who answered."""
    if task.task == "binary":
        return OUTPUTS
    if task.task == "regression":
        return {"prediction": "FP64", **ANSWERED_BY}
    named = any(isinstance(c, str) for c in task.classes)
    return {"probabilities": "FP64", "label": "BYTES" if named else "INT64", **ANSWERED_BY}


def model_metadata(served: Any) -> dict[str, Any]:
    """``GET /v2/models/{name}``: versions answering now, the inputs they need, the outputs
    of their task (the ``parameters`` of a model that is not binary add its task, and a
    multiclass one's classes in column order)."""
    features, keys = _inputs_of(served)
    types = _input_types(served)
    task = task_of(served)
    outputs = [
        {"name": n, "datatype": t, "shape": _shape(task, n)} for n, t in outputs_of(task).items()
    ]
    parameters: dict[str, Any] = {"generation": served.generation}
    if task.task != "binary":
        parameters["task"] = task.task
    if task.task == "multiclass":
        parameters["classes"] = list(task.classes)
    return {
        "name": served.name,
        "versions": [plan.version for plan in served.primary_versions()],
        "platform": "mlpipe",
        "inputs": [{"name": k, "datatype": "INT64", "shape": [-1]} for k in keys]
        + [{"name": f, "datatype": types.get(f, "FP64"), "shape": [-1]} for f in features],
        "outputs": outputs,
        "parameters": parameters,
    }


def _shape(task: TaskSpec, output: str) -> list[int]:
    return [-1, len(task.classes)] if output == "probabilities" else [-1]


MAX_DIMENSIONS = 64  # numpy's limit on an array's dimensions


def header_length(value: str | None) -> int | None:
    """``Inference-Header-Content-Length`` as a byte count; None where absent or empty."""
    if not value:
        return None
    # str.isdigit() is true of "²" and other digits int() refuses; a count has ASCII digits.
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise ProtocolError("Inference-Header-Content-Length: not a byte count")
    return int(value)


def decode_request(body: bytes, header_len: int | None) -> dict[str, Any]:
    """The JSON part of an infer request, each input's ``data`` as a flat numpy array."""
    head, binary = (body, b"") if header_len is None else (body[:header_len], body[header_len:])
    try:
        request = InferenceRequest.model_validate_json(head).model_dump()
    except ValidationError as exc:
        _, message = describe_validation_error(exc)
        if exc.errors()[0]["type"] == "json_invalid":
            message = f"malformed JSON: {message}"
        raise ProtocolError(message) from exc
    char = control_character(request["id"] or "")
    if char is not None:  # the id names the logged rows (id-0, id-1, ...)
        raise ProtocolError(f"id: control character {char} not allowed")
    offset = 0
    for tensor in request["inputs"]:
        name, dtype, shape = tensor["name"], tensor["datatype"], tensor["shape"]
        size = (tensor["parameters"] or {}).get("binary_data_size")
        if size is not None:
            chunk = binary[offset : offset + size]
            if len(chunk) != size:
                raise ProtocolError(f"inputs.{name}: binary data shorter than binary_data_size")
            offset += size
            values = _from_binary(chunk, dtype, name)
        elif tensor["data"] is not None:
            values = _from_json(tensor["data"], dtype, name)
        else:
            raise ProtocolError(f"inputs.{name}: neither data nor binary_data_size")
        tensor["values"] = _shaped(values, shape, name)
    return request


def _shaped(values: np.ndarray, shape: list[int], name: str) -> np.ndarray:
    if len(shape) > MAX_DIMENSIONS:
        raise ProtocolError(
            f"inputs.{name}: shape has {len(shape)} dimensions, at most {MAX_DIMENSIONS}"
        )
    if values.size != math.prod(shape):
        raise ProtocolError(f"inputs.{name}: {values.size} values for shape {shape}")
    try:
        return values.reshape(shape)
    except (ValueError, OverflowError) as exc:  # e.g. a dimension past what numpy indexes
        raise ProtocolError(f"inputs.{name}: shape {shape} cannot hold the data") from exc


def _from_binary(chunk: bytes, dtype: str, name: str) -> np.ndarray:
    try:
        if dtype != "BYTES":
            return np.frombuffer(chunk, dtype=np.dtype(_NUMPY[dtype]).newbyteorder("<"))
        items: list[str] = []
        pos = 0
        while pos < len(chunk):
            (n,) = struct.unpack_from("<I", chunk, pos)
            if pos + 4 + n > len(chunk):
                raise ValueError("an element runs past the end of the data")
            items.append(chunk[pos + 4 : pos + 4 + n].decode())
            pos += 4 + n
    except (ValueError, struct.error) as exc:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"inputs.{name}: binary data is not {dtype}: {exc}") from exc
    return np.array(items, dtype=object)


# JSON values numpy would silently turn into numbers (null → NaN, true → 1.0, "NaN" → NaN):
# data holding one is kept as Python values, read value by value (_feature_column).
_AS_VALUES = frozenset({type(None), bool, str, bytes})


def _from_json(data: Any, dtype: str, name: str) -> np.ndarray:
    try:
        values = np.array(data, dtype=object).ravel()
        if dtype == "BYTES":
            return values
        kinds = set(map(type, values))
        if dtype == "BOOL":
            kinds.discard(bool)
        if kinds & _AS_VALUES and list not in kinds:  # a list: ragged, refused below
            return values
        return np.asarray(data, dtype=_NUMPY[dtype]).ravel()
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"inputs.{name}: data is not {dtype}: {exc}") from exc


def request_rows(served: Any, request: dict[str, Any], max_rows: int) -> list[dict[str, Any]]:
    """One ``/predict`` body per row of the request's tensors."""
    features, keys = _inputs_of(served)
    columns: dict[str, Any] = {}
    for tensor in request["inputs"]:
        name, values = tensor["name"], tensor["values"]
        if name == MATRIX_INPUT and values.ndim == 2 and MATRIX_INPUT not in features:
            if values.shape[1] != len(features):
                raise ProtocolError(
                    f"inputs.{name}: {values.shape[1]} columns, the model takes "
                    f"{len(features)} ({', '.join(features)})"
                )
            columns.update({f: values[:, j] for j, f in enumerate(features)})
        elif name in features or name in keys:
            if values.ndim > 2 or (values.ndim == 2 and values.shape[1] != 1):
                raise ProtocolError(f"inputs.{name}: shape must be [N] or [N, 1]")
            columns[name] = values.reshape(-1)
        else:
            raise ProtocolError(
                f"inputs.{name}: not an input of {served.name} "
                f"(inputs: {', '.join([*keys, *features]) or 'none'})"
            )
    types = _input_types(served)
    for name in features:
        if name in columns:
            columns[name] = _feature_column(name, columns[name], types.get(name, "FP64"))
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ProtocolError("inputs: every tensor must have the same number of rows")
    n = lengths.pop() if lengths else 0
    if not 0 < n <= max_rows:
        raise ProtocolError(f"inputs: between 1 and {max_rows} rows per request, got {n}")
    request_id = request.get("id")
    rows = []
    for i in range(n):
        row: dict[str, Any] = {
            "model": served.name,
            "entity": {k: _entity_value(k, columns[k][i]) for k in keys if k in columns},
            "features": {f: columns[f][i] for f in features if f in columns},
        }
        if isinstance(request_id, str) and request_id:
            row["request_id"] = request_id if n == 1 else f"{request_id}-{i}"
        rows.append(row)
    return rows


_KIND_OF = {"FP64": "a number", "INT64": "an integer", "BOOL": "a boolean", "BYTES": "a string"}


def _feature_column(name: str, values: np.ndarray, datatype: str) -> list[Any]:
    """A feature's values as Python values: strings for a BYTES input, else finite floats;
    None for a missing value (JSON null, or a NaN number), which the pipeline's check
    takes only for an input the model scores a missing value for (else 422)."""
    if datatype == "BYTES":
        return [_text(name, v) for v in values]
    if values.dtype == object:
        return [_number(name, v, datatype) for v in values]
    if values.dtype == np.bool_ and datatype != "BOOL":
        raise InvalidTensor(f"inputs.{name}: {_input_kind(datatype)}, not BOOL")
    numbers = values.astype(np.float64)
    if np.isinf(numbers).any():
        raise InvalidTensor(f"inputs.{name}: values must be finite numbers")
    return [None if v != v else v for v in numbers.tolist()]  # only NaN differs from itself


def _input_kind(datatype: str) -> str:
    return f"{_KIND_OF.get(datatype, 'a number')} input ({datatype})"


def _number(name: str, value: Any, datatype: str) -> float | None:
    """One value of a numeric input given as a JSON value (or BYTES): None when missing."""
    if value is None:
        return None
    if isinstance(value, bool | np.bool_) and datatype != "BOOL":
        got = str(bool(value)).lower()
        raise InvalidTensor(f"inputs.{name}: {_input_kind(datatype)}, got a boolean ({got})")
    try:
        number = float(value)
    except OverflowError as exc:  # an integer past float64's range, sent as BYTES
        raise InvalidTensor(f"inputs.{name}: values must be finite numbers") from exc
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"inputs.{name}: values must be numbers") from exc
    if isinstance(value, str | bytes) and not math.isfinite(number):  # "NaN" is no gap
        raise InvalidTensor(f"inputs.{name}: values must be finite numbers")
    if math.isinf(number):
        raise InvalidTensor(f"inputs.{name}: values must be finite numbers")
    return None if number != number else number


def _text(name: str, value: Any) -> str | None:
    """One value of a string input: text, or None for JSON null (a missing value)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value != value:  # NaN: missing, as in a number input
        return None
    if not isinstance(value, bytes):
        raise InvalidTensor(f"inputs.{name}: a string input (BYTES), got {value!r}")
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"inputs.{name}: BYTES must be UTF-8 text") from exc


def _entity_value(name: str, value: Any) -> int | str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, str):
        return value
    try:
        if isinstance(value, float | np.floating) and not float(value).is_integer():
            raise ValueError(f"{value} is not a whole number")
        return int(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"inputs.{name}: a join key is an integer or a string") from exc


def encode_response(
    model: str,
    request: dict[str, Any],
    answers: list[dict[str, Any]],
    outputs: dict[str, str] = OUTPUTS,
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """(body, headers) of the infer response; binary tensors where the request asked.

    ``outputs`` are the model's (:func:`outputs_of`). Versions that do not share them
    are refused before scoring (:func:`check_shared`); should the answers still
    disagree (a new generation of another task swapped in meanwhile), it is a
    UnsharedOutputs (500).
    """
    wanted = request.get("outputs")
    names = requested_outputs(request, outputs)
    binary_default = bool((request.get("parameters") or {}).get("binary_data_output", False))
    binary_of = dict.fromkeys(names, binary_default)
    for o in wanted or []:
        binary_of[o["name"]] = bool((o.get("parameters") or {}).get("binary_data", False))
    versions = sorted({str(a["version"]) for a in answers})
    tensors: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name in names:
        dtype = outputs[name]
        values, shape = _tensor(name, answers)
        tensor: dict[str, Any] = {"name": name, "datatype": dtype, "shape": shape}
        if binary_of[name]:
            blob = _to_binary(values, dtype)
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            tensor["data"] = values
        tensors.append(tensor)
    response: dict[str, Any] = {
        "model_name": model,
        "model_version": ",".join(versions),
        "outputs": tensors,
        "parameters": {"generation": answers[0]["generation"]},
    }
    if request.get("id"):
        response["id"] = request["id"]
    head = json.dumps(response).encode()
    if not blobs:
        return head, [(b"content-type", b"application/json")]
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"inference-header-content-length", str(len(head)).encode()),
    ]
    return head + b"".join(blobs), headers


def _tensor(name: str, answers: list[dict[str, Any]]) -> tuple[list[Any], list[int]]:
    """(flat row-major values, shape) of output ``name`` over the answers."""
    try:
        if name == "probabilities":
            rows = [list(a[name].values()) for a in answers]
            if len({len(row) for row in rows}) > 1:
                raise KeyError(name)
            return [p for row in rows for p in row], [len(rows), len(rows[0])]
        return [a[name] for a in answers], [len(answers)]
    except KeyError as exc:
        raise UnsharedOutputs(
            f"output {name!r}: the deployed versions predict different tasks or classes; "
            "ask for the outputs they share"
        ) from exc


def check_shared(served: Any, names: list[str]) -> None:
    """Refuse (500) model outputs that the answering versions do not share: a canary of
    another task or other classes than its champion's. Checked before anything is scored."""
    tasks = {
        plan.version: getattr(plan, "task", None) or TaskSpec()
        for plan in served.primary_versions()
    }
    if len({(t.task, t.classes) for t in tasks.values()}) < 2:
        return
    asked = [n for n in names if n not in ANSWERED_BY]
    if asked:
        each = ", ".join(f"{v}: {t.describe()}" for v, t in tasks.items())
        raise UnsharedOutputs(
            f"outputs {asked}: the deployed versions of {served.name} predict differently "
            f"({each}); ask only for {', '.join(ANSWERED_BY)}, or use /predict"
        )


def requested_outputs(request: dict[str, Any], outputs: dict[str, str] = OUTPUTS) -> list[str]:
    """The output names the request asks for (all of ``outputs`` when it names none);
    raises on a name that is not one of them."""
    wanted = request.get("outputs")
    if not wanted:
        return list(outputs)
    if not isinstance(wanted, list) or not all(isinstance(o, dict) for o in wanted):
        raise ProtocolError('outputs: a list of {"name": ...} objects')
    names = [o.get("name") for o in wanted]
    unknown = [n for n in names if n not in outputs]
    if unknown:
        raise ProtocolError(f"outputs: unknown output(s) {unknown}; known: {', '.join(outputs)}")
    return names


def _to_binary(values: list[Any], dtype: str) -> bytes:
    if dtype != "BYTES":
        return np.asarray(values, dtype=np.dtype(_NUMPY[dtype]).newbyteorder("<")).tobytes()
    out = bytearray()
    for v in values:
        raw = str(v).encode()
        out += struct.pack("<I", len(raw)) + raw
    return bytes(out)


__all__ = [
    "ANSWERED_BY",
    "MATRIX_INPUT",
    "MAX_DIMENSIONS",
    "OUTPUTS",
    "InvalidTensor",
    "ProtocolError",
    "UnsharedOutputs",
    "check_shared",
    "decode_request",
    "encode_response",
    "header_length",
    "model_metadata",
    "outputs_of",
    "request_rows",
    "requested_outputs",
    "task_of",
]
