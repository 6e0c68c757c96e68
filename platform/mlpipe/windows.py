"""Time windows: ``24h``-style durations, and what ``--reference`` names.

A module of its own (not in :mod:`mlpipe.monitoring`) so ``mlpipe status`` can
read a window without importing Evidently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from mlpipe.errors import InvalidInput

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str, what: str = "window") -> timedelta:
    """``90s``, ``10m``, ``24h``, ``7d``, ``2w`` → timedelta; else :class:`InvalidInput`."""
    match = _DURATION.match(text or "")
    if not match or float(match.group(1)) <= 0:
        raise InvalidInput(f"bad {what} {text!r}: use a number and a unit, e.g. 30m, 24h, 7d")
    return timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})


def duration_text(seconds: float) -> str:
    """A duration for people: ``42s``, ``17m``, ``3.5h``."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise InvalidInput(f"bad time {text!r}: use ISO 8601, e.g. 2025-01-31T12:00") from exc
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


@dataclass(frozen=True)
class Window:
    start: datetime  # naive UTC, inclusive
    end: datetime  # naive UTC, exclusive

    def describe(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M}..{self.end:%Y-%m-%d %H:%M} UTC"


def window_ending(duration: str, end: datetime | None = None) -> Window:
    stop = end or utcnow()
    return Window(stop - parse_duration(duration), stop)


@dataclass(frozen=True)
class ReferenceSpec:
    """``training`` (the version's training reference) or a window of logged traffic."""

    kind: str  # "training" | "window"
    window: Window | None = None

    def describe(self) -> str:
        return "training reference" if self.window is None else f"traffic {self.window.describe()}"


def parse_reference(text: str, current: Window) -> ReferenceSpec:
    """``training``; ``window:7d`` (the 7 days before the current window); ``window:ISO..ISO``."""
    text = (text or "").strip()
    if text == "training":
        return ReferenceSpec("training")
    if text.startswith("window:"):
        spec = text.removeprefix("window:")
        if ".." in spec:
            first, _, last = spec.partition("..")
            window = Window(_instant(first), _instant(last))
            if window.end <= window.start:
                raise InvalidInput(f"bad reference {text!r}: the end is not after the start")
        else:
            window = Window(current.start - parse_duration(spec, "reference window"), current.start)
        return ReferenceSpec("window", window)
    raise InvalidInput(
        f"bad reference {text!r}: use 'training', 'window:7d' or 'window:2025-01-01..2025-01-02'"
    )
