"""One scoring worker: the service's app on uvicorn, with :class:`HeadGuard` as its protocol.

The arbiter (:mod:`mlpipe.serving._arbiter`) starts ``serving.workers`` of these
on its one listening socket. Each does what BentoML's own worker does for a
service (``python -m _bentoml_impl.worker.service``: fill BentoML's server
context, load the service, build its app), then starts uvicorn itself, so the
protocol is an argument (``uvicorn.Config(http=...)``), not a replaced class:
BentoML's worker builds its ``Config`` with uvicorn's default protocol, which
bounds neither a request head's size nor its time (decisions 025 and 039).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import socket
from typing import Any, cast

import bentoml
import uvicorn

from mlpipe.config import load_settings
from mlpipe.serving._asgi import ASGIApp
from mlpipe.serving._bentoml_private import configure_worker_logging, enter_worker_context
from mlpipe.serving._header_guard import HeadGuard, Shedder
from mlpipe.serving._lane import PredictLane
from mlpipe.serving._overload import FrontDoor

KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this (uvicorn's and BentoML's)
# The cycle collector's thresholds in a worker (Python's are 700, 10, 10): a request
# allocates hundreds of objects that die young, so at 700 the young generation was
# collected every few requests; 1.072 x the requests a worker served, p99 -1.1 ms
# (decision 043). A cycle lives at most 20,000 allocations longer.
COLLECTOR_THRESHOLDS = (20_000, 20, 20)


def http_protocol(
    max_bytes: int,
    timeout_s: float,
    shed: Shedder | None = None,
    lane: PredictLane | None = None,
) -> type[asyncio.Protocol] | str:
    """:class:`HeadGuard` at these bounds (0 lifts one), shedding with ``shed``, answering
    ``/predict`` through ``lane`` (decision 047); both bounds 0: uvicorn's own protocol,
    only for measuring the guard (decision 025), with neither."""
    if not max_bytes and not timeout_s:
        return "auto"
    return HeadGuard.bounded(max_bytes, timeout_s, shed, lane)


def worker_config(app: ASGIApp, *, backlog: int, graceful_s: int | None) -> uvicorn.Config:
    """uvicorn's settings for a worker of the service whose app is ``app``.

    As BentoML's worker sets them (no access log config of uvicorn's, no
    ``server`` header), with the protocol from the serving settings, and the
    lifespan ``on``: under uvicorn's ``auto`` (BentoML's) a service whose startup
    raised was logged at INFO as "lifespan unsupported" and served anyway, every
    request failing on the instance that was never made; now the worker exits
    with the error in the log.
    """
    s = load_settings().serving
    return uvicorn.Config(
        app=app,
        # the front door's refusals answered from the head (decision 046)
        http=http_protocol(
            s.max_header_bytes,
            s.header_timeout_s,
            app.shed if isinstance(app, FrontDoor) else None,
            app.lane if isinstance(app, FrontDoor) else None,
        ),
        backlog=backlog,
        log_config=None,
        workers=1,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=graceful_s,
        server_header=False,
        lifespan="on",
    )


def serve(service: str, *, fd: int, worker_id: int, backlog: int, graceful_s: int | None) -> None:
    """Serve ``service`` (BentoML's import string, in the working directory) on socket ``fd``
    until uvicorn is told to stop (SIGTERM: it drains, within ``graceful_s``)."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    configure_worker_logging()
    svc = cast("bentoml.Service[Any]", bentoml.load(service, standalone_load=True))
    enter_worker_context(svc, worker_id)
    app: ASGIApp = svc.to_asgi(is_main=True)
    config = worker_config(app, backlog=backlog, graceful_s=graceful_s)
    uvicorn.Server(config).run(sockets=[socket.socket(fileno=fd)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mlpipe.serving._worker")
    parser.add_argument("service", help="the service's import string, e.g. service:Scoring")
    parser.add_argument("--fd", type=int, required=True, help="the listening socket's fd")
    parser.add_argument("--worker-id", type=int, required=True, help="1-based, the arbiter's")
    parser.add_argument("--backlog", type=int, required=True, help="the socket's, as bound")
    parser.add_argument("--timeout-graceful-shutdown", type=int, default=None)
    args = parser.parse_args(argv)
    serve(
        args.service,
        fd=args.fd,
        worker_id=args.worker_id,
        backlog=args.backlog,
        graceful_s=args.timeout_graceful_shutdown,
    )


if __name__ == "__main__":
    main()
