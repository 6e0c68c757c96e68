"""Workers of the concurrent-registration test: ``python -m tests.integration.register_worker``.

The process imports what a registration imports (mlflow, scikit-learn,
LightGBM, skops: seconds of CPU each time) once, then forks ``--workers``
worker processes, each with its own registry connections. A worker registers
``warmup-<worker>`` once (MLflow's first-call work), says it is ready
(``ready-<worker>`` in the run directory) and waits for the ``start`` file, so
every worker begins at once. Then it runs ``mlpipe register`` ``--rounds``
times: in its own process through the console script's entry point
(:func:`mlpipe_cli.main.run`: argument parsing, the command, the error
boundary and exit code), or, for the rounds ``--subprocess-rounds`` names
(``WORKER:ROUND``), as a real ``mlpipe`` process. Each attempt appends one
JSON line to ``results-<worker>.jsonl``: the exit code, stdout, stderr and, for
an exception that escaped the CLI's error boundary, its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

MLPIPE = str(Path(sys.executable).parent / "mlpipe")
START_TIMEOUT_S = 600.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--name", default="fraud")
    parser.add_argument("--subprocess-rounds", default="", help="WORKER:ROUND,...")
    args = parser.parse_args()
    in_subprocess = {
        tuple(int(n) for n in pair.split(":")) for pair in args.subprocess_rounds.split(",") if pair
    }

    _import_everything()
    run_forked(
        args.workers,
        lambda worker: _work(args, worker, {r for w, r in in_subprocess if w == worker}),
    )


def run_forked(workers: int, work: Callable[[int], None]) -> NoReturn:
    """Fork one child per worker running ``work(worker)``; exit 1 if any child failed."""
    children = []
    for worker in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                work(worker)
            except BaseException:  # noqa: BLE001 - report and leave without the parent's atexit
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
    sys.exit(1 if failed else 0)


def _import_everything() -> None:
    """Imports only: no registry connection is opened before the fork."""
    import joblib  # noqa: F401
    import lightgbm  # noqa: F401
    import mlflow.artifacts  # noqa: F401
    import mlflow.sklearn  # noqa: F401
    import mlflow.store.model_registry.sqlalchemy_store  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    import pandas  # noqa: F401

    import mlpipe.registry  # noqa: F401
    from mlpipe.registry._sklearn_flavor import _skops_io
    from mlpipe_cli import main as _  # noqa: F401

    _skops_io()  # as a registration imports it: without PyTorch


def _work(args: argparse.Namespace, worker: int, in_subprocess: set[int]) -> None:
    from mlpipe import registry
    from mlpipe.config import load_settings

    registry.register(
        load_settings(),
        f"warmup-{worker}",
        dataset=Path(args.dataset),
        model_path=Path(args.model),
    )
    (args.run_dir / f"ready-{worker}").touch()
    _wait_for(args.run_dir / "start")
    results = args.run_dir / f"results-{worker}.jsonl"
    for round_ in range(args.rounds):
        argv = [
            "register",
            args.name,
            "--model",
            args.model,
            "--dataset",
            args.dataset,
            "--metric",
            f"worker={worker}",
            "--metric",
            f"round={round_}",
            "--json",
        ]
        started = time.monotonic()
        outcome = _in_subprocess(argv) if round_ in in_subprocess else _in_process(argv)
        outcome.update(worker=worker, round=round_, seconds=time.monotonic() - started)
        with results.open("a") as fh:
            fh.write(json.dumps(outcome) + "\n")


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no {path} after {START_TIMEOUT_S:g} s")
        time.sleep(0.01)


def _in_process(argv: list[str]) -> dict[str, object]:
    from mlpipe_cli.main import run

    out, err = io.StringIO(), io.StringIO()
    code: object = None
    crash: str | None = None
    saved_argv = sys.argv
    sys.argv = ["mlpipe", *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run()
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # noqa: BLE001 - anything past the CLI's boundary is the finding
        crash = traceback.format_exc()
    finally:
        sys.argv = saved_argv
    if crash is None and not isinstance(code, int):
        code = 0 if code is None else 1  # sys.exit(None) / sys.exit("message")
    return {
        "via": "in-process",
        "code": code,
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "crash": crash,
    }


def _in_subprocess(argv: list[str]) -> dict[str, object]:
    proc = subprocess.run(
        [MLPIPE, *argv], capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    return {
        "via": "subprocess",
        "code": proc.returncode,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "crash": None,
    }


if __name__ == "__main__":
    main()
