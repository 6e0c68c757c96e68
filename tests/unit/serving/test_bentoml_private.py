"""The BentoML private API that ``mlpipe.serving._bentoml_private`` uses, and the app built.

bentoml is pinned; these tests fail on an upgrade that moves or changes any of
the private names the module uses, and if the service's app stops being built
the way it intends (Deadline in the timeout middleware's place, the front door
around the whole app, the batcher holding the app's factory), or if loading the
service replaces any of BentoML's or uvicorn's names.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import bentoml
import pytest
import uvicorn
from _bentoml_impl.server.app import ServiceAppFactory
from _bentoml_impl.worker import service as bentoml_worker
from bentoml._internal.context import server_context, trace_context
from bentoml._internal.log import SERVER_LOGGING_CONFIG
from bentoml._internal.marshal.dispatcher import CorkDispatcher
from bentoml._internal.server.http import instruments, traffic
from bentoml.serving import ensure_prometheus_dir
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from mlpipe.serving import (
    WORKER_ENV,
    Deadline,
    FrontDoor,
    OverloadGate,
    PredictGateway,
    PredictRequest,
)
from mlpipe.serving._bentoml_private import (
    Batcher,
    RouteMetrics,
    ScoringAppFactory,
    enter_worker_context,
)
from mlpipe.serving._header_guard import HeadGuard
from mlpipe.serving._metrics import OTHER_ENDPOINT, EndpointLabels
from mlpipe.serving._worker import worker_config

SERVICE = Path(__file__).resolve().parents[3] / "bentos" / "scoring" / "service.py"
# BentoML's names as this module found them: loading the service must leave them be
BENTOML_NAMES = (
    traffic.TimeoutMiddleware,
    instruments.RunnerTrafficMetricsMiddleware,
    bentoml.Service.to_asgi,
    uvicorn.Config,
)


def _parameters(func: object) -> list[str]:
    return list(inspect.signature(func).parameters)  # type: ignore[arg-type]


# -- the private names, as `_bentoml_private` uses them --


def test_bentomls_factory_lists_the_two_middleware_mlpipe_stands_in_for() -> None:
    @bentoml.service(traffic={"timeout": 7})
    class Plain:
        @bentoml.api
        def echo(self, text: str) -> str:  # pragma: no cover
            return text

    Plain.inject_config()
    found = {m.cls: m.kwargs for m in ServiceAppFactory(Plain).middlewares}
    assert found[traffic.TimeoutMiddleware] == {"timeout": 7}
    assert set(found[instruments.RunnerTrafficMetricsMiddleware]) == {"namespace", "skip_paths"}
    assert _parameters(traffic.TimeoutMiddleware) == _parameters(Deadline) == ["app", "timeout"]


def test_the_app_factory_builds_and_batches_as_mlpipe_calls_it() -> None:
    """``Batcher.bind_factory``: a dispatcher with the limits BentoML's factory gives a
    batchable API's, its batch-size histogram and labels, the instance's method."""
    assert _parameters(ServiceAppFactory)[:2] == ["service", "is_main"]
    assert _parameters(ServiceAppFactory.__call__) == ["self"]
    assert _parameters(CorkDispatcher)[:2] == ["max_latency_in_ms", "max_batch_size"]
    assert {"fallback", "get_batch_size"} <= set(_parameters(CorkDispatcher))
    assert _parameters(CorkDispatcher.__call__) == ["self", "callback"]

    @bentoml.service
    class Batched:
        @bentoml.api(batchable=True, max_batch_size=7, max_latency_ms=123)
        async def run(self, xs: list[int]) -> list[int]:
            return xs

    Batched.inject_config()
    factory = ServiceAppFactory(Batched, is_main=True)
    theirs = factory.dispatchers["run"]
    method = factory.service.apis["run"]
    assert (method.max_batch_size, method.max_latency_ms) == (7, 123)
    assert (theirs.max_batch_size, theirs.max_latency) == (7, 0.123)
    assert isinstance(factory.enable_metrics, bool)
    assert factory._service_instance is None  # until the app starts (create_instance)
    factory.adaptive_batch_size_hist.labels(
        runner_name="Batched",
        worker_index=1,
        method_name="run",
        service_version="v",
        service_name="Batched",
    ).observe(3)
    assert Batched.inner().run.local is not None


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


def test_the_traffic_metrics_record_what_route_metrics_records() -> None:
    """RouteMetrics records BentoML's series for HTTP requests itself (its labelled series
    looked up once): the series BentoML's middleware records for one must be these."""
    metrics = instruments.RunnerTrafficMetricsMiddleware
    assert _parameters(metrics) == ["app", "namespace", "skip_paths"]
    assert _parameters(metrics._setup)[0] == "self"
    call = inspect.getsource(metrics.__call__)
    recorded = set(re.findall(r"self\.(metrics_\w+)\.labels", call))
    assert recorded == {
        "metrics_last_request_timestamp",
        "metrics_request_total",
        "metrics_request_duration",
        "metrics_request_in_progress",
        "metrics_websocket_connections",  # WebSockets still go through BentoML's own
        "metrics_websocket_data_received",
        "metrics_websocket_data_sent",
    }
    assert ".set_to_current_time()" in call and ".track_inprogress()" in call
    assert "self._is_setup" in call and "http_response_code=status_code" in call
    setup = inspect.getsource(metrics._setup)
    for name in recorded:
        assert f"self.{name} = " in setup


def test_service_class_is_bentomls_extension_point() -> None:
    assert "service_class" in _parameters(bentoml.service)


def test_mlpipes_worker_fills_the_server_context_bentomls_fills() -> None:
    """What BentoML's worker sets before building the app, mlpipe's sets too: the
    context's fields (its metrics and log lines read them) and the logging config."""
    source = inspect.getsource(bentoml_worker.main.callback)  # type: ignore[arg-type]
    assigned = set(re.findall(r"server_context\.(\w+) =", source))
    assert assigned == {
        "worker_index",
        "service_type",
        "service_name",
        "service_routes",
        "bento_name",
        "bento_version",
    }
    assert "configure_server_logging()" in source
    assert set(SERVER_LOGGING_CONFIG) >= {"version", "handlers", "loggers", "root"}
    assert _parameters(ensure_prometheus_dir)[:2] == ["directory", "clean"]


def test_enter_worker_context_sets_what_the_worker_index_and_labels_read() -> None:
    @bentoml.service(name="labelled")
    class Labelled:
        @bentoml.api(route="/echo")
        def echo(self, text: str) -> str:  # pragma: no cover
            return text

    before = {k: getattr(server_context, k) for k in ("worker_index", "service_name")}
    try:
        enter_worker_context(Labelled, 3)
        assert server_context.worker_index == 3
        assert server_context.service_name == server_context.bento_name == "labelled"
        assert server_context.bento_version == "not available"
        assert server_context.service_routes == ["/echo"]
    finally:
        for key, value in before.items():
            setattr(server_context, key, value)


def test_the_httptools_protocol_has_what_the_head_guard_extends() -> None:
    for name in ("connection_made", "connection_lost", "data_received"):
        assert _parameters(getattr(HttpToolsProtocol, name))[0] == "self"
    assert _parameters(HttpToolsProtocol.on_headers_complete) == ["self"]
    assert _parameters(HttpToolsProtocol.on_message_complete) == ["self"]
    init = inspect.getsource(HttpToolsProtocol.__init__)
    for attribute in ("self.loop =", "self.cycle:", "self.transport:", "self.server_state ="):
        assert attribute in init
    assert "self.keep_alive = keep_alive" in inspect.getsource(RequestResponseCycle.__init__)
    assert "self.response_complete = False" in inspect.getsource(RequestResponseCycle.__init__)


def test_the_trace_context_holds_the_span_id() -> None:
    assert trace_context.request_id is None  # outside a request
    assert hasattr(type(trace_context), "request_id")


# -- the service's app, built as BentoML builds it --


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The service module, loaded fresh."""
    monkeypatch.setenv("MLPIPE_SERVING__MAX_HEADER_BYTES", "8192")
    monkeypatch.setenv("MLPIPE_SERVING__HEADER_TIMEOUT_S", "3")
    monkeypatch.setenv("MLPIPE_HOME", str(tmp_path))
    spec = importlib.util.spec_from_file_location("_scoring_service_under_test", SERVICE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.Scoring.inject_config()
    return module


def _middleware_names(service: ModuleType) -> list[str]:
    """The middleware of the app the service builds, outermost first (after the front door)."""
    service.Scoring.to_asgi()
    return [m.cls.__name__ for m in service.batcher.factory.middlewares]


def test_loading_the_service_replaces_none_of_bentomls_names(service: ModuleType) -> None:
    assert service.Scoring.to_asgi() is not None
    assert (
        traffic.TimeoutMiddleware,
        instruments.RunnerTrafficMetricsMiddleware,
        bentoml.Service.to_asgi,
        uvicorn.Config,
    ) == BENTOML_NAMES


def test_the_workers_run_optimized_unless_the_environment_says(service: ModuleType) -> None:
    """mlpipe's arbiter, and BentoML's under ``bentoml serve``, give each worker these
    (a value already in the environment wins); optimized, typeguard's decorator, and so
    Feast's checks, are off."""
    envs = {e.name: (e.value, e.stage) for e in service.Scoring.envs}
    assert envs["PYTHONOPTIMIZE"][0] == "1" and envs["PYTHONOPTIMIZE"][1] != "build"
    assert {name: value for name, (value, _) in envs.items()} == WORKER_ENV


def test_deadline_stands_where_bentomls_timeout_middleware_stood(service: ModuleType) -> None:
    names = _middleware_names(service)
    assert "TimeoutMiddleware" not in names
    # outside mlpipe's own middleware, where BentoML's stood
    assert names.index("Deadline") < names.index("AuthGateway") < names.index("OverloadGate")


def test_route_metrics_stand_where_bentomls_traffic_metrics_stood(service: ModuleType) -> None:
    names = _middleware_names(service)
    assert "RunnerTrafficMetricsMiddleware" not in names
    assert names[0] == "RouteMetrics"  # outermost of BentoML's, as its own was


def test_routes_label_the_services_paths_and_everything_else_is_other(
    service: ModuleType,
) -> None:
    app = service.Scoring.to_asgi().app  # BentoML's Starlette app, behind the front door
    routes = [(r.path, r.path_regex) for r in app.routes if hasattr(r, "path")]
    label = EndpointLabels([*routes, *RouteMetrics.extra_routes])
    for path in ("/predict", "/livez", "/readyz", "/metrics", "/docs.json", "/", "/v2"):
        assert label(path) == path
    assert label("/v2/models/fraud/infer") == "/v2/models/{name}/infer"
    assert label("/v2/models/anything-at-all/ready") == "/v2/models/{name}/ready"
    for path in ("/predict/", "/probe-1", "/v2/models/fraud/versions/1/infer", "/v2/x", ""):
        assert label(path) == OTHER_ENDPOINT


def test_the_worker_serves_with_the_head_guard_at_the_settings_bounds(
    service: ModuleType,
) -> None:
    config = worker_config(service.Scoring.to_asgi(), backlog=16, graceful_s=7)
    config.load()
    protocol = config.http_protocol_class
    assert issubclass(protocol, HeadGuard)
    assert (protocol.max_bytes, protocol.timeout_s) == (8192, 3.0)
    assert (config.backlog, config.timeout_graceful_shutdown, config.server_header) == (
        16,
        7,
        False,
    )
    # BentoML's own config is built without a protocol: uvicorn's default, unguarded
    plain = uvicorn.Config(app=service.Scoring.to_asgi())
    plain.load()
    assert not issubclass(plain.http_protocol_class, HeadGuard)


def test_opentelemetry_is_in_the_stack_only_with_tracing_on(service: ModuleType) -> None:
    """Off (the default), its middleware is left out: excluding every URL, it still cost
    each request a URL lookup (decision 041)."""
    assert "OpenTelemetryMiddleware" not in _middleware_names(service)
    traced = ScoringAppFactory(service.Scoring, is_main=True, tracing=True)
    assert "OpenTelemetryMiddleware" in [m.cls.__name__ for m in traced.middlewares]


def test_mlpipes_middleware_stand_in_the_stacks_order(service: ModuleType) -> None:
    names = _middleware_names(service)
    ours = [n for n in names if n in {c.__name__ for c, _ in service.Scoring.middlewares}]
    assert ours == [
        "AuthGateway",
        "ReadinessGate",
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
    assert isinstance(service.batcher.factory, ScoringAppFactory)
    assert added[PredictGateway]["batch"] is service.batcher


def test_other_services_are_built_as_bentoml_builds_them(service: ModuleType) -> None:
    @bentoml.service
    class Other:
        @bentoml.api
        def echo(self, text: str) -> str:  # pragma: no cover
            return text

    assert type(Other.to_asgi()).__name__ == "Starlette"


# -- the batcher, as the gateway and the protocol layer call it --


class _Api:
    """The ``predict`` API as the batcher calls it: records each batch's request ids."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.batches: list[list[str]] = []
        self.fail_on = fail_on

    async def __call__(self, reqs: list[PredictRequest]) -> list[Any]:
        import asyncio

        self.batches.append([str(r.request_id) for r in reqs])
        await asyncio.sleep(0)
        if any(r.request_id == self.fail_on for r in reqs):
            raise RuntimeError("shed")
        return [{"request_id": r.request_id} for r in reqs]


def _bound(api: _Api, sizes: list[int] | None = None) -> Batcher:
    batcher = Batcher("predict", window=4)
    observe = None if sizes is None else sizes.append
    batcher.bind(api, max_batch_size=8, max_latency_ms=10_000, observe=observe)
    return batcher


def _requests(n: int) -> list[PredictRequest]:
    return [PredictRequest(model="m", request_id=f"r{i}") for i in range(n)]


def test_the_batcher_queues_each_row_as_a_job_a_window_at_a_time() -> None:
    """BentoML's latency model counts jobs: a job of many rows would skew it (decision 040).
    The rows go through BentoML's own dispatcher, a window (4) at a time."""
    import asyncio

    api, sizes = _Api(), list[int]()
    answers = asyncio.run(_bound(api, sizes)(_requests(10)))
    assert [a["request_id"] for a in answers] == [f"r{i}" for i in range(10)]  # type: ignore[index]
    assert sorted(sum(api.batches, []), key=lambda r: int(r[1:])) == [f"r{i}" for i in range(10)]
    for batch in api.batches:  # no batch mixes two windows
        assert len({int(r[1:]) // 4 for r in batch}) == 1
    assert sizes == [len(b) for b in api.batches]  # BentoML's batch-size histogram saw each


def test_a_row_the_batcher_refuses_fails_the_call() -> None:
    import asyncio

    api = _Api(fail_on="r5")
    with pytest.raises(RuntimeError, match="shed"):
        asyncio.run(_bound(api)(_requests(10)))
    seen = sum(api.batches, [])
    assert max(int(r[1:]) for r in seen) == 7  # the window holding the refused row; no later one


def test_a_batcher_not_bound_says_so() -> None:
    import asyncio

    with pytest.raises(RuntimeError, match="not bound"):
        asyncio.run(Batcher("predict")(_requests(1)))


# -- BentoML's traffic series, summed a loop turn at a time (decision 042) --


class _Series:
    """A labelled series: the writes it got."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, float]] = []

    def inc(self, amount: float = 1) -> None:
        self.writes.append(("inc", amount))

    def set(self, value: float) -> None:
        self.writes.append(("set", value))

    def observe(self, value: float) -> None:
        self.writes.append(("observe", value))


class _Family:
    def __init__(self) -> None:
        self.children: dict[tuple[tuple[str, Any], ...], _Series] = {}

    def labels(self, **labels: Any) -> _Series:
        return self.children.setdefault(tuple(sorted(labels.items())), _Series())

    def writes(self, **labels: Any) -> list[tuple[str, float]]:
        chosen = [s for key, s in self.children.items() if labels.items() <= set(key)]
        return [w for s in chosen for w in s.writes]


class _Traffic:
    def __init__(self) -> None:
        self.metrics_request_in_progress = _Family()
        self.metrics_last_request_timestamp = _Family()
        self.metrics_request_total = _Family()
        self.metrics_request_duration = _Family()


def test_a_routes_counts_and_gauges_are_written_once_a_loop_turn() -> None:
    import asyncio

    from mlpipe.serving._bentoml_private import _RouteSeries

    traffic = _Traffic()
    series = _RouteSeries(traffic, "/predict", stamped=True)
    total, in_progress = traffic.metrics_request_total, traffic.metrics_request_in_progress

    async def turns() -> None:
        for status in (200, 200, 422):  # three requests answered in one turn
            series.began()
            series.answered(status, 0.002)
            series.ended()
        assert total.writes() == [] and in_progress.writes() == []  # nothing yet
        assert len(traffic.metrics_request_duration.writes()) == 3  # durations at once
        await asyncio.sleep(0)
        assert total.writes(http_response_code=200) == [("inc", 2)]
        assert total.writes(http_response_code=422) == [("inc", 1)]
        assert in_progress.writes() == []  # three began, three ended: nothing to write
        assert [w[0] for w in traffic.metrics_last_request_timestamp.writes()] == ["set"]
        series.began()  # one still in progress at the turn's end
        await asyncio.sleep(0)
        series.ended()
        await asyncio.sleep(0)
        assert in_progress.writes() == [("inc", 1), ("inc", -1)]

    asyncio.run(turns())


class _SlowApi(_Api):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    async def __call__(self, reqs: list[PredictRequest]) -> list[Any]:
        import asyncio

        await asyncio.sleep(self.seconds)
        return await super().__call__(reqs)


def test_a_request_cancelled_while_queued_is_cancelled_not_refused_as_overloaded() -> None:
    """BentoML's wrapper turns any CancelledError into its 503 fallback: a request whose
    deadline passed in the queue came back as "overloaded", and Deadline's 504 never came."""
    import asyncio

    batcher = Batcher("predict")
    batcher.bind(_SlowApi(1.0), max_batch_size=8, max_latency_ms=10_000)

    async def timed_out() -> None:
        async with asyncio.timeout(0.05):
            await batcher(_requests(1))

    with pytest.raises(TimeoutError):
        asyncio.run(timed_out())


def test_a_job_the_dispatcher_drops_is_refused_as_overloaded() -> None:
    """BentoML's own refusal stays a 503 (ServiceUnavailable): requests that would wait
    past max_latency_ms behind slow batches."""
    import asyncio

    from bentoml.exceptions import ServiceUnavailable

    batcher = Batcher("predict")
    batcher.bind(_SlowApi(0.02), max_batch_size=2, max_latency_ms=5)

    async def crowd() -> list[Any]:
        calls = [batcher([r]) for r in _requests(40)]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    results = asyncio.run(crowd())
    refused = [r for r in results if isinstance(r, BaseException)]
    assert refused and all(isinstance(r, ServiceUnavailable) for r in refused)
    assert len(refused) < len(results)  # the rest were scored
