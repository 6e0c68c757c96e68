"""How a drift report's thresholds were set, as its JSON states it and its readers say it."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlpipe.monitoring._calibration import (
    CAT_METHOD,
    MIN_EFFECT,
    MIN_EFFECTIVE_SIZE,
    NUM_METHOD,
    RESAMPLES,
)

CORRECTION = "Sidak over the tested columns of an arm"
NULL = (
    "windows of the column's effective size (rows / entity design effect) "
    "resampled from the reference; log-normal tail"
)


@dataclass(frozen=True, kw_only=True)
class CalibrationStatement:
    """The false-alarm rate a report was calibrated for and the method behind its thresholds
    (:mod:`._calibration`); the fields in the order the JSON documents give them."""

    false_alarm_rate: float
    correction: str = CORRECTION
    methods: dict[str, str] = field(
        default_factory=lambda: {"numerical": NUM_METHOD, "categorical": CAT_METHOD}
    )
    resamples: int = RESAMPLES
    min_effect: float = MIN_EFFECT
    min_effective_size: int = MIN_EFFECTIVE_SIZE
    null: str = NULL


def thresholds_text(calibration: CalibrationStatement) -> str:
    """How the thresholds were set, in the words stdout and the HTML report both use."""
    cal = calibration
    return (
        f"thresholds: calibrated per column for {cal.false_alarm_rate:.0%} false alarms "
        f"per report on clean windows of the same effective size ({cal.correction}; "
        f"{cal.resamples} windows resampled from the reference); alarm when significant "
        f"and effect >= {cal.min_effect:g}; fewer than {cal.min_effective_size} "
        "distinct entities: insufficient"
    )


__all__ = ["CalibrationStatement", "thresholds_text"]
