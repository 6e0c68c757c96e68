"""The deployment loop: read the record, deploy, promote, roll back.

Each change reads the record, plans the next one with the pure rules of
:mod:`mlpipe.deployments._record`, commits it by compare-and-swap, and then
mirrors the MLflow aliases from what was committed.
"""

from __future__ import annotations

from dataclasses import replace

from mlpipe import monitoring, registry
from mlpipe.config import Settings
from mlpipe.deployments._plane import control_plane
from mlpipe.deployments._record import (
    Deployment,
    HistoryEntry,
    plan_deploy,
    plan_promote,
    plan_rollback,
)
from mlpipe.errors import CheckFailed, Conflict, NotFound


def current(settings: Settings, model: str) -> Deployment | None:
    """The model's record, or None if it was never deployed."""
    return control_plane(settings).get(model)


def status(settings: Settings, model: str) -> Deployment:
    """The model's record; raises NotFound if it was never deployed."""
    record = current(settings, model)
    if record is None:
        raise NotFound(f"{model} has no deployment; run `mlpipe deploy {model} --version V` first")
    return record


def generations(settings: Settings) -> dict[str, int]:
    """Model → generation for every deployed model (cheap; servers poll it)."""
    return control_plane(settings).generations()


def history(settings: Settings, model: str, limit: int = 50) -> list[HistoryEntry]:
    """Newest first. Raises NotFound for a model that was never deployed."""
    status(settings, model)
    return control_plane(settings).history(model, limit)


def deploy(
    settings: Settings,
    model: str,
    version: str,
    *,
    canary: float | None = None,
    shadow: float | None = None,
    reason: str | None = None,
    expected_generation: int | None = None,
) -> Deployment:
    """Make ``version`` the champion, or run it as a canary / shadow.

    Raises NotFound (model or version unknown), InvalidInput (bad percentages or
    state), Conflict (a concurrent change won).
    """
    registry.require_version(settings, model, version)
    record = _read(settings, model, expected_generation, allow_missing=True)
    action, nxt = plan_deploy(record, model, version, canary=canary, shadow=shadow)
    return _commit(settings, nxt, record, action, reason)


def promote(
    settings: Settings,
    model: str,
    *,
    reason: str | None = None,
    force: bool = False,
    expected_generation: int | None = None,
) -> Deployment:
    """The canary becomes champion; the old champion becomes ``@previous``.

    Refused with CheckFailed when the canary's latest analysis failed, unless
    ``force`` (then the history records ``promote --force``).
    """
    record = _read(settings, model, expected_generation)
    assert record is not None
    nxt = plan_promote(record)
    if not force:
        _require_passing_analysis(settings, model, record.canary or "")
    return _commit(settings, nxt, record, "promote --force" if force else "promote", reason)


def rollback(
    settings: Settings,
    model: str,
    *,
    reason: str | None = None,
    expected_generation: int | None = None,
) -> Deployment:
    """Drop a running canary, or put ``@previous`` back as champion. No rebuild, no reload wait."""
    record = _read(settings, model, expected_generation)
    assert record is not None
    action, nxt = plan_rollback(record)
    return _commit(settings, nxt, record, action, reason)


def _require_passing_analysis(settings: Settings, model: str, version: str) -> None:
    if monitoring.latest_canary_verdict(settings, model, version) == "fail":
        raise CheckFailed(
            f"the latest canary analysis of {model} version {version} failed; "
            "fix it or promote with --force (recorded in the history)"
        )


def _read(
    settings: Settings, model: str, expected: int | None, *, allow_missing: bool = False
) -> Deployment | None:
    record = current(settings, model) if allow_missing else status(settings, model)
    generation = record.generation if record else 0
    if expected is not None and expected != generation:
        raise Conflict(
            f"the deployment of {model} is at generation {generation}, not {expected}; "
            "nothing was changed"
        )
    return record


def _commit(
    settings: Settings,
    nxt: Deployment,
    record: Deployment | None,
    action: str,
    reason: str | None,
) -> Deployment:
    nxt = replace(nxt, actor=settings.actor, reason=reason)
    read_generation = record.generation if record else 0
    stored = control_plane(settings).commit(nxt, read_generation=read_generation, action=action)
    registry.mirror_aliases(settings, stored.model, stored.aliases(), generation=stored.generation)
    return stored
