"""Monitoring: drift, canary analysis and train/serve skew over the warehouse.

Evidently computes the drift statistics and renders the reports; this package
chooses the windows and references, screens awkward columns, turns results into
verdicts with exit codes, and indexes every report in the warehouse. Rolling a
canary out on these verdicts is a deployment operation (:func:`mlpipe.deployments.rollout`).
"""

from mlpipe.monitoring._alert import AlertResult, post_verdict, redact_url, verdict_payload
from mlpipe.monitoring._calibration import (
    FALSE_ALARM_RATE,
    MIN_EFFECT,
    NullCache,
    calibrate,
    size_bucket,
)
from mlpipe.monitoring._calibration import distance as drift_distance
from mlpipe.monitoring._calibration_statement import CalibrationStatement, thresholds_text
from mlpipe.monitoring._canary import (
    CanaryAnalysis,
    CanaryOutcome,
    analyze,
    latest_canary_verdict,
)
from mlpipe.monitoring._drift import drift
from mlpipe.monitoring._drift_report import arm_title, quality_lines
from mlpipe.monitoring._drift_verdict import ArmDrift, DriftVerdict
from mlpipe.monitoring._judgement import ColumnDrift, DriftOutcome
from mlpipe.monitoring._model_checks import CanaryCheck
from mlpipe.monitoring._quality_section import QualitySection
from mlpipe.monitoring._screen import SkippedColumn, screen
from mlpipe.monitoring._shadow import Disagreement, ShadowAnalysis, analyze_shadow
from mlpipe.monitoring._skew import (
    FeatureSkew,
    SkewExample,
    SkewOutcome,
    SkewVerdict,
    VersionSkew,
    skew,
)
from mlpipe.windows import Window, parse_duration, parse_reference, window_ending

__all__ = [
    "FALSE_ALARM_RATE",
    "MIN_EFFECT",
    "NullCache",
    "AlertResult",
    "ArmDrift",
    "CalibrationStatement",
    "CanaryAnalysis",
    "CanaryCheck",
    "CanaryOutcome",
    "ColumnDrift",
    "DriftOutcome",
    "Disagreement",
    "DriftVerdict",
    "FeatureSkew",
    "QualitySection",
    "ShadowAnalysis",
    "SkewExample",
    "SkewOutcome",
    "SkewVerdict",
    "SkippedColumn",
    "VersionSkew",
    "Window",
    "analyze",
    "analyze_shadow",
    "arm_title",
    "calibrate",
    "drift",
    "drift_distance",
    "latest_canary_verdict",
    "parse_duration",
    "parse_reference",
    "post_verdict",
    "quality_lines",
    "redact_url",
    "screen",
    "size_bucket",
    "skew",
    "thresholds_text",
    "verdict_payload",
    "window_ending",
]
