"""What a batch does when its prediction-log write fails: ``predlog.on_write_error``.

``fail_closed`` answers the batch with 503 (nothing answered that is not
logged, invariant 5); ``fail_open`` answers it and counts the lost rows. Either
way the failure is logged, at most once per :attr:`LogFailurePolicy.EVERY_S`,
with the rows lost since the last line, so a full disk does not flood the log.
"""

from __future__ import annotations

import logging
import math
import time
from threading import Lock

from mlpipe.serving._error_bodies import LogUnavailable

logger = logging.getLogger("mlpipe.serving")


class LogFailurePolicy:
    """The prediction-log write-error policy, and its log lines (at most one per 10 s)."""

    EVERY_S = 10.0

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self._lock = Lock()
        self._last = -math.inf
        self._lost = 0

    def record(self, exc: Exception, rows: int) -> LogUnavailable | None:
        """Log the failure; the error to answer with (fail_closed), or None (fail_open)."""
        with self._lock:
            self._lost += rows
            now = time.monotonic()
            if now - self._last >= self.EVERY_S:
                what = "refusing requests (503)" if self.policy == "fail_closed" else "answering"
                logger.error(
                    "prediction log write failed (%s: %s); predlog.on_write_error=%s: %s; "
                    "%d rows not logged since the last report",
                    type(exc).__name__,
                    exc,
                    self.policy,
                    what,
                    self._lost,
                )
                self._last, self._lost = now, 0
        if self.policy == "fail_open":
            return None
        message = f"prediction log unavailable ({type(exc).__name__}); not answered"
        return LogUnavailable(message)


__all__ = ["LogFailurePolicy"]
