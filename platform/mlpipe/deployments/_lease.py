"""The lease a running rollout holds on its model in the control plane.

A rollout inserts one ``rollout_leases`` row (owner, pid, host, started,
heartbeat, expiry), renews it from a heartbeat thread and deletes it when it
ends, however it ends in Python (pass, fail, an error, SIGINT or SIGTERM: the
canary is taken out first). A SIGKILL, an OOM kill or a lost machine leaves the
row behind: once its expiry passes, or at once when its process is gone from
this host, the rollout is *abandoned*. Then ``status`` says so, and ``promote``
and a new ``rollout`` refuse to treat its canary as analysed until
``rollout --resume`` takes the lease over or ``rollback`` ends it.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Literal

from mlpipe.config import Settings
from mlpipe.deployments._plane import control_plane
from mlpipe.deployments._record import RolloutLease
from mlpipe.errors import Conflict, InvalidInput, RolloutHeld

LEASE_TTL_S = 60.0  # a rollout unheard of this long is abandoned
HEARTBEAT_S = 10.0

LeaseState = Literal["running", "abandoned"]


@dataclass(frozen=True)
class RolloutState:
    """A rollout's lease as ``status`` shows it."""

    lease: RolloutLease
    state: LeaseState

    def describe(self) -> str:
        lease = self.lease
        who = f"pid {lease.pid} on {lease.host}"
        beat = f"last heartbeat {lease.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC"
        return (
            f"rollout of {lease.model} v{lease.version} at {lease.weight:g}% "
            f"{self.state} ({who}, {beat})"
        )


def rollout_state(settings: Settings, model: str) -> RolloutState | None:
    """The lease on ``model`` and whether its rollout is still alive; None when there is none."""
    lease = control_plane(settings).lease(model)
    if lease is None:
        return None
    return RolloutState(lease, "abandoned" if _abandoned(lease) else "running")


def _abandoned(lease: RolloutLease) -> bool:
    if datetime.now(UTC) >= lease.expires_at:
        return True
    return lease.host == socket.gethostname() and not _pid_alive(lease.pid)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def refusal(found: RolloutState) -> RolloutHeld:
    """The one-line refusal while another rollout holds the model, naming the way out."""
    model = found.lease.model
    if found.state == "running":
        return RolloutHeld(
            f"a {found.describe()}; wait for it, or end it with `mlpipe rollback {model}`"
        )
    return RolloutHeld(
        f"the {found.describe()}: its canary was never fully analysed; "
        f"end it with `mlpipe rollout {model} --resume` or `mlpipe rollback {model}`"
    )


def require_no_rollout(settings: Settings, model: str, owner: str | None = None) -> None:
    """Raise :class:`RolloutHeld` while a rollout other than ``owner``'s holds ``model``."""
    found = rollout_state(settings, model)
    if found is not None and found.lease.owner != owner:
        raise refusal(found)


def require_no_running_rollout(
    settings: Settings, model: str, owner: str | None = None
) -> RolloutState | None:
    """Raise :class:`RolloutHeld` while a *running* rollout other than ``owner``'s holds ``model``.

    Returns an abandoned rollout's state (its lease is the caller's to end), else None.
    """
    found = rollout_state(settings, model)
    if found is None or found.lease.owner == owner:
        return None
    if found.state == "running":
        raise RolloutHeld(
            f"a {found.describe()}; nothing changed. Wait for it, stop it with "
            f"`mlpipe rollback {model}` (or SIGINT to pid {found.lease.pid}), "
            "or take over with --force"
        )
    return found


class LeaseHold:
    """The lease this process holds; a daemon thread renews it every ``HEARTBEAT_S``."""

    def __init__(self, settings: Settings, lease: RolloutLease) -> None:
        self.settings = settings
        self.lease = lease
        self.weight = lease.weight
        self.generation: int | None = None  # of the record as this rollout last committed it
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="mlpipe-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def owner(self) -> str:
        return self.lease.owner

    def renew(self, weight: float | None = None) -> None:
        """Renew now (at ``weight``); raise Conflict when another command ended the rollout."""
        if weight is not None:
            self.weight = weight
        expires = datetime.now(UTC) + timedelta(seconds=LEASE_TTL_S)
        held = control_plane(self.settings).renew_lease(
            self.lease.model, self.owner, expires_at=expires, weight=self.weight
        )
        if not held or self.lost:
            self.lost = True
            raise Conflict(
                f"the rollout of {self.lease.model} was ended by another command "
                "(rollback, undeploy); it changes nothing more"
            )

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.renew()
            except Conflict:
                return
            except Exception:  # noqa: BLE001 - a missed beat is retried; expiry is the backstop
                continue

    def release(self) -> None:
        self._stop.set()
        control_plane(self.settings).drop_lease(self.lease.model, self.owner)


@contextmanager
def hold_lease(
    settings: Settings, model: str, version: str | None, *, resume: bool
) -> Iterator[LeaseHold]:
    """Take the lease on ``model`` (a new one, or an abandoned one on ``resume``), then release it.

    Raises Conflict while another rollout runs or one was abandoned (without
    ``resume``), InvalidInput for ``resume`` with nothing to resume.
    """
    lease = _take(settings, model, version, resume=resume)
    hold = LeaseHold(settings, lease)
    hold.start()
    try:
        yield hold
    finally:
        hold.release()


def _take(settings: Settings, model: str, version: str | None, *, resume: bool) -> RolloutLease:
    plane = control_plane(settings)
    found = rollout_state(settings, model)
    if resume and (found is None or found.state == "running"):
        if found is None:
            raise InvalidInput(f"no abandoned rollout of {model} to resume")
        raise refusal(found)
    if not resume and found is not None:
        raise refusal(found)
    now = datetime.now(UTC)
    old = found.lease if found else None
    lease = RolloutLease(
        model=model,
        version=old.version if old else str(version),
        weight=old.weight if old else 0.0,
        owner=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}",
        pid=os.getpid(),
        host=socket.gethostname(),
        started_at=now,
        heartbeat_at=now,
        expires_at=now + timedelta(seconds=LEASE_TTL_S),
    )
    if not plane.take_lease(lease, replacing=old.owner if old else None):
        raise Conflict(f"another command took the rollout lease on {model} first; nothing changed")
    return lease


_INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
_REDELIVER_S = 0.05  # a signal that lands in a database call comes again this much later


def in_database_call(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside SQLAlchemy (a query, a commit, a fetch)."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("sqlalchemy"):
            return True
        frame = frame.f_back
    return False


@contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise KeyboardInterrupt (main thread only).

    SIGINT is handled here rather than left to Python's default, which a process
    started in the background never gets: it inherits SIGINT ignored. The first
    signal interrupts; further ones are ignored until the block ends, so the
    clean-up that follows (taking the canary out) is not cut short.

    A signal that arrives during a database call is sent again ``_REDELIVER_S``
    later, until it finds the block outside one: raised inside a fetch, the
    interrupt made SQLAlchemy drop the connection and print "Error closing
    cursor" with a traceback on the way out, though the canary was taken out.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if in_database_call(frame):
            threading.Timer(_REDELIVER_S, os.kill, (os.getpid(), signum)).start()
            return
        for each in _INTERRUPTS:
            signal.signal(each, signal.SIG_IGN)
        # Ctrl-C reads as Python's own KeyboardInterrupt; SIGTERM names itself.
        raise KeyboardInterrupt(*(() if signum == signal.SIGINT else (f"signal {signum}",)))

    previous = {each: signal.signal(each, interrupt) for each in _INTERRUPTS}
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)
