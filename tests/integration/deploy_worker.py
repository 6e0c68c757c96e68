"""Workers of the alias-convergence race: ``python -m tests.integration.deploy_worker``.

The process imports what a deployment change imports (mlflow, the CLI) once,
then forks one worker per command given with ``--command`` (a shell-quoted
``mlpipe`` argument list). For each of ``--rounds`` rounds the workers meet at
a barrier of files in the run directory (``ready-<round>-<worker>``) and then
run their command through the console script's entry point
(:func:`mlpipe_cli.main.run`), so the changes race on the control plane and on
the MLflow aliases; a change that lost the compare-and-swap (exit 1) is tried
again, up to ``ATTEMPTS`` times a round. Each attempt appends one JSON line to
``results-<worker>.jsonl`` (exit code, stdout, stderr, a traceback that
escaped the CLI's error boundary).
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

from tests.integration.register_worker import _in_process, run_forked

BARRIER_TIMEOUT_S = 300.0
ATTEMPTS = 3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--command", action="append", required=True)
    args = parser.parse_args()
    _import_everything()
    workers = len(args.command)
    run_forked(
        workers,
        lambda w: _work(args.run_dir, w, workers, args.rounds, shlex.split(args.command[w])),
    )


def _import_everything() -> None:
    """Imports only: no registry or control-plane connection is opened before the fork."""
    import mlflow.store.model_registry.sqlalchemy_store  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

    import mlpipe.deployments  # noqa: F401
    import mlpipe.registry  # noqa: F401
    from mlpipe_cli import main as _  # noqa: F401


def _work(run_dir: Path, worker: int, workers: int, rounds: int, argv: list[str]) -> None:
    results = run_dir / f"results-{worker}.jsonl"
    for round_ in range(rounds):
        (run_dir / f"ready-{round_}-{worker}").touch()
        _wait_for_all(run_dir, round_, workers)
        for attempt in range(ATTEMPTS):  # a lost compare-and-swap (exit 1) is retried
            started = time.monotonic()
            outcome = _in_process(argv)
            outcome.update(
                worker=worker, round=round_, attempt=attempt, seconds=time.monotonic() - started
            )
            with results.open("a") as fh:
                fh.write(json.dumps(outcome) + "\n")
            if outcome["code"] != 1:
                break


def _wait_for_all(run_dir: Path, round_: int, workers: int) -> None:
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while len(list(run_dir.glob(f"ready-{round_}-*"))) < workers:
        if time.monotonic() > deadline:
            raise SystemExit(f"round {round_}: not every worker was ready")
        time.sleep(0.005)


if __name__ == "__main__":
    main()
