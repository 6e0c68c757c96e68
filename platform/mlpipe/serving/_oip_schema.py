"""The Open Inference Protocol's messages (pydantic) and its routes in ``/docs.json``.

:mod:`mlpipe.serving._oip` validates an infer request against
:class:`InferenceRequest` and answers with the shapes below;
:func:`openapi` describes every ``/v2`` route from the same models, and the
gateway merges that into BentoML's OpenAPI document.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt
from pydantic.json_schema import models_json_schema

from mlpipe.serving._schema import NO_CONTROL_CHARACTERS

PREFIX = "/v2"


Datatype = Literal[
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
]
# Every output any task has (which ones a model has: its metadata; mlpipe.serving._oip_codec).
OutputName = Literal[
    "score", "label", "probabilities", "prediction", "version", "arm", "request_id"
]


class _Message(BaseModel):
    # The protocol lets clients add their own parameters (tritonclient sends some).
    model_config = ConfigDict(extra="allow")


class TensorParameters(_Message):
    binary_data_size: NonNegativeInt | None = None


class RequestInput(_Message):
    """One input tensor: ``data`` (row-major, flat or nested) or binary bytes after the JSON."""

    name: Annotated[str, Field(min_length=1)]
    shape: list[NonNegativeInt]
    datatype: Datatype
    parameters: TensorParameters | None = None
    data: list[Any] | None = None


class OutputParameters(_Message):
    binary_data: bool | None = None


class RequestOutput(_Message):
    name: OutputName
    parameters: OutputParameters | None = None


class RequestParameters(_Message):
    binary_data_output: bool | None = None


class InferenceRequest(_Message):
    """``POST /v2/models/{name}/infer``: the JSON part of the request.

    ``id`` names the request's logged rows (``id-0``, ``id-1``, ...): a control
    character in it is refused (400), as in ``/predict``'s ``request_id``.
    """

    id: Annotated[str, Field(json_schema_extra={"pattern": NO_CONTROL_CHARACTERS})] | None = None
    parameters: RequestParameters | None = None
    inputs: Annotated[list[RequestInput], Field(min_length=1)]
    outputs: list[RequestOutput] | None = None


class TensorMetadata(BaseModel):
    name: str
    datatype: Datatype
    shape: list[int]


class ResponseOutput(BaseModel):
    name: OutputName
    datatype: Datatype
    shape: list[int]
    data: list[Any] | None = None
    parameters: dict[str, Any] | None = None


class InferenceResponse(BaseModel):
    """The infer answer: one row per request row, the versions that answered."""

    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[ResponseOutput]
    parameters: dict[str, Any]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]
    parameters: dict[str, Any]


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class ServerLive(BaseModel):
    live: bool


class ServerReady(BaseModel):
    ready: bool


class ModelReady(BaseModel):
    name: str
    ready: bool


_SCHEMAS = "#/components/schemas/{model}"
_TAG = "Open Inference Protocol"
_OPEN_ERRORS = {
    "401": "Missing or invalid API key",
    "429": "Tenant over its rate limit (Retry-After)",
}
_MODEL_ERRORS = {
    **_OPEN_ERRORS,
    "404": "Model not deployed here",
    "503": "Not ready: models still loading",
}
_INFER_ERRORS = {
    **_MODEL_ERRORS,
    "400": "Malformed JSON, or tensors that do not fit the model's inputs",
    "408": "Body not received within serving.request_timeout_s",
    "413": "Body over serving.max_body_bytes",
    "415": "Body not JSON (nor Triton's binary tensor extension)",
    "422": "A row /predict refuses (an input missing, not finite, or rejected by the model)",
    "500": "The model failed on a row",
}


def openapi(error_schema: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(paths, component schemas) describing every route above, for ``/docs.json``.

    Errors refer to ``#/components/schemas/{error_schema}``, which the caller defines.
    """
    models: list[type[BaseModel]] = [InferenceRequest, InferenceResponse, ModelMetadata]
    models += [ServerMetadata, ServerLive, ServerReady, ModelReady]
    named, top = models_json_schema([(m, "validation") for m in models], ref_template=_SCHEMAS)
    schemas = dict(top.get("$defs", {}))

    def content(model: type[BaseModel]) -> dict[str, Any]:
        return {"application/json": {"schema": named[(model, "validation")]}}

    def operation(
        summary: str, ok: type[BaseModel], errors: dict[str, str], **extra: Any
    ) -> dict[str, Any]:
        err = {"application/json": {"schema": {"$ref": _SCHEMAS.format(model=error_schema)}}}
        responses: dict[str, Any] = {"200": {"description": summary, "content": content(ok)}}
        responses |= {code: {"description": text, "content": err} for code, text in errors.items()}
        return {
            "tags": ["Open Inference Protocol"],
            "summary": summary,
            **extra,
            "responses": responses,
        }

    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    ready = operation("Server readiness", ServerReady, _OPEN_ERRORS)
    ready["responses"]["503"] = {"description": "Not ready", "content": content(ServerReady)}
    infer = operation(
        "Score each row of the input tensors as one /predict request",
        InferenceResponse,
        _INFER_ERRORS,
        parameters=[name],
        requestBody={"required": True, "content": content(InferenceRequest)},
    )
    infer["responses"]["200"]["content"]["application/octet-stream"] = {
        "schema": {"type": "string", "format": "binary"}
    }
    m = f"{PREFIX}/models/{{name}}"
    paths = {
        PREFIX: {"get": operation("Server metadata", ServerMetadata, _OPEN_ERRORS)},
        f"{PREFIX}/health/live": {"get": operation("Server liveness", ServerLive, _OPEN_ERRORS)},
        f"{PREFIX}/health/ready": {"get": ready},
        m: {"get": operation("Model metadata", ModelMetadata, _MODEL_ERRORS, parameters=[name])},
        f"{m}/ready": {
            "get": operation("Model readiness", ModelReady, _MODEL_ERRORS, parameters=[name])
        },
        f"{m}/infer": {"post": infer},
    }
    return paths, schemas


__all__ = [
    "PREFIX",
    "InferenceRequest",
    "InferenceResponse",
    "ModelMetadata",
    "ModelReady",
    "ServerLive",
    "ServerMetadata",
    "ServerReady",
    "openapi",
]
