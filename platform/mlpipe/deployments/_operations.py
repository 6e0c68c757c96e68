"""The deployment loop: read the record, deploy, promote, roll back, undeploy.

Each change reads the record, plans the next one with the pure rules of
:mod:`mlpipe.deployments._record`, commits it by compare-and-swap, and then
mirrors the MLflow aliases from the latest committed record
(:mod:`mlpipe.deployments._mirror`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlpipe import monitoring, registry
from mlpipe.config import Settings
from mlpipe.deployments._lease import (
    RolloutState,
    require_no_rollout,
    require_no_running_rollout,
    rollout_state,
)
from mlpipe.deployments._mirror import AliasDrift, heal_aliases, mirror_latest
from mlpipe.deployments._plane import control_plane
from mlpipe.deployments._record import (
    Deployment,
    HistoryEntry,
    plan_deploy,
    plan_promote,
    plan_rollback,
    plan_undeploy,
)
from mlpipe.errors import CheckFailed, Conflict, MlpipeError, NotFound


@dataclass(frozen=True)
class DeploymentStatus:
    """What ``status`` shows: the record, its rollout (if any) and the alias drift it healed."""

    record: Deployment
    rollout: RolloutState | None
    aliases_healed: list[AliasDrift]
    aliases_error: str | None = None  # MLflow could not be read or written


def current(settings: Settings, model: str) -> Deployment | None:
    """The model's record, or None if it was never deployed."""
    return control_plane(settings).get(model)


def status(settings: Settings, model: str) -> Deployment:
    """The model's record; raises NotFound if it was never deployed."""
    record = current(settings, model)
    if record is None:
        raise NotFound(f"{model} has no deployment; run `mlpipe deploy {model} --version V` first")
    return record


def status_report(settings: Settings, model: str) -> DeploymentStatus:
    """The record, its rollout lease, and the MLflow aliases brought back in line with it.

    Raises NotFound for a model that was never deployed. An unreachable registry
    is reported in ``aliases_error``, not raised: the record is still worth showing.
    """
    record = status(settings, model)
    try:
        healed, error = heal_aliases(settings, record), None
    except MlpipeError as exc:
        healed, error = [], str(exc)
    return DeploymentStatus(record, rollout_state(settings, model), healed, error)


def generations(settings: Settings) -> dict[str, int]:
    """Model → generation for every model in service (cheap; servers poll it)."""
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
    force: bool = False,
    rollout_owner: str | None = None,
) -> Deployment:
    """Make ``version`` the champion, or run it as a canary / shadow.

    While a rollout of ``model`` runs in another process it is refused with
    RolloutHeld (nothing changed) unless ``force``: then the deploy takes over,
    the rollout's lease is deleted and the rollout stops at its next step. An
    abandoned rollout's lease is ended by the deploy (so ``status`` shows no
    stale rollout). The rollout holding the lease passes its ``rollout_owner``.
    Raises NotFound (model or version unknown), InvalidInput (bad percentages or
    state), Conflict (a concurrent change won).
    """
    registry.require_version(settings, model, version)
    record = _read(settings, model, expected_generation, allow_missing=True)
    action, nxt = plan_deploy(record, model, version, canary=canary, shadow=shadow)
    if force:
        found = rollout_state(settings, model)
        superseded = found if found and found.lease.owner != rollout_owner else None
    else:
        superseded = require_no_running_rollout(settings, model, owner=rollout_owner)
    stored = _commit(settings, nxt, record, action, reason)
    if superseded is not None:
        control_plane(settings).drop_lease(model, superseded.lease.owner)
    return stored


def promote(
    settings: Settings,
    model: str,
    *,
    reason: str | None = None,
    force: bool = False,
    expected_generation: int | None = None,
    rollout_owner: str | None = None,
) -> Deployment:
    """The canary becomes champion; the old champion becomes ``@previous``.

    Refused with CheckFailed unless the newest canary analysis of the canary
    *version* passed; ``force`` skips that check and the history records
    ``promote --force``. Refused with Conflict while a rollout holds the model
    (running, or abandoned: its canary was never fully analysed), whatever
    ``force`` says; the rollout holding the lease passes its ``rollout_owner``.
    """
    record = _read(settings, model, expected_generation)
    assert record is not None
    nxt = plan_promote(record)
    require_no_rollout(settings, model, owner=rollout_owner)
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
    """Drop a running canary, or put ``@previous`` back as champion. No rebuild, no reload wait.

    It also ends a rollout of the model, running or abandoned (its lease is deleted).
    """
    record = _read(settings, model, expected_generation)
    assert record is not None
    action, nxt = plan_rollback(record)
    stored = _commit(settings, nxt, record, action, reason)
    control_plane(settings).drop_lease(model)
    return stored


def undeploy(
    settings: Settings,
    model: str,
    *,
    reason: str | None = None,
    expected_generation: int | None = None,
) -> Deployment:
    """Take ``model`` out of service: no champion, canary or shadow; the champion → ``@previous``.

    The record keeps its generation (bumped) and history; servers stop serving
    the model at their next poll, and ``rollback`` puts ``@previous`` back.
    Raises NotFound (never deployed), InvalidInput (already out of service),
    Conflict (a concurrent change won).
    """
    record = _read(settings, model, expected_generation)
    assert record is not None
    stored = _commit(settings, plan_undeploy(record), record, "undeploy", reason)
    control_plane(settings).drop_lease(model)
    return stored


def _require_passing_analysis(settings: Settings, model: str, version: str) -> None:
    verdict = monitoring.latest_canary_verdict(settings, model, version)
    if verdict == "pass":
        return
    found = (
        f"{model} version {version} has no canary analysis"
        if verdict is None
        else f"the latest canary analysis of {model} version {version} is {verdict}, not pass"
    )
    raise CheckFailed(
        f"{found}; run `mlpipe canary analyze {model}`, "
        "or promote with --force (recorded in the history)"
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
    mirror_latest(settings, stored.model)
    return stored
