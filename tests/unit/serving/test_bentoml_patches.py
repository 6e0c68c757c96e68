"""The BentoML private API that ``mlpipe.serving._bentoml_patches`` uses, and the app built.

bentoml is pinned; these tests fail on an upgrade that moves or changes any of
the private names the patches use, and if the service's app stops being built
the way the patches intend (Deadline in the timeout middleware's place, the
front door around the whole app, the batcher holding the app's factory).
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import bentoml
import pytest
import typeguard
from _bentoml_impl.server.app import ServiceAppFactory
from bentoml._internal.context import trace_context
from bentoml._internal.server import base_app
from bentoml._internal.server.http import traffic

from mlpipe.serving import Deadline, FrontDoor, OverloadGate, PredictGateway

SERVICE = Path(__file__).resolve().parents[3] / "bentos" / "scoring" / "service.py"


def _parameters(func: object) -> list[str]:
    return list(inspect.signature(func).parameters)  # type: ignore[arg-type]


# -- the private names, as the patches use them --


def test_the_timeout_middleware_is_looked_up_by_name_when_an_app_is_built() -> None:
    # use_deadline replaces the name; BentoML must still import it at build time
    assert _parameters(traffic.TimeoutMiddleware) == _parameters(Deadline) == ["app", "timeout"]
    source = inspect.getsource(base_app.BaseAppFactory.middlewares.fget)  # type: ignore[attr-defined]
    assert "from .http.traffic import TimeoutMiddleware" in source
    assert "Middleware(TimeoutMiddleware, timeout=self.timeout)" in source


def test_the_app_factory_builds_and_batches_as_the_patches_call_it() -> None:
    assert _parameters(ServiceAppFactory)[:2] == ["service", "is_main"]
    assert _parameters(ServiceAppFactory.__call__) == ["self"]
    assert _parameters(ServiceAppFactory.batch_infer) == [
        "self",
        "name",
        "input_args",
        "input_kwargs",
    ]
    assert inspect.iscoroutinefunction(ServiceAppFactory.batch_infer)
    # bind_once: the API method is looked up on the instance for every batch
    assert "getattr(self._service_instance, name)" in inspect.getsource(
        ServiceAppFactory.batch_infer
    )


def test_service_to_asgi_is_inject_config_then_the_factory() -> None:
    assert _parameters(bentoml.Service.to_asgi) == ["self", "is_main"]
    assert inspect.signature(bentoml.Service.to_asgi).parameters["is_main"].default is True
    source = inspect.getsource(bentoml.Service.to_asgi)
    assert "self.inject_config()" in source
    assert "ServiceAppFactory(self, is_main=is_main)" in source
    assert _parameters(bentoml.Service.inject_config) == ["self"]
    assert _parameters(bentoml.Service.add_asgi_middleware) == [
        "self",
        "middleware_cls",
        "options",
    ]


def test_the_trace_context_holds_the_span_id() -> None:
    assert trace_context.request_id is None  # outside a request
    assert hasattr(type(trace_context), "request_id")


# -- the service's app, built as BentoML builds it --


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The service module, loaded fresh; BentoML's names are restored afterwards."""
    monkeypatch.setattr(traffic, "TimeoutMiddleware", traffic.TimeoutMiddleware)
    monkeypatch.setattr(bentoml.Service, "to_asgi", bentoml.Service.to_asgi)
    monkeypatch.setattr(typeguard, "typechecked", typeguard.typechecked)  # skip_feast_type_checks
    monkeypatch.setenv("MLPIPE_HOME", str(tmp_path))
    spec = importlib.util.spec_from_file_location("_scoring_service_under_test", SERVICE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.Scoring.inject_config()
    return module


def test_deadline_stands_where_bentomls_timeout_middleware_stood(service: ModuleType) -> None:
    names = [m.cls.__name__ for m in ServiceAppFactory(service.Scoring).middlewares]
    assert "TimeoutMiddleware" not in names
    # outside mlpipe's own middleware, where BentoML's stood
    assert names.index("Deadline") < names.index("AuthGateway") < names.index("OverloadGate")


def test_mlpipes_middleware_stand_in_the_stacks_order(service: ModuleType) -> None:
    names = [m.cls.__name__ for m in ServiceAppFactory(service.Scoring).middlewares]
    ours = [n for n in names if n in {c.__name__ for c, _ in service.Scoring.middlewares}]
    assert ours == [
        "AuthGateway",
        "RequestIntake",
        "InferenceProtocol",
        "OverloadGate",
        "PredictGateway",
    ]


def test_the_front_door_wraps_the_whole_app(service: ModuleType) -> None:
    app = service.Scoring.to_asgi()
    assert isinstance(app, FrontDoor)
    # behind it, BentoML's own app with all its middleware
    assert type(app.app).__name__ == "Starlette"
    # the front door, the gate and /readyz share the worker's one admission
    added = dict(service.Scoring.middlewares)
    assert app.admission is service.admission is added[OverloadGate]["admission"]
    # the batcher holds the factory that built the app, for the gateway's direct calls
    assert isinstance(service.batcher.factory, ServiceAppFactory)
    assert added[PredictGateway]["batch"] is service.batcher


def test_other_services_are_built_as_bentoml_builds_them(service: ModuleType) -> None:
    @bentoml.service
    class Other:
        @bentoml.api
        def echo(self, text: str) -> str:  # pragma: no cover
            return text

    assert type(Other.to_asgi()).__name__ == "Starlette"
