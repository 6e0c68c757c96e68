"""The deployment control plane: deploy, promote, roll back, roll out, undeploy, read the record.

The SQL record is the truth (``_store``: compare-and-swap on a generation); the
MLflow aliases ``@champion``, ``@canary``, ``@shadow`` and ``@previous`` are
mirrored from the latest committed record after each commit (``_mirror``), so
``models:/NAME@champion`` is right for every MLflow-native tool, and
``status_report`` heals any drift left. ``promote`` reads the canary verdict
from :mod:`mlpipe.monitoring`; a running rollout holds a lease on its model
(``_lease``); :func:`history_feed` hands the history to the warehouse's mirror.
"""

from mlpipe.deployments._feed import history_feed
from mlpipe.deployments._lease import RolloutState, rollout_state
from mlpipe.deployments._mirror import AliasDrift, alias_drift, check_aliases
from mlpipe.deployments._operations import (
    DeploymentStatus,
    current,
    deploy,
    generations,
    history,
    promote,
    rollback,
    status,
    status_report,
    undeploy,
)
from mlpipe.deployments._plane import control_plane
from mlpipe.deployments._record import (
    Deployment,
    HistoryEntry,
    RolloutLease,
    plan_deploy,
    plan_promote,
    plan_rollback,
    plan_undeploy,
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
    "AliasDrift",
    "ControlPlane",
    "Deployment",
    "DeploymentStatus",
    "HistoryEntry",
    "RolloutLease",
    "RolloutOutcome",
    "RolloutResult",
    "RolloutState",
    "RolloutStep",
    "StepVerdict",
    "alias_drift",
    "check_aliases",
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
    "plan_undeploy",
    "promote",
    "rollback",
    "rollout",
    "rollout_state",
    "status",
    "status_report",
    "undeploy",
]
