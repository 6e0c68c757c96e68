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
from typing import Any, Literal

from mlpipe import monitoring
from mlpipe.config import Settings
from mlpipe.deployments._feed import history_feed
from mlpipe.deployments._lease import LeaseHold, hold_lease, signals_as_interrupt
from mlpipe.deployments._operations import current, deploy, promote, rollback, status
from mlpipe.errors import Conflict, InvalidInput, NotFound
from mlpipe.windows import parse_duration

StepVerdict = Literal["pass", "fail", "insufficient", "promoted"]
RolloutOutcome = Literal["promoted", "rolled_back", "held"]  # held: the last step was below 100


@dataclass
class RolloutStep:
    weight: float
    verdict: StepVerdict
    analyses: int
    detail: str = ""


@dataclass
class RolloutResult:
    model: str
    version: str
    outcome: RolloutOutcome
    steps: list[RolloutStep] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.outcome == "rolled_back" else 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exit_code": self.exit_code}


OnStep = Callable[[RolloutStep, monitoring.CanaryAnalysis | None], None]


def parse_steps(text: str) -> list[float]:
    """``"5,25,100"`` → ``[5.0, 25.0, 100.0]``; InvalidInput unless increasing and in (0, 100]."""
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
    on_step: OnStep | None = None,
    resume: bool = False,
) -> RolloutResult:
    """Walk the canary through ``steps`` (percent); promote at 100, roll back on a failed analysis.

    ``version`` defaults to the running canary. The rollout holds a lease on the
    model while it runs (:mod:`mlpipe.deployments._lease`); ``resume`` takes over
    the lease of an abandoned rollout and goes on from its canary's weight.
    Raises :class:`InvalidInput` when there is no canary to roll out,
    :class:`Conflict` while another rollout holds the model, and what
    deploy/promote/rollback raise. When anything raises mid-rollout (an
    analysis error, SIGINT, SIGTERM), the canary is taken out first and the
    error re-raised.
    """
    wait = parse_duration(interval, "interval").total_seconds()
    if not resume:
        version = version or status(settings, model).canary
        if not version:
            raise InvalidInput(
                f"{model} has no canary: pass --version or `mlpipe deploy --canary` first"
            )
    with hold_lease(settings, model, version, resume=resume) as hold, signals_as_interrupt():
        todo = _remaining(settings, model, hold, steps) if resume else steps
        result = RolloutResult(model, hold.lease.version, "rolled_back")
        try:
            return _walk(
                settings, result, todo, hold, _Pace(interval, wait, max_waits, sleep), on_step
            )
        except BaseException as exc:
            # Never leave a half-analysed canary taking traffic: take it out, then report.
            why = f"aborted ({exc!r:.200})"
            _drop_canary(settings, model, hold.lease.version, why, hold.generation)
            raise


@dataclass(frozen=True)
class _Pace:
    interval: str
    wait: float
    max_waits: int
    sleep: Callable[[float], None]


def _walk(
    settings: Settings,
    result: RolloutResult,
    steps: list[float],
    hold: LeaseHold,
    pace: _Pace,
    on_step: OnStep | None,
) -> RolloutResult:
    model, version = result.model, result.version
    for weight in steps:
        hold.renew(weight)
        if weight >= 100:
            promote(
                settings,
                model,
                reason="rollout: all steps passed",
                rollout_owner=hold.owner,
                expected_generation=_own_canary(settings, model, version, hold),
            )
            result.outcome = "promoted"
            _record(result, RolloutStep(weight, "promoted", 0), None, on_step)
            return result
        stored = deploy(
            settings,
            model,
            version,
            canary=weight,
            reason=f"rollout step {weight:g}%",
            rollout_owner=hold.owner,
        )
        hold.generation = stored.generation
        verdict, attempt, analysis = _analyse_step(
            settings, model, pace.interval, pace.wait, pace.max_waits, pace.sleep
        )
        hold.renew()
        _own_canary(settings, model, version, hold)
        detail = analysis.report_path if analysis and analysis.report_path else ""
        step = RolloutStep(weight, verdict, attempt, detail or "no logged predictions yet")
        _record(result, step, analysis, on_step)
        if verdict != "pass":
            why = "failed" if verdict == "fail" else f"insufficient data after {attempt} waits"
            rollback(settings, model, reason=f"rollout step {weight:g}%: canary {why}")
            return result
    result.outcome = "held"  # steps ended below 100: the canary stays at the last weight
    return result


def _remaining(settings: Settings, model: str, hold: LeaseHold, steps: list[float]) -> list[float]:
    """The steps a resumed rollout still has to walk: from its canary's current weight on."""
    record = status(settings, model)
    if record.canary != hold.lease.version:
        raise InvalidInput(
            f"the canary of {model} is no longer v{hold.lease.version}: nothing to resume "
            "(the abandoned rollout's lease is released)"
        )
    return [w for w in steps if w >= record.canary_weight] or [max(steps)]


def _own_canary(settings: Settings, model: str, version: str, hold: LeaseHold) -> int:
    """The record's generation while its canary is still this rollout's; else raise Conflict.

    Another command (a deploy that raced the lease, or one with ``--force``) may
    have changed the canary during an interval: the analysis then read another
    version's traffic, so the rollout stops there and never promotes it.
    """
    record = status(settings, model)
    moved = hold.generation is not None and record.generation != hold.generation
    if record.canary != version or moved:
        now = f"v{record.canary} at {record.canary_weight:g}%" if record.canary else "no canary"
        raise Conflict(
            f"the deployment of {model} changed under the rollout of v{version} "
            f"(generation {record.generation}: {now}, by {record.actor}); "
            "the rollout stops without promoting and leaves that deployment as it is"
        )
    return record.generation


def _drop_canary(
    settings: Settings, model: str, version: str, why: str, generation: int | None = None
) -> None:
    """Roll the canary back if it is still ``version`` (another command may have moved it).

    Once the rollout has committed a step (``generation``), only the record as it
    left it: a change another command made since is that command's to undo.
    """
    record = current(settings, model)
    if record is None or generation not in (None, record.generation):
        return
    if record.canary == version:
        weight = f"{record.canary_weight:g}%"
        rollback(settings, model, reason=f"rollout step {weight}: {why}")


def _record(
    result: RolloutResult,
    step: RolloutStep,
    analysis: monitoring.CanaryAnalysis | None,
    on_step: OnStep | None,
) -> None:
    result.steps.append(step)
    if on_step:
        on_step(step, analysis)


def _analyse_step(
    settings: Settings,
    model: str,
    interval: str,
    wait: float,
    max_waits: int,
    sleep: Callable[[float], None],
) -> tuple[monitoring.CanaryOutcome, int, monitoring.CanaryAnalysis | None]:
    """Wait an interval and analyse, again while the data is insufficient (up to ``max_waits``).

    A model with no logged predictions at all counts as insufficient data.
    """
    analysis: monitoring.CanaryAnalysis | None = None
    verdict: monitoring.CanaryOutcome = "insufficient"
    attempt = 0
    while attempt < max(1, max_waits):
        attempt += 1
        sleep(wait)
        try:
            analysis = monitoring.analyze(settings, model, interval, history=history_feed(settings))
        except NotFound:
            analysis, verdict = None, "insufficient"
            continue
        verdict = analysis.verdict
        if verdict != "insufficient":
            break
    return verdict, attempt, analysis
