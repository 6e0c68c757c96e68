"""The deployment record of one model and the pure rules that change it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from mlpipe.errors import InvalidInput


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Deployment:
    """Which versions of ``model`` serve, and how traffic splits between them."""

    model: str
    generation: int = 0
    champion: str | None = None
    canary: str | None = None
    canary_weight: float = 0.0
    shadow: str | None = None
    shadow_sample: float = 0.0
    previous: str | None = None
    updated_at: datetime = field(default_factory=_now)
    actor: str = ""
    reason: str | None = None

    def arms(self) -> dict[str, str]:
        """Arm name → version for every arm that is set."""
        arms = {"champion": self.champion, "canary": self.canary, "shadow": self.shadow}
        return {arm: v for arm, v in arms.items() if v is not None}

    def aliases(self) -> dict[str, str | None]:
        """The MLflow aliases this record implies (None: the alias must not exist)."""
        return {
            "champion": self.champion,
            "canary": self.canary,
            "shadow": self.shadow,
            "previous": self.previous,
        }


@dataclass(frozen=True)
class HistoryEntry:
    model: str
    generation: int
    action: str
    champion: str | None
    canary: str | None
    canary_weight: float
    shadow: str | None
    shadow_sample: float
    previous: str | None
    at: datetime
    actor: str
    reason: str | None


@dataclass(frozen=True)
class RolloutLease:
    """A running rollout's hold on a model: who runs it, and until when it counts as alive.

    The rollout renews ``expires_at`` while it runs and deletes the row when it
    ends; a row whose expiry passed, or whose owner process is gone, belongs to
    an abandoned rollout (killed, or its machine lost).
    """

    model: str
    version: str
    weight: float
    owner: str
    pid: int
    host: str
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime


def _check_percent(flag: str, value: float, *, allow_full: bool) -> None:
    upper_ok = value <= 100 if allow_full else value < 100
    if not (0 < value and upper_ok):
        bound = "(0, 100]" if allow_full else "(0, 100)"
        raise InvalidInput(f"{flag} must be in {bound} percent, got {value:g}")


def plan_deploy(
    current: Deployment | None,
    model: str,
    version: str,
    *,
    canary: float | None = None,
    shadow: float | None = None,
) -> tuple[str, Deployment]:
    """The action name and the next record for ``deploy``; raises InvalidInput."""
    if canary is not None and shadow is not None:
        raise InvalidInput("use either --canary or --shadow, not both")
    base = current or Deployment(model=model)
    if canary is not None:
        _check_percent("--canary", canary, allow_full=False)
        _require_other_than_champion(base, version, "canary")
        _require_not_on(base, version, "canary", base.shadow, "shadow")
        return "canary", replace(base, canary=version, canary_weight=float(canary))
    if shadow is not None:
        _check_percent("--shadow", shadow, allow_full=True)
        _require_other_than_champion(base, version, "shadow")
        _require_not_on(base, version, "shadow", base.canary, "canary")
        return "shadow", replace(base, shadow=version, shadow_sample=float(shadow))
    if base.champion == version:
        raise InvalidInput(f"version {version} of {model} is already the champion")
    nxt = replace(base, champion=version, previous=base.champion)
    if nxt.canary == version:
        nxt = replace(nxt, canary=None, canary_weight=0.0)
    return "deploy", _without_shadow_of_champion(nxt)


def _require_not_on(base: Deployment, version: str, arm: str, other: str | None, name: str) -> None:
    """A version runs on one arm: a shadow's own answers would be compared with themselves."""
    if other == version:
        raise InvalidInput(
            f"version {version} of {base.model} is the {name}; a version cannot be {arm} and "
            f"{name} at once"
        )


def _without_shadow_of_champion(nxt: Deployment) -> Deployment:
    """The record without a shadow that is now the champion (a shadow of itself)."""
    if nxt.shadow is not None and nxt.shadow == nxt.champion:
        return replace(nxt, shadow=None, shadow_sample=0.0)
    return nxt


def _require_other_than_champion(base: Deployment, version: str, arm: str) -> None:
    if base.champion is None:
        raise InvalidInput(
            f"{base.model} has no champion yet; deploy one with --version before a {arm}"
        )
    if base.champion == version:
        raise InvalidInput(f"version {version} is the champion; a {arm} must be another version")


def plan_promote(current: Deployment) -> Deployment:
    """Canary becomes champion, the old champion becomes previous."""
    if current.canary is None:
        raise InvalidInput(f"{current.model} has no canary to promote")
    promoted = replace(
        current,
        champion=current.canary,
        previous=current.champion,
        canary=None,
        canary_weight=0.0,
    )
    return _without_shadow_of_champion(promoted)


def plan_rollback(current: Deployment) -> tuple[str, Deployment]:
    """Drop a running canary; otherwise put the previous champion back."""
    if current.canary is not None:
        return "rollback-canary", replace(current, canary=None, canary_weight=0.0)
    if current.previous is None:
        raise InvalidInput(f"{current.model} has no previous version to roll back to")
    return "rollback", replace(current, champion=current.previous, previous=None)


def plan_undeploy(current: Deployment) -> Deployment:
    """Out of service: no arm left; the champion becomes previous (``rollback`` brings it back)."""
    if current.champion is None:
        raise InvalidInput(f"{current.model} is not deployed; nothing was changed")
    return replace(
        current,
        champion=None,
        canary=None,
        canary_weight=0.0,
        shadow=None,
        shadow_sample=0.0,
        previous=current.champion,
    )
