"""Monitoring: drift, canary analysis, rollout and train/serve skew over the warehouse.

Evidently computes the drift statistics and renders the reports; this package
chooses the windows and references, screens awkward columns, turns results into
verdicts with exit codes, and indexes every report in the warehouse.
"""

from mlpipe.monitoring._alert import AlertResult, post_verdict, verdict_payload
from mlpipe.monitoring._canary import CanaryAnalysis, CanaryCheck, analyze, latest_canary_verdict
from mlpipe.monitoring._drift import ArmDrift, ColumnDrift, DriftVerdict, drift
from mlpipe.monitoring._rollout import RolloutResult, RolloutStep, parse_steps, rollout
from mlpipe.monitoring._screen import SkippedColumn
from mlpipe.monitoring._skew import FeatureSkew, SkewExample, SkewVerdict, skew
from mlpipe.windows import Window, parse_duration, parse_reference, window_ending

__all__ = [
    "AlertResult",
    "CanaryAnalysis",
    "CanaryCheck",
    "analyze",
    "latest_canary_verdict",
    "RolloutResult",
    "RolloutStep",
    "parse_steps",
    "rollout",
    "post_verdict",
    "verdict_payload",
    "ArmDrift",
    "ColumnDrift",
    "DriftVerdict",
    "SkippedColumn",
    "FeatureSkew",
    "SkewExample",
    "SkewVerdict",
    "skew",
    "Window",
    "drift",
    "parse_duration",
    "parse_reference",
    "window_ending",
]
