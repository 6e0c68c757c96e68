"""The request context: the path matched once, the context made once per request."""

from __future__ import annotations

import pytest

from mlpipe.serving._context import ANONYMOUS, SCOPE_KEY, Route, context_of, route_of


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/predict", Route.PREDICT),
        ("/predict/", Route.OTHER),
        ("/v2/models/fraud/infer", Route.INFER),
        ("/v2/models/fraud/versions/3/infer", Route.INFER),
        ("/v2/models/fraud", Route.PROTOCOL),
        ("/v2", Route.PROTOCOL),
        ("/v2health", Route.OTHER),
        ("/docs.json", Route.DOCS),
        ("/readyz", Route.OTHER),
    ],
)
def test_a_path_has_one_route(path: str, route: Route) -> None:
    assert route_of({"type": "http", "path": path}) is route


def test_only_predict_and_infer_are_scoring() -> None:
    assert {r for r in Route if r.scoring} == {Route.PREDICT, Route.INFER}


def test_a_websocket_is_no_route_of_ours() -> None:
    assert route_of({"type": "websocket", "path": "/predict"}) is Route.OTHER


def test_the_context_is_made_once_and_kept_in_the_scope() -> None:
    scope = {"type": "http", "path": "/predict"}
    ctx = context_of(scope)
    assert scope[SCOPE_KEY] is ctx and context_of(scope) is ctx
    assert (ctx.route, ctx.caller, ctx.received_ns) == (Route.PREDICT, ANONYMOUS, None)
    assert context_of({**scope}) is ctx  # a layer that copies the scope keeps the context
