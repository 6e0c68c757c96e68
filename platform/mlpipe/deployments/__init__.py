"""The deployment control plane: deploy, promote, roll back, roll out, and read the record.

The SQL record is the truth (``_store``: compare-and-swap on a generation); the
MLflow aliases ``@champion``, ``@canary``, ``@shadow`` and ``@previous`` are
mirrored from it after each commit, so ``models:/NAME@champion`` is right for
every MLflow-native tool. ``promote`` reads the canary verdict from
:mod:`mlpipe.monitoring`; :func:`history_feed` hands the history to the
warehouse's mirror.
"""

from mlpipe.deployments._feed import history_feed
from mlpipe.deployments._operations import (
    current,
    deploy,
    generations,
    history,
    promote,
    rollback,
    status,
)
from mlpipe.deployments._plane import control_plane
from mlpipe.deployments._record import (
    Deployment,
    HistoryEntry,
    plan_deploy,
    plan_promote,
    plan_rollback,
)
from mlpipe.deployments._rollout import (
    RolloutOutcome,
    RolloutResult,
    RolloutStep,
    StepVerdict,
    parse_steps,
    rollout,
)
from mlpipe.deployments._store import ControlPlane

__all__ = [
    "ControlPlane",
    "Deployment",
    "HistoryEntry",
    "RolloutOutcome",
    "RolloutResult",
    "RolloutStep",
    "StepVerdict",
    "control_plane",
    "current",
    "deploy",
    "generations",
    "history",
    "history_feed",
    "parse_steps",
    "plan_deploy",
    "plan_promote",
    "plan_rollback",
    "promote",
    "rollback",
    "rollout",
    "status",
]
