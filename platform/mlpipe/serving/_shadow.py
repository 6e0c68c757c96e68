"""The shadow stage: the shadow version of each answered request scored on a background
thread after the answer, logged with arm ``shadow`` and never returned.

One thread, so shadow work never competes with itself for the worker's CPU; at most
``backlog`` batches wait for it, beyond which a batch's shadow work is dropped and
counted (``mlpipe_shadow_predictions{result="dropped"}``) rather than queued without
bound. A shadow that fails is logged and counted, never seen by a client.
"""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from threading import Lock
from typing import TYPE_CHECKING

from mlpipe.serving._feature_stage import FeatureStage
from mlpipe.serving._item import Item
from mlpipe.serving._log_rows import LogRows
from mlpipe.serving._scorer import Scorer

if TYPE_CHECKING:
    from mlpipe.predlog import PredictionSink
    from mlpipe.serving._metrics import ServingMetrics

logger = logging.getLogger("mlpipe.serving")

MAX_SHADOW_BACKLOG = 256  # batches; beyond it shadow work is dropped (and counted)


class ShadowRunner:
    """Scores and logs the shadow versions of answered items, off the response path."""

    def __init__(
        self,
        features: FeatureStage,
        scorer: Scorer,
        rows: LogRows,
        sink: PredictionSink,
        metrics: ServingMetrics | None,
        *,
        backlog: int = MAX_SHADOW_BACKLOG,
    ) -> None:
        self._features = features
        self._scorer = scorer
        self._rows = rows
        self._sink = sink
        self._metrics = metrics
        self._max_backlog = backlog
        self._backlog = 0
        self._lock = Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mlpipe-shadow")

    def submit(self, items: list[Item]) -> None:
        """Queue the shadow scoring of ``items`` (each with a ``shadow`` version), or drop
        and count it when ``backlog`` batches already wait."""
        with self._lock:
            if self._backlog >= self._max_backlog:
                if self._metrics:
                    for it in items:
                        self._metrics.shadow.labels(it.served.name, it.shadow, "dropped").inc()
                return
            self._backlog += 1
        self._pool.submit(self._run, items)

    def close(self) -> None:
        """Wait for the queued shadow work to finish."""
        self._pool.shutdown(wait=True)

    def _run(self, items: list[Item]) -> None:
        try:
            shadow_items = [
                Item(it.req, it.index, it.served, it.served.versions[it.shadow], "shadow", it.key)
                for it in items
                if it.shadow is not None
            ]
            self._features.fill(shadow_items)
            self._scorer.score(shadow_items)
            self._sink.append(
                [self._rows.row(it, "shadow") for it in shadow_items if it.error is None]
            )
            result = "scored"
        except Exception:
            logger.exception("shadow scoring failed for %d requests", len(items))
            result = "failed"
        finally:
            with self._lock:
                self._backlog -= 1
        if self._metrics:
            for labels, n in Counter((it.served.name, it.shadow) for it in items).items():
                self._metrics.shadow.labels(*labels, result).inc(n)


__all__ = ["MAX_SHADOW_BACKLOG", "ShadowRunner"]
