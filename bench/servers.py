"""Start and stop the systems under test, each in its own process group.

Every process started here is registered; :func:`stop_all` (called from the
runner's ``finally``, from ``atexit`` and on SIGTERM/SIGINT) sends SIGTERM to
each group, then SIGKILL to whatever is left after a grace period.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
_STARTED: list[subprocess.Popen[bytes]] = []


@dataclass
class SystemSpec:
    """How to start one system and talk to it."""

    name: str
    argv: list[str]
    env: dict[str, str]
    path: str  # the POST endpoint
    ready_path: str  # GET until it answers 200
    label: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)


def _children() -> dict[int, list[int]]:
    """ppid → child pids, from /proc (Linux)."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``. BentoML starts its workers in sessions of their own,
    so killing the launcher's process group alone can leave them behind."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the process group and every descendant; SIGKILL what is left after ``grace_s``."""
    pids = [proc.pid, *descendants(proc.pid)]
    groups = {proc.pid}
    for pid in pids:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    groups.discard(os.getpgrp())  # never the runner's own group
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            proc.poll()
            if not any(_alive(pid) for pid in pids):
                break
            time.sleep(0.1)
        else:
            continue
        break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def stop_all() -> None:
    """Stop every process group this module started (idempotent)."""
    while _STARTED:
        _stop(_STARTED.pop())


def _on_signal(signum: int, _frame: object) -> None:
    stop_all()
    raise SystemExit(128 + signum)


atexit.register(stop_all)


def install_signal_handlers() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)


@dataclass
class Started:
    """A system whose process is running (maybe not ready yet)."""

    spec: SystemSpec
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path


def start(spec: SystemSpec, port: int, log_dir: Path) -> Started:
    """Start ``spec`` on ``port`` in a new session, logging into ``log_dir`` (see stop_all)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    label = spec.label.replace("/", "_") if spec.label else ""  # a tree=PATH variant
    log_path = log_dir / f"{spec.name}{'-' + label if label else ''}.log"
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            spec.argv,
            env={**spec.env, **spec.extra_env},
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _STARTED.append(proc)
    return Started(spec, port, proc, log_path)


def wait_ready(started: Started, timeout_s: float = 180.0) -> None:
    """Return once it answers its ready path; RuntimeError if it exits, TimeoutError if slow."""
    _wait_ready(started.proc, started.port, started.spec.ready_path, timeout_s, started.log_path)


def stop(started: Started) -> None:
    """Stop the system's process groups (SIGTERM, then SIGKILL)."""
    _stop(started.proc)
    with contextlib.suppress(ValueError):
        _STARTED.remove(started.proc)


@contextlib.contextmanager
def running(
    spec: SystemSpec, port: int, log_dir: Path, timeout_s: float = 180.0
) -> Iterator[Started]:
    """Start ``spec`` on ``port``, wait until it is ready, yield it; always stop it."""
    started = start(spec, port, log_dir)
    try:
        wait_ready(started, timeout_s)
        yield started
    finally:
        stop(started)


def _wait_ready(
    proc: subprocess.Popen[bytes], port: int, path: str, timeout_s: float, log: Path
) -> None:
    deadline = time.monotonic() + timeout_s
    url = f"http://127.0.0.1:{port}{path}"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{proc.args[:4]} exited with {proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 (loopback)
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} not ready after {timeout_s:.0f} s (log: {log})")


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(BENTOML_DO_NOT_TRACK="true", PYTHONUNBUFFERED="1")
    # mlflow models serve execs `uvicorn` from PATH
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MLPIPE_SERVING__WORKERS", None)
    return env


def mlpipe_spec(
    home: Path, port: int, overrides: dict[str, str] | None = None, label: str | None = None
) -> SystemSpec:
    env = base_env()
    env["MLPIPE_HOME"] = str(home)
    return SystemSpec(
        "mlpipe",
        [str(BIN / "mlpipe"), "serve", "--port", str(port), "--host", "127.0.0.1"],
        env,
        "/predict",
        "/readyz",
        label=label,
        extra_env=overrides or {},
    )


def bentoml_spec(
    home: Path, port: int, *, tuned: bool, workers: int, max_batch_size: int, max_latency_ms: int
) -> SystemSpec:
    env = base_env()
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{home / '.mlpipe' / 'mlflow.db'}",
        BENCH_MODEL_URI="models:/fraud/1",
        MLFLOW_ALLOW_PICKLE_DESERIALIZATION="true",
    )
    if tuned:
        env.update(
            BENCH_TUNED="1",
            BENCH_WORKERS=str(workers),
            BENCH_MAX_BATCH_SIZE=str(max_batch_size),
            BENCH_MAX_LATENCY_MS=str(max_latency_ms),
        )
    argv = [
        sys.executable,
        "-m",
        "bentoml",
        "serve",
        "service:Plain",
        "--working-dir",
        str(ROOT / "bench/baselines/bentoml_plain"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    return SystemSpec("bentoml-tuned" if tuned else "bentoml", argv, env, "/predict", "/readyz")


def mlflow_spec(home: Path, port: int) -> SystemSpec:
    env = base_env()
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{home / '.mlpipe' / 'mlflow.db'}",
        MLFLOW_ALLOW_PICKLE_DESERIALIZATION="true",
    )
    argv = [
        str(BIN / "mlflow"),
        "models",
        "serve",
        "-m",
        "models:/fraud/1",
        "--env-manager",
        "local",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
    ]
    return SystemSpec("mlflow", argv, env, "/invocations", "/ping")


def floor_spec(port: int, workers: int) -> SystemSpec:
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "app:app",
        "--app-dir",
        str(ROOT / "bench/baselines/floor"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
        "--log-level",
        "warning",
        "--loop",
        "uvloop",
        "--http",
        "httptools",
    ]
    spec = SystemSpec("floor", argv, base_env(), "/predict", "/ready")
    return spec
