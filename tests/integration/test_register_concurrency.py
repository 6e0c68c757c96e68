"""Eight concurrent ``mlpipe register`` of one model name, 10 rounds each (embedded registry).

Each worker process (``register_worker``) runs the CLI's own entry point 10
times; two rounds go through a real ``mlpipe`` process. Every attempt must end
in success (exit 0, the new version as JSON) or in the registry's clean
retryable error (exit 3, one ``error:`` line saying to retry, no traceback).
Afterwards: the versions reported are unique, each is in the registry with the
tags its attempt gave it, and nothing is orphaned: every MLflow run and logged
model that is not deleted, and every artifact directory on disk, belongs to a
registered version. Three single-process cases pin down the same paths
deterministically: contention retried, contention outlasting the retries, and
a failure that is not contention.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlpipe import registry
from mlpipe.config import load_settings
from mlpipe.errors import StoreBusy
from mlpipe.registry import _registration
from tests.conftest import REPO, train_toy_model
from tests.integration.register_worker import _in_process

pytestmark = pytest.mark.integration

WORKERS = 8
ROUNDS = 10
SUBPROCESS_ROUNDS = f"0:0,1:{ROUNDS - 1}"  # WORKER:ROUND attempts run as a real `mlpipe`
READY_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 400.0


def _start_workers(home: Path, run_dir: Path, model: Path, dataset: Path) -> subprocess.Popen:  # type: ignore[type-arg]
    """One process that imports once and forks the workers, in a process group of its own."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.register_worker",
            str(run_dir),
            f"--workers={WORKERS}",
            f"--rounds={ROUNDS}",
            f"--model={model}",
            f"--dataset={dataset}",
            f"--subprocess-rounds={SUBPROCESS_ROUNDS}",
        ],
        cwd=REPO,
        env={**os.environ, "MLPIPE_HOME": str(home)},
        stdout=(run_dir / "workers.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _run(launcher: subprocess.Popen, run_dir: Path) -> float:  # type: ignore[type-arg]
    """Wait until every worker is ready, start them at once; the race's wall time."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while len(list(run_dir.glob("ready-*"))) < WORKERS:
        assert launcher.poll() is None, _log(run_dir)
        assert time.monotonic() < deadline, f"workers not ready in time\n{_log(run_dir)}"
        time.sleep(0.05)
    started = time.monotonic()
    (run_dir / "start").touch()
    launcher.wait(timeout=RUN_TIMEOUT_S)
    assert launcher.returncode == 0, _log(run_dir)
    return time.monotonic() - started


def _log(run_dir: Path) -> str:
    return (run_dir / "workers.log").read_text()[-5000:]


def test_concurrent_registrations_end_clean(
    home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, dataset = train_toy_model(home / "in")
    settings = load_settings()
    registry.client(settings)  # the registry exists, as after `mlpipe init`; the model does not
    run_dir = tmp_path_factory.mktemp("register-run")
    launcher = _start_workers(home, run_dir, model, dataset)
    try:
        race_s = _run(launcher, run_dir)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)  # the launcher and its forked workers
            launcher.wait()

    attempts = [
        json.loads(line)
        for path in sorted(run_dir.glob("results-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert len(attempts) == WORKERS * ROUNDS
    assert sum(a["via"] == "subprocess" for a in attempts) == SUBPROCESS_ROUNDS.count(":")
    succeeded = []
    for a in attempts:
        where = f"worker {a['worker']} round {a['round']} ({a['via']})"
        assert a["crash"] is None, f"{where} escaped the CLI's error boundary:\n{a['crash']}"
        assert "Traceback" not in a["stderr"], f"{where}:\n{a['stderr']}"
        if a["code"] == 0:
            succeeded.append((a, json.loads(a["stdout"])))
            continue
        assert a["code"] == StoreBusy.exit_code, f"{where} exit {a['code']}:\n{a['stderr']}"
        lines = a["stderr"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{where}:\n{a['stderr']}"
        assert "retry" in lines[0] and "nothing was registered" in lines[0], lines[0]
    failed = len(attempts) - len(succeeded)
    print(f"{len(succeeded)} registered, {failed} refused as busy, race {race_s:.1f} s")
    assert len(succeeded) >= len(attempts) * 0.9, f"{failed} of {len(attempts)} attempts failed"

    versions = [info["version"] for _, info in succeeded]
    assert len(set(versions)) == len(versions), "a version number was handed out twice"
    live = {
        str(mv.version): mv
        for mv in registry.client(settings).search_model_versions("name='fraud'")
    }
    assert set(live) == set(versions), "registered versions differ from the successes"
    for attempt, info in succeeded:
        tags = live[info["version"]].tags
        assert tags["mlpipe.metric.worker"] == repr(float(attempt["worker"]))
        assert tags["mlpipe.metric.round"] == repr(float(attempt["round"]))
        assert len(tags["mlpipe.artifact_sha256"]) == 64
        assert tags["mlpipe.reference_uri"] == f"runs:/{info['run_id']}/reference/reference.parquet"
    for version in (min(versions, key=int), max(versions, key=int)):
        registry.load_verified(settings, "fraud", version)  # bytes match the recorded hash

    _assert_nothing_orphaned(home, settings)


def _assert_nothing_orphaned(home: Path, settings) -> None:  # type: ignore[no-untyped-def]
    """Runs, logged models and artifact directories: exactly those of the live versions
    (``fraud``'s and each worker's ``warmup-<worker>``)."""
    from mlflow.entities import ViewType

    c = registry.client(settings)
    exp = registry._client.experiment_id(settings)
    live = c.search_model_versions(max_results=10_000)
    assert len(live) == len({(mv.name, mv.version) for mv in live})
    run_ids = {mv.run_id for mv in live}
    model_ids = {mv.source.removeprefix("models:/") for mv in live}
    assert len(run_ids) == len(model_ids) == len(live), "two versions share a run or a model"
    runs = c.search_runs([exp], run_view_type=ViewType.ACTIVE_ONLY, max_results=10_000)
    assert {r.info.run_id for r in runs} == run_ids, "an MLflow run belongs to no version"
    logged = c.search_logged_models([exp], max_results=10_000)
    active = {m.model_id for m in logged}
    assert active == model_ids, "a logged model belongs to no version"
    root = home / ".mlpipe" / "artifacts"
    on_disk_runs = {p.name for p in root.iterdir() if p.name != "models"}
    models_dir = root / "models"
    on_disk_models = {p.name for p in models_dir.iterdir()} if models_dir.exists() else set()
    assert on_disk_runs == run_ids, f"orphaned run artifacts: {sorted(on_disk_runs - run_ids)}"
    assert on_disk_models == model_ids, (
        f"orphaned model artifacts: {sorted(on_disk_models - model_ids)}"
    )


def _locked(calls: list[int], fail_first: int):  # type: ignore[no-untyped-def]
    """A stand-in for ``MlflowClient.create_model_version`` that is locked ``fail_first`` times."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    real = MlflowClient.create_model_version

    def create(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) <= fail_first:
            raise MlflowException(
                "(sqlite3.OperationalError) database is locked\n[SQL: SELECT max(...)]",
                error_code="TEMPORARILY_UNAVAILABLE",
            )
        return real(self, *args, **kwargs)

    return create


def test_contention_is_retried_and_the_failed_attempts_leave_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    model, dataset = train_toy_model(home / "in")
    settings = load_settings()
    calls: list[int] = []
    monkeypatch.setattr(MlflowClient, "create_model_version", _locked(calls, fail_first=2))
    monkeypatch.setattr(_registration, "BACKOFF_S", 0.01)
    info = registry.register(settings, "fraud", dataset=dataset, model_path=model)
    assert (info.version, len(calls)) == ("1", 3)
    _assert_nothing_orphaned(home, settings)


def test_contention_past_the_retries_is_a_clean_retryable_error(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    model, dataset = train_toy_model(home / "in")
    settings = load_settings()
    registry.register(settings, "fraud", dataset=dataset, model_path=model)
    calls: list[int] = []
    monkeypatch.setattr(MlflowClient, "create_model_version", _locked(calls, fail_first=99))
    monkeypatch.setattr(_registration, "BACKOFF_S", 0.01)
    with pytest.raises(StoreBusy) as caught:
        registry.register(settings, "fraud", dataset=dataset, model_path=model)
    message = str(caught.value)
    assert len(calls) == _registration.ATTEMPTS
    assert "\n" not in message and message.endswith("nothing was registered, retry"), message
    assert "database is locked" in message and caught.value.exit_code == 3
    # the same through the CLI's entry point: exit 3, that one line, no traceback
    outcome = _in_process(["register", "fraud", "--model", str(model), "--dataset", str(dataset)])
    assert (outcome["code"], outcome["crash"], outcome["stdout"]) == (3, None, "")
    assert outcome["stderr"] == f"error: {message}\n"
    assert [str(v.version) for v in registry.client(settings).search_model_versions()] == ["1"]
    _assert_nothing_orphaned(home, settings)


def test_a_failure_after_logging_discards_the_run(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, dataset = train_toy_model(home / "in")
    settings = load_settings()

    def broken(root: Path) -> str:
        raise RuntimeError(f"cannot hash {root}")

    monkeypatch.setattr(_registration._lineage, "tree_sha256", broken)
    with pytest.raises(RuntimeError, match="cannot hash"):
        registry.register(settings, "fraud", dataset=dataset, model_path=model)
    assert registry.client(settings).search_model_versions() == []
    _assert_nothing_orphaned(home, settings)
