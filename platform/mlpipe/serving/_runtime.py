"""One worker's serving state: loader, prediction log, pipeline and metrics.

The BentoML service builds one :class:`ServingRuntime` per worker process, in
its ``__init__``. BentoML builds the app, and so the request layers, before
that, at import: the layers are given a :class:`RuntimeSlot` when they are
built, which the service fills with the runtime once it exists, and they read
the runtime from it, never from a process-wide global.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from mlpipe.predlog import open_sink
from mlpipe.serving._error_bodies import NotReady
from mlpipe.serving._generations import GenerationLoader
from mlpipe.serving._ids import worker_id
from mlpipe.serving._metrics import serving_metrics
from mlpipe.serving._online_features import FeatureFetcher
from mlpipe.serving._pipeline import ScoringPipeline

if TYPE_CHECKING:
    from mlpipe.config import Settings
    from mlpipe.predlog import PredictionSink
    from mlpipe.serving._admission import ReadyBoard

logger = logging.getLogger("mlpipe.serving")


class ServingRuntime:
    """Everything one worker needs to answer ``/predict``."""

    def __init__(
        self,
        settings: Settings,
        *,
        loader: GenerationLoader | None = None,
        sink: PredictionSink | None = None,
        fetch_features: FeatureFetcher | None = None,
        metrics: Any = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else serving_metrics()
        self.loader = loader or GenerationLoader(settings, metrics=self.metrics)
        self.sink = sink or open_sink(settings, worker_id())
        self.pipeline = ScoringPipeline(
            settings, self.loader, self.sink, fetch_features=fetch_features, metrics=self.metrics
        )
        self._workers: ReadyBoard | None = None

    @property
    def ready(self) -> bool:
        """Every deployed model was loaded or refused: requests can be answered."""
        return self.loader.ready

    def readiness_problem(self) -> str | None:
        """Why this worker is not ready (``/readyz`` 503 says it), or None.

        Still loading, or a deployed model it cannot load, named with the reason
        (its requests get 503 with the same words; the other models are served),
        or, after :meth:`share_readiness`, another worker of the server still loading.
        Saturation is the service's to add: it holds the admission.
        """
        if not self.loader.ready:
            return "models still loading"
        broken = self.loader.unloadable()
        if broken:
            return "; ".join(broken[name].message(name) for name in sorted(broken))
        board = self._workers
        if board is not None and (loading := board.loading()):
            return f"{loading} of the server's {board.workers} workers still loading"
        return None

    def share_readiness(self, board: ReadyBoard) -> None:
        """Be ready only once every worker of the server is (:class:`ReadyBoard`): this
        worker marks itself on the board as soon as its loader is ready."""
        self._workers = board

        def mark_when_loaded() -> None:
            while not self.loader.wait_ready(1.0):
                pass
            board.mark_loaded()

        threading.Thread(target=mark_when_loaded, name="mlpipe-ready", daemon=True).start()

    def start(self) -> ServingRuntime:
        self.loader.start()
        return self

    def close(self) -> None:
        """Stop polling, finish shadow work, close the open log segment."""
        self.loader.stop()
        self.pipeline.close()
        self.sink.close()


class RuntimeSlot:
    """Where the request layers find the worker's runtime: empty until the service fills it.

    :meth:`ready_runtime` is the one readiness check of a request: the readiness
    gate, the gateway and the Open Inference Protocol layer all ask it.
    """

    __slots__ = ("runtime",)

    def __init__(self, runtime: ServingRuntime | None = None) -> None:
        self.runtime = runtime

    def ready(self) -> bool:
        """There is a runtime and every deployed model was loaded or refused."""
        rt = self.runtime
        return rt is not None and rt.ready

    def ready_runtime(self) -> ServingRuntime:
        """The runtime, ready to answer; raises :class:`NotReady` (503) until it is."""
        rt = self.runtime
        if rt is None or not rt.ready:
            raise NotReady("not ready: models still loading")
        return rt


__all__ = ["RuntimeSlot", "ServingRuntime"]
