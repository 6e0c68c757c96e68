"""The MLflow aliases follow the latest committed record, whatever the order writers finish in.

MLflow's alias writes are last-writer-wins upserts, several calls per change.
Two changes that commit generations 5 and 6 and then mirror at once can leave
generation 5's ``@champion`` in place if its writer is the slower one. So a
writer never mirrors what it committed: it re-reads the record, mirrors that
(writing only the aliases MLflow holds differently) and re-reads again; if the
generation moved meanwhile it mirrors the newer record, until the generation
holds still across a whole mirror. Then every
write that could land after the last one is followed by its own writer's
re-read, which sees the newest generation and writes it again: the aliases
converge on the latest committed generation. ``status`` heals and ``doctor``
reports any drift left behind (a writer killed mid-mirror, MLflow down).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mlpipe import registry
from mlpipe.config import Settings
from mlpipe.deployments._plane import control_plane, never_deployed
from mlpipe.deployments._record import Deployment
from mlpipe.errors import CheckFailed, StoreBusy

ALIASES = ("champion", "canary", "shadow", "previous")
MAX_PASSES = 10  # a change storm longer than this is left to the newer writers and to `status`
BUSY_BACKOFF_S = 0.05  # first wait after the embedded registry said it was locked


@dataclass(frozen=True)
class AliasDrift:
    """An alias whose MLflow value differs from the record's."""

    alias: str
    mlflow: str | None
    record: str | None


def mirror_latest(settings: Settings, model: str) -> Deployment | None:
    """Mirror the aliases of ``model``'s latest record until the generation holds still.

    Returns the record last mirrored (None for a model with no record). Raises
    StoreUnavailable when MLflow cannot be updated.
    """
    plane = control_plane(settings)
    record = plane.get(model)
    for attempt in range(MAX_PASSES):
        if record is None:
            return None
        try:
            _mirror_once(settings, record)
        except StoreBusy:
            # The commit stands; a mirror given up on would leave drift: wait, re-read, retry.
            if attempt == MAX_PASSES - 1:
                raise
            time.sleep(min(1.0, BUSY_BACKOFF_S * 2**attempt))
            record = plane.get(model)
            continue
        again = plane.get(model)
        if again is None or again.generation == record.generation:
            return record
        record = again
    return record


def _mirror_once(settings: Settings, record: Deployment) -> None:
    """Write the aliases MLflow holds differently from ``record``."""
    held = registry.read_aliases(settings, record.model, ALIASES)
    changes = {a: v for a, v in record.aliases().items() if held[a] != v}
    if changes:
        registry.mirror_aliases(settings, record.model, changes, generation=record.generation)


def alias_drift(settings: Settings, record: Deployment) -> list[AliasDrift]:
    """The aliases of ``record.model`` that MLflow holds differently from the record."""
    held = registry.read_aliases(settings, record.model, ALIASES)
    wanted = record.aliases()
    return [AliasDrift(a, held[a], wanted[a]) for a in ALIASES if held[a] != wanted[a]]


def heal_aliases(settings: Settings, record: Deployment) -> list[AliasDrift]:
    """Mirror the latest record if MLflow drifted from ``record``; the drift that was found."""
    drift = alias_drift(settings, record)
    if drift:
        mirror_latest(settings, record.model)
    return drift


def check_aliases(settings: Settings) -> str:
    """``doctor``'s check: every deployed model's aliases equal its record. Heals nothing.

    Returns a one-line summary; raises CheckFailed naming each drifted alias
    (and ``mlpipe status NAME``, which heals it), StoreUnavailable when a store
    cannot be read.
    """
    if never_deployed(settings):
        return "nothing deployed"
    records = control_plane(settings).models()
    drifted = []
    for record in records:
        drift = alias_drift(settings, record)
        if drift:
            found = ", ".join(f"@{d.alias} is {d.mlflow} (record: {d.record})" for d in drift)
            drifted.append(f"{record.model}: {found}; `mlpipe status {record.model}` heals it")
    if drifted:
        raise CheckFailed("; ".join(drifted))
    return f"MLflow aliases match the record for {len(records)} model(s)"
