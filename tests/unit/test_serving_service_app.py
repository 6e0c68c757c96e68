"""The scoring service's app as BentoML builds it: where mlpipe's pieces sit in the stack.

``bentos/scoring/service.py`` puts two of them in by replacing names in BentoML
(its timeout middleware, ``Service.to_asgi``); these tests fail if an upgrade
makes either substitution stop taking effect.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import bentoml
import pytest
import typeguard
from _bentoml_impl.server.app import ServiceAppFactory
from bentoml._internal.server.http import traffic

from mlpipe.serving.overload import FrontDoor

SERVICE = Path(__file__).resolve().parents[2] / "bentos" / "scoring" / "service.py"


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


def test_the_front_door_wraps_the_whole_app(service: ModuleType) -> None:
    app = service.Scoring.to_asgi()
    assert isinstance(app, FrontDoor)
    # behind it, BentoML's own app with all its middleware
    assert type(app.app).__name__ == "Starlette"


def test_other_services_are_built_as_bentoml_builds_them(service: ModuleType) -> None:
    @bentoml.service
    class Other:
        @bentoml.api
        def echo(self, text: str) -> str:  # pragma: no cover
            return text

    assert type(Other.to_asgi()).__name__ == "Starlette"
