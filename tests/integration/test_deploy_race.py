"""Four concurrent deployment changes, five rounds: the MLflow aliases end equal to the record.

Each worker process (``deploy_worker``) runs one command through the CLI's
entry point every round, all four starting together: a canary deploy, a forced
promote, a rollback and a champion deploy. Every attempt ends in success, a
lost compare-and-swap (exit 1) or a refused change (exit 2), never a
traceback. Afterwards ``@champion``, ``@canary``, ``@shadow`` and
``@previous`` name exactly what the record's latest generation says, without
``status`` having healed them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlpipe import deployments, registry
from mlpipe.config import load_settings
from tests.conftest import REPO

pytestmark = pytest.mark.integration

ROUNDS = 5
COMMANDS = (
    "deploy fraud --version 2 --canary 10",
    "promote fraud --force",
    "rollback fraud",
    "deploy fraud --version 1",
)
RUN_TIMEOUT_S = 400.0


def _mlflow_aliases(settings) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    found = registry.client(settings).get_registered_model("fraud").aliases
    return {
        a: str(found[a]) if a in found else None
        for a in ("champion", "canary", "shadow", "previous")
    }


def test_racing_changes_leave_aliases_equal_to_the_record(registered_home: Path) -> None:
    settings = load_settings()
    deployments.deploy(settings, "fraud", "1", reason="first")
    run_dir = registered_home / "race"
    run_dir.mkdir()
    argv = [sys.executable, "-m", "tests.integration.deploy_worker", str(run_dir)]
    argv += [f"--rounds={ROUNDS}", *(f"--command={c}" for c in COMMANDS)]
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env={**os.environ, "MLPIPE_HOME": str(registered_home)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    outcomes = [
        json.loads(line)
        for path in sorted(run_dir.glob("results-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    unclean = [
        o
        for o in outcomes
        if o["crash"] is not None or "Traceback" in o["stderr"] or o["code"] not in (0, 1, 2)
    ]
    assert not unclean, unclean
    winners = [o for o in outcomes if o["code"] == 0]
    record = deployments.status(settings, "fraud")
    assert record.generation == 1 + len(winners)
    assert _mlflow_aliases(settings) == record.aliases(), (record.generation, len(winners))
