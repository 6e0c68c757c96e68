"""``rollout``: progressive delivery on top of deploy / canary analysis / promote / rollback.

At each step below 100 % the canary's weight is set, the interval passes, and
the canary is analysed over it: pass → next step; fail → rollback, stop;
insufficient → wait another interval, up to ``max_waits``, then rollback. At
100 % the canary is promoted. Every change goes through the control plane, so
each step and its reason land in the deployment history.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.monitoring._canary import CanaryAnalysis, analyze
from mlpipe.windows import parse_duration

if TYPE_CHECKING:
    from mlpipe.config import Settings


@dataclass
class RolloutStep:
    weight: float
    verdict: str  # pass / fail / insufficient / promoted
    analyses: int
    detail: str = ""


@dataclass
class RolloutResult:
    model: str
    version: str
    outcome: str  # "promoted" | "rolled_back" | "held" (last step below 100)
    steps: list[RolloutStep] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.outcome == "rolled_back" else 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exit_code": self.exit_code}


def parse_steps(text: str) -> list[float]:
    try:
        steps = [float(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise InvalidInput(f"bad steps {text!r}: use percentages like 5,25,50,100") from exc
    if not steps or any(not 0 < s <= 100 for s in steps) or steps != sorted(set(steps)):
        raise InvalidInput(f"bad steps {text!r}: increasing percentages in (0, 100], e.g. 5,25,100")
    return steps


def rollout(
    settings: Settings,
    model: str,
    steps: list[float],
    interval: str = "10m",
    version: str | None = None,
    max_waits: int = 3,
    sleep: Callable[[float], None] = time.sleep,
    on_step: Callable[[RolloutStep, CanaryAnalysis | None], None] | None = None,
) -> RolloutResult:
    """Walk the canary through ``steps`` (percent); promote at 100, roll back on a failed analysis.

    ``version`` defaults to the running canary. Raises :class:`InvalidInput` when
    there is no canary to roll out, and what deploy/promote/rollback raise. When
    a step's analysis raises (the warehouse stays locked, say, or the run is
    interrupted), the canary is rolled back first and the error re-raised.
    """
    from mlpipe import deployments

    wait = parse_duration(interval, "interval").total_seconds()
    record = deployments.status(settings, model)
    version = version or record.canary
    if not version:
        raise InvalidInput(
            f"{model} has no canary: pass --version or `mlpipe deploy --canary` first"
        )
    result = RolloutResult(model, version, "rolled_back")
    for weight in steps:
        if weight >= 100:
            deployments.promote(settings, model, reason="rollout: all steps passed")
            step = RolloutStep(weight, "promoted", 0)
            result.steps.append(step)
            result.outcome = "promoted"
            if on_step:
                on_step(step, None)
            return result
        deployments.deploy(
            settings, model, version, canary=weight, reason=f"rollout step {weight:g}%"
        )
        try:
            verdict, attempt, analysis = _analyse_step(
                settings, model, interval, wait, max_waits, sleep
            )
        except BaseException as exc:
            # Never leave a half-analysed canary taking traffic: take it out, then report.
            deployments.rollback(
                settings, model, reason=f"rollout step {weight:g}%: aborted ({exc!r:.200})"
            )
            raise
        detail = analysis.report_path if analysis and analysis.report_path else ""
        step = RolloutStep(weight, verdict, attempt, detail or "no logged predictions yet")
        result.steps.append(step)
        if on_step:
            on_step(step, analysis)
        if verdict != "pass":
            why = "failed" if verdict == "fail" else f"insufficient data after {attempt} waits"
            deployments.rollback(settings, model, reason=f"rollout step {weight:g}%: canary {why}")
            return result
    result.outcome = "held"  # steps ended below 100: the canary stays at the last weight
    return result


def _analyse_step(
    settings: Settings,
    model: str,
    interval: str,
    wait: float,
    max_waits: int,
    sleep: Callable[[float], None],
) -> tuple[str, int, CanaryAnalysis | None]:
    """Wait an interval and analyse, again while the data is insufficient (up to ``max_waits``).

    A model with no logged predictions at all counts as insufficient data.
    """
    analysis: CanaryAnalysis | None = None
    verdict = "insufficient"
    attempt = 0
    while attempt < max(1, max_waits):
        attempt += 1
        sleep(wait)
        try:
            analysis = analyze(settings, model, interval)
        except NotFound:
            analysis, verdict = None, "insufficient"
            continue
        verdict = analysis.verdict
        if verdict != "insufficient":
            break
    return verdict, attempt, analysis
