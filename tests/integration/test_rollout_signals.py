"""A real ``mlpipe rollout`` process stopped by SIGTERM or SIGKILL never leaves its canary unowned.

``fraud`` v1 is the champion and v2 rolls out with a 10-minute interval: the
process sets the 5 % canary, takes the rollout lease and waits. SIGTERM is
handled as SIGINT: the canary is rolled back and the process exits as for
Ctrl-C (130). SIGKILL leaves the lease behind: ``status`` says the rollout was
abandoned, ``promote`` (even ``--force``) refuses in one line naming the way
out, and ``rollback`` ends it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlpipe import deployments
from mlpipe.config import load_settings
from tests.conftest import MLPIPE

pytestmark = pytest.mark.integration
START_TIMEOUT_S = 120.0


def _dispositions(sigint: signal.Handlers) -> Callable[[], None]:
    """What the child starts with: SIGTERM default, SIGINT ``sigint``, whatever this process
    inherited (a job started in the background runs with SIGINT ignored)."""

    def reset() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, sigint)

    return reset


def _start_rollout(home: Path, sigint: signal.Handlers = signal.SIG_DFL) -> subprocess.Popen[str]:
    settings = load_settings()
    deployments.deploy(settings, "fraud", "1", reason="first")
    argv = [MLPIPE, "rollout", "fraud", "--version", "2", "--steps", "5,100", "--interval", "10m"]
    proc = subprocess.Popen(
        argv,
        cwd=home,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_dispositions(sigint),
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while deployments.rollout_state(settings, "fraud") is None or (
        deployments.status(settings, "fraud").canary != "2"
    ):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the rollout did not start"
        time.sleep(0.1)
    return proc


def _stopped(proc: subprocess.Popen[str]) -> str:
    """Its stderr once it exits; killed (never left running) if it does not within 120 s."""
    try:
        return proc.communicate(timeout=120)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_rolls_the_canary_back_as_sigint_does(registered_home: Path, signum: int) -> None:
    settings = load_settings()
    proc = _start_rollout(registered_home)
    proc.send_signal(signum)
    err = _stopped(proc)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    record = deployments.status(settings, "fraud")
    assert (record.champion, record.canary) == ("1", None)
    (entry,) = deployments.history(settings, "fraud", limit=1)
    assert entry.action == "rollback-canary"
    interrupt = (
        "KeyboardInterrupt('signal 15')" if signum == signal.SIGTERM else "KeyboardInterrupt()"
    )
    assert entry.reason == f"rollout step 5%: aborted ({interrupt})"
    assert deployments.rollout_state(settings, "fraud") is None


def test_sigint_rolls_the_canary_back_when_started_with_sigint_ignored(
    registered_home: Path,
) -> None:
    """A scheduler's background job inherits SIGINT ignored; the rollout handles it itself."""
    settings = load_settings()
    proc = _start_rollout(registered_home, sigint=signal.SIG_IGN)
    proc.send_signal(signal.SIGINT)
    err = _stopped(proc)
    assert proc.returncode == 130, err
    record = deployments.status(settings, "fraud")
    assert (record.champion, record.canary) == ("1", None)
    (entry,) = deployments.history(settings, "fraud", limit=1)
    assert entry.reason == "rollout step 5%: aborted (KeyboardInterrupt())"
    assert deployments.rollout_state(settings, "fraud") is None


def test_sigkill_leaves_an_abandoned_rollout_that_promote_refuses(
    registered_home: Path, cli_in_process: Any
) -> None:
    settings = load_settings()
    proc = _start_rollout(registered_home)
    proc.kill()
    proc.communicate(timeout=60)  # reaped: its pid is gone from this host
    found = deployments.rollout_state(settings, "fraud")
    assert found is not None and found.state == "abandoned"
    status = cli_in_process("status", "fraud")
    assert status.returncode == 0, status.stderr
    assert f"rollout of fraud v2 at 5% abandoned (pid {proc.pid} on " in status.stderr
    way_out = "end it with `mlpipe rollout fraud --resume` or `mlpipe rollback fraud`"
    assert way_out in status.stderr
    before = deployments.status(settings, "fraud")
    refused = cli_in_process("promote", "fraud", "--force")
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: the rollout of fraud v2 at 5% abandoned") and way_out in line
    assert deployments.status(settings, "fraud") == before
    rolled = cli_in_process("rollback", "fraud")
    assert rolled.returncode == 0, rolled.stderr
    record = deployments.status(settings, "fraud")
    assert (record.champion, record.canary) == ("1", None)
    assert deployments.rollout_state(settings, "fraud") is None


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    return line


def test_deploy_during_a_running_rollout_is_refused_unless_forced(
    registered_home: Path, cli_in_process: Any
) -> None:
    settings = load_settings()
    proc = _start_rollout(registered_home)
    try:
        before = deployments.status(settings, "fraud")
        for argv in (("--canary", "50"), ()):
            refused = cli_in_process("deploy", "fraud", "--version", "2", *argv)
            assert refused.returncode == 2, refused.stderr
            line = _one_line(refused)
            assert line.startswith("error: a rollout of fraud v2 at 5% running (pid "), line
            assert "stop it with `mlpipe rollback fraud`" in line and "--force" in line
            assert deployments.status(settings, "fraud") == before
        forced = cli_in_process("deploy", "fraud", "--version", "2", "--canary", "50", "--force")
        assert forced.returncode == 0, forced.stderr
        assert deployments.rollout_state(settings, "fraud") is None
    finally:
        proc.send_signal(signal.SIGTERM)
        _stopped(proc)
    record = deployments.status(settings, "fraud")  # the stopped rollout left the takeover alone
    assert (record.champion, record.canary, record.canary_weight) == ("1", "2", 50.0)
    assert record.generation == before.generation + 1


def test_deploy_over_an_abandoned_rollout_ends_it(
    registered_home: Path, cli_in_process: Any
) -> None:
    settings = load_settings()
    proc = _start_rollout(registered_home)
    proc.kill()
    proc.communicate(timeout=60)
    deployed = cli_in_process("deploy", "fraud", "--version", "2", "--canary", "50")
    assert deployed.returncode == 0, deployed.stderr
    status = cli_in_process("status", "fraud")
    assert status.returncode == 0, status.stderr
    assert "rollout of fraud" not in status.stderr and "2 (50%)" in status.stdout
    assert deployments.rollout_state(settings, "fraud") is None
