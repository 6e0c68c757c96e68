"""What ``monitor drift`` answers: a result per arm (one version on one arm) and overall."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any

from mlpipe.monitoring._calibration_statement import CalibrationStatement
from mlpipe.monitoring._judgement import ColumnDrift, DriftOutcome
from mlpipe.monitoring._quality_section import QualitySection
from mlpipe.monitoring._reports import Finding
from mlpipe.monitoring._screen import SkippedColumn

EXIT_CODES: dict[DriftOutcome, int] = {
    "ok": 0,
    "no_data": 0,
    "insufficient": 0,
    "drift": 1,
    "quality": 1,
}
# The overall verdict is the first of these any arm has (no_data: none has anything).
PRECEDENCE: tuple[DriftOutcome, ...] = ("quality", "drift", "ok", "insufficient", "no_data")


@dataclass(frozen=True, kw_only=True)
class ArmDrift:
    """One arm's (one version's) result; ``verdict`` is one of :data:`DriftOutcome`."""

    arm: str
    version: str
    verdict: DriftOutcome
    rows: int  # rows in the window
    rows_tested: int  # after sampling
    sampled: bool
    reference_rows: int
    drift_share: float | None = None
    entities: int | None = None  # distinct entities among the tested rows
    per_column_alpha: float | None = None
    columns: list[ColumnDrift] = field(default_factory=list)
    alarms: list[str] = field(default_factory=list)
    skipped: list[SkippedColumn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    quality: QualitySection | None = None
    html: str | None = None
    json: str | None = None

    @property
    def drifted_features(self) -> list[str]:
        return [c.column for c in self.columns if c.kind == "feature" and c.drifted]

    @property
    def missing_share_drifted(self) -> list[str]:
        """Columns whose share of missing values moved beyond a clean window's."""
        return [c.column for c in self.columns if c.kind == "missing" and c.drifted]

    def to_dict(self) -> dict[str, Any]:
        """The arm as the JSON documents hold it."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["columns"] = [asdict(c) for c in self.columns]
        data["alarms"], data["notes"] = list(self.alarms), list(self.notes)
        data["skipped"] = [asdict(s) for s in self.skipped]
        data["quality"] = None if self.quality is None else self.quality.to_dict()
        data["drifted_features"] = self.drifted_features
        data["missing_share_drifted"] = self.missing_share_drifted
        return data

    def finding(self) -> Finding:
        """This arm's row in the ``reports`` index."""
        summary = {
            "drift_share": self.drift_share,
            "drifted": self.drifted_features,
            "missing_share_drifted": self.missing_share_drifted,
            "alarms": self.alarms,
            "skipped": [asdict(s) for s in self.skipped],
            "rows": self.rows,
        }
        return Finding(self.verdict, summary, arm=self.arm, version=self.version)


def overall(arms: list[ArmDrift]) -> DriftOutcome:
    """The report's verdict: the first of :data:`PRECEDENCE` an arm has."""
    verdicts = {a.verdict for a in arms}
    return next(v for v in PRECEDENCE if v in verdicts or v == "no_data")


@dataclass(frozen=True, kw_only=True)
class DriftVerdict:
    """The answer to ``monitor drift``: a verdict per arm and overall, and where the reports are."""

    model: str
    window_start: datetime
    window_end: datetime
    reference: str
    drift_share_threshold: float
    verdict: DriftOutcome
    arms: list[ArmDrift]
    report_dir: str | None
    calibration: CalibrationStatement

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        """The verdict as ``--json`` prints it and ``summary.json`` holds it."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["arms"] = [arm.to_dict() for arm in self.arms]
        data["calibration"] = asdict(self.calibration)
        data["exit_code"] = self.exit_code
        return data


__all__ = ["EXIT_CODES", "PRECEDENCE", "ArmDrift", "DriftVerdict", "overall"]
