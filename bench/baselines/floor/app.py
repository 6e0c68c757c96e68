"""Baseline (e): the floor. A bare Starlette endpoint that parses the request JSON
and returns a constant; no Python server on this machine does less per request.

Run: ``uvicorn app:app --app-dir bench/baselines/floor --no-access-log``.
"""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_ANSWER = b'{"score":0.0,"label":0}'


async def predict(request: Request) -> Response:
    body = json.loads(await request.body())
    if not isinstance(body, dict):
        return Response(b'{"error":"expected an object"}', 422, media_type="application/json")
    return Response(_ANSWER, media_type="application/json")


async def ready(_request: Request) -> Response:
    return Response(b"ok")


app = Starlette(routes=[Route("/predict", predict, methods=["POST"]), Route("/ready", ready)])
