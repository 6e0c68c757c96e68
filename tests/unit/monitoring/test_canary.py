"""The canary checks and the verdict over them, on arms built in memory."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mlpipe.config import MonitorSettings
from mlpipe.monitoring._canary import _Arm, _checks

LIMITS = MonitorSettings()


def _arm(n: int, *, errors: int = 0, latency_ms: float = 4.0, version: str = "1") -> _Arm:
    rng = np.random.default_rng(n)
    rows = pd.DataFrame(
        {
            "version": version,
            "status": ["error"] * errors + ["ok"] * (n - errors),
            "latency_ms": latency_ms,
            "score": rng.uniform(0, 1, n),
            "label": 0,
            "outcome": np.nan,
        }
    )
    return _Arm.of(rows)


def test_too_few_requests_is_insufficient_and_checks_nothing_else() -> None:
    verdict, checks = _checks(_arm(500), _arm(10, version="2"), LIMITS)
    assert verdict == "insufficient"
    assert [(c.name, c.champion, c.canary, c.passed) for c in checks] == [
        ("requests", 500, 10, False)
    ]


def test_a_healthy_canary_passes_with_accuracy_not_evaluated() -> None:
    verdict, checks = _checks(_arm(500), _arm(400, version="2"), LIMITS)
    assert verdict == "pass"
    assert [c.name for c in checks] == [
        "requests",
        "error_rate",
        "p99_latency_ms",
        "p50_latency_ms",
        "prediction_drift",
        "accuracy",
    ]
    accuracy = checks[-1]
    assert accuracy.passed is None and accuracy.detail == "labelled 0/0: not evaluated"


def test_errors_and_latency_fail_the_canary() -> None:
    canary = _arm(400, errors=40, latency_ms=10.0, version="2")
    verdict, checks = _checks(_arm(500), canary, LIMITS)
    assert verdict == "fail"
    failed = [c.name for c in checks if c.passed is False]
    assert failed == ["error_rate", "p99_latency_ms"]
    assert canary.version == "2"
