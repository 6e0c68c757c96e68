"""A rollout's lease on its model (control plane on SQLite in tmp_path): running or abandoned,
the refusals naming the way out, taking, resuming, renewing and releasing it, and signals
read as an interrupt (the rollouts themselves are in tests/integration/test_rollout.py)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mlpipe.config import Settings
from mlpipe.deployments import RolloutLease, control_plane, rollout_state
from mlpipe.deployments._lease import (
    LEASE_TTL_S,
    RolloutState,
    hold_lease,
    refusal,
    require_no_rollout,
    require_no_running_rollout,
    signals_as_interrupt,
)
from mlpipe.errors import Conflict, InvalidInput, RolloutHeld

GONE_PID = 2**31 - 2  # above any pid_max: no such process
BEAT = datetime(2026, 12, 6, 9, 30, 5, tzinfo=UTC)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path, control_url=f"sqlite:///{tmp_path / 'control.db'}")


def _lease(
    *, pid: int = os.getpid(), host: str | None = None, expires_in_s: float = 60, owner: str = "x"
) -> RolloutLease:
    now = datetime.now(UTC)
    return RolloutLease(
        model="fraud",
        version="2",
        weight=25.0,
        owner=owner,
        pid=pid,
        host=host or socket.gethostname(),
        started_at=now,
        heartbeat_at=BEAT,
        expires_at=now + timedelta(seconds=expires_in_s),
    )


def _plant(settings: Settings, lease: RolloutLease) -> None:
    assert control_plane(settings).take_lease(lease)


def test_no_lease_is_no_rollout(settings: Settings) -> None:
    assert rollout_state(settings, "fraud") is None
    require_no_rollout(settings, "fraud")
    assert require_no_running_rollout(settings, "fraud") is None


@pytest.mark.parametrize(
    ("fields", "state"),
    [
        ({}, "running"),  # this process, on this host, not expired
        ({"pid": GONE_PID, "host": "elsewhere"}, "running"),  # another host's pid: not checked
        ({"pid": GONE_PID}, "abandoned"),  # its process is gone from this host
        ({"host": "elsewhere", "expires_in_s": -1}, "abandoned"),  # unheard of past its expiry
    ],
)
def test_a_lease_is_running_until_it_expires_or_its_process_is_gone(
    settings: Settings, fields: dict[str, Any], state: str
) -> None:
    lease = _lease(**fields)
    _plant(settings, lease)
    found = rollout_state(settings, "fraud")
    assert found is not None
    assert (found.lease, found.state) == (lease, state)


def test_describe_and_the_refusals_name_the_rollout_and_the_way_out() -> None:
    lease = _lease(pid=31337, host="ci-host")
    running, abandoned = RolloutState(lease, "running"), RolloutState(lease, "abandoned")
    described = "rollout of fraud v2 at 25% running (pid 31337 on ci-host, last heartbeat "
    assert running.describe() == described + "2026-12-06 09:30:05 UTC)"
    assert str(refusal(running)) == (
        "a " + running.describe() + "; wait for it, or end it with `mlpipe rollback fraud`"
    )
    assert str(refusal(abandoned)) == (
        "the " + abandoned.describe() + ": its canary was never fully analysed; end it with "
        "`mlpipe rollout fraud --resume` or `mlpipe rollback fraud`"
    )


def test_require_no_rollout_lets_only_the_owner_through(settings: Settings) -> None:
    _plant(settings, _lease(owner="me"))
    require_no_rollout(settings, "fraud", owner="me")
    with pytest.raises(RolloutHeld, match=r"^a rollout of fraud v2 at 25% running"):
        require_no_rollout(settings, "fraud", owner="someone else")


def test_require_no_running_rollout_hands_back_an_abandoned_one(settings: Settings) -> None:
    _plant(settings, _lease(pid=GONE_PID))
    found = require_no_running_rollout(settings, "fraud")
    assert found is not None and found.state == "abandoned"


def test_require_no_running_rollout_refuses_a_running_one_naming_its_pid(
    settings: Settings,
) -> None:
    _plant(settings, _lease())
    with pytest.raises(RolloutHeld) as raised:
        require_no_running_rollout(settings, "fraud")
    assert str(raised.value).endswith(
        f"; nothing changed. Wait for it, stop it with `mlpipe rollback fraud` (or SIGINT to "
        f"pid {os.getpid()}), or take over with --force"
    )


def test_hold_lease_takes_a_new_lease_and_releases_it(settings: Settings) -> None:
    before = datetime.now(UTC)
    with hold_lease(settings, "fraud", "3", resume=False) as hold:
        held = control_plane(settings).lease("fraud")
        assert held is not None and held == hold.lease
        assert (held.version, held.weight, held.pid) == ("3", 0.0, os.getpid())
        assert held.owner.startswith(f"{socket.gethostname()}:{os.getpid()}:")
        assert held.expires_at >= before + timedelta(seconds=LEASE_TTL_S)
        with pytest.raises(RolloutHeld, match=r"^a rollout of fraud v3 at 0% running"):
            with hold_lease(settings, "fraud", "4", resume=False):
                pass
    assert rollout_state(settings, "fraud") is None


def test_resume_needs_an_abandoned_rollout(settings: Settings) -> None:
    with pytest.raises(InvalidInput, match=r"^no abandoned rollout of fraud to resume$"):
        with hold_lease(settings, "fraud", None, resume=True):
            pass
    _plant(settings, _lease(owner="runner"))
    with pytest.raises(RolloutHeld, match="running"):
        with hold_lease(settings, "fraud", None, resume=True):
            pass
    assert _lease_of(settings).owner == "runner"  # type: ignore[union-attr]


def _lease_of(settings: Settings) -> RolloutLease | None:
    return control_plane(settings).lease("fraud")


def test_resume_takes_over_an_abandoned_lease_at_its_version_and_weight(
    settings: Settings,
) -> None:
    _plant(settings, _lease(pid=GONE_PID, owner="dead"))
    with hold_lease(settings, "fraud", None, resume=True) as hold:
        assert (hold.lease.version, hold.lease.weight) == ("2", 25.0)
        assert _lease_of(settings).owner == hold.owner != "dead"  # type: ignore[union-attr]
    assert _lease_of(settings) is None


def test_renew_moves_the_weight_and_a_lease_ended_elsewhere_is_lost(settings: Settings) -> None:
    with hold_lease(settings, "fraud", "3", resume=False) as hold:
        hold.renew(weight=50.0)
        assert _lease_of(settings).weight == 50.0  # type: ignore[union-attr]
        control_plane(settings).drop_lease("fraud")  # as `mlpipe rollback` ends it
        with pytest.raises(Conflict) as raised:
            hold.renew()
        assert str(raised.value) == (
            "the rollout of fraud was ended by another command (rollback, undeploy); "
            "it changes nothing more"
        )
        assert hold.lost
        _plant(settings, _lease(owner=hold.owner))  # even if its row came back, it stays lost
        with pytest.raises(Conflict):
            hold.renew()


def test_sigterm_in_the_block_is_an_interrupt_naming_the_signal() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only; SIGTERM would end the run")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as raised:
        with signals_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
    assert raised.value.args == (f"signal {int(signal.SIGTERM)}",)
    assert signal.getsignal(signal.SIGTERM) == before


def test_an_interrupt_in_a_database_call_waits_until_the_call_is_done() -> None:
    """Raised inside a fetch, SQLAlchemy dropped the connection and printed a traceback."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only; SIGTERM would end the run")
    code = (
        "def query():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.3)\n"
        "    return 1\n"
    )
    db: dict[str, Any] = {"__name__": "sqlalchemy.engine.under_test", "os": os, "signal": signal}
    db["time"] = time
    exec(code, db)  # a function whose module is SQLAlchemy's, as far as a frame can tell
    done: list[int] = []
    with pytest.raises(KeyboardInterrupt) as raised:
        with signals_as_interrupt():
            done.append(db["query"]())  # not interrupted inside
            time.sleep(5)  # the signal, sent again, interrupts here
    assert done == [1]
    assert raised.value.args == (f"signal {int(signal.SIGTERM)}",)


def test_outside_the_main_thread_the_handlers_are_left_alone() -> None:
    seen: list[object] = []

    def in_a_thread() -> None:
        with signals_as_interrupt():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join(timeout=10)
    assert seen == [before]
