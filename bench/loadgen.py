"""The bench's load generator: ``bench/loadgen.c``, built on first use and driven from here.

Closed loop (``concurrency`` connections, each sending its next request when
the last is answered) and open loop (a fixed arrival ``rate`` whatever the
answers, latency from the *scheduled* arrival, so a stalled server shows in
p99 instead of slowing the generator down). Why C and not asyncio or wrk:
the generator shares the machine's two cores with the server it measures,
and the asyncio client cost 96-153 µs of CPU a request open loop (decision 017);
wrk is closed loop only and wrk2 is not in Debian.

Request ``i`` sends ``bodies(i)``. An open loop writes one body for each of
its arrivals; a closed loop writes ``CLOSED_BODIES`` and request ``i`` sends
body ``i mod CLOSED_BODIES``. Bodies are written once per body factory and
reused by every run that needs no more of them.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.summary import Sample

BodyFactory = Callable[[int], bytes]

SOURCE = Path(__file__).with_name("loadgen.c")
BUILD = Path(__file__).parent / "results" / ".build"
CLOSED_BODIES = 65_536
_KEEP_BODIES = 8
_RECORD = np.dtype([("latency", "<f8"), ("status", "<i4"), ("done_ms", "<i4")])
_bodies: dict[int, tuple[BodyFactory, Path, int]] = {}
_scratch: list[Path] = []
_runs = itertools.count()


def binary() -> Path:
    """The built generator, (re)built from ``loadgen.c`` when missing or older than it."""
    out = BUILD / "loadgen"
    if out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError(
            f"the bench builds its load generator from {SOURCE} and needs a C compiler: "
            "none found (install gcc, or set CC)"
        )
    BUILD.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"loadgen.{os.getpid()}")
    built = subprocess.run(
        [cc, "-O2", "-Wall", "-o", str(tmp), str(SOURCE)], capture_output=True, text=True
    )
    if built.returncode != 0:
        raise RuntimeError(f"building {SOURCE} with {cc} failed:\n{built.stderr}")
    tmp.replace(out)  # atomic: parallel builders never see a half-written binary
    return out


def _scratch_dir() -> Path:
    if not _scratch:
        _scratch.append(Path(tempfile.mkdtemp(prefix="mlpipe-loadgen-")))
        atexit.register(shutil.rmtree, _scratch[0], True)
    return _scratch[0]


def _bodies_file(bodies: BodyFactory, count: int) -> Path:
    """``bodies(0..count-1)``, one a line, in a file kept for later runs of the same factory."""
    cached = _bodies.pop(id(bodies), None)
    if cached and cached[0] is bodies and cached[2] >= count:
        _bodies[id(bodies)] = cached  # now the latest used
        return cached[1]
    if cached:
        cached[1].unlink(missing_ok=True)
    path = _scratch_dir() / f"bodies-{id(bodies)}-{count}"
    with path.open("wb") as f:
        for i in range(count):
            body = bodies(i)
            if b"\n" in body:
                raise ValueError(f"body {i} holds a newline: the generator reads one body a line")
            f.write(body + b"\n")
    _bodies[id(bodies)] = (bodies, path, count)  # the factory kept alive: its id stays its own
    while len(_bodies) > _KEEP_BODIES:  # a soak makes a factory a window: keep the latest
        _, old, _ = _bodies.pop(next(iter(_bodies)))
        old.unlink(missing_ok=True)
    return path


def _run(host: str, port: int, path: str, body_file: Path, args: list[str], limit_s: float) -> Any:
    out = body_file.with_name(f"out-{next(_runs)}")
    cmd = [str(binary()), "--host", host, "--port", str(port), "--path", path]
    cmd += ["--bodies", str(body_file), "--out", str(out), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s)
        if done.returncode != 0:
            raise RuntimeError(f"load generator failed ({done.returncode}): {done.stderr.strip()}")
        return np.fromfile(out, dtype=_RECORD)
    finally:
        out.unlink(missing_ok=True)


def _sample(records: Any, elapsed_s: float) -> Sample:
    status = records["status"]
    ok = (status >= 200) & (status < 300)
    answered_badly = ~ok & (status != 0)  # timeouts and failed connections have no latency
    return Sample(
        records["latency"][ok].tolist(),
        int((~ok).sum()),
        elapsed_s,
        {int(s): int(n) for s, n in Counter(status.tolist()).items()},
        records["latency"][answered_badly].tolist(),
    )


def closed_loop(
    host: str,
    port: int,
    path: str,
    bodies: BodyFactory,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float = 0.0,
    timeout_s: float = 10.0,
) -> Sample:
    """``concurrency`` connections, each sending its next request when the last one is answered.

    Requests sent during ``warmup_s`` are not recorded.
    """
    args = ["--concurrency", str(concurrency), "--duration", str(duration_s)]
    args += ["--warmup", str(warmup_s), "--timeout", str(timeout_s)]
    limit = warmup_s + duration_s + timeout_s + 30
    records = _run(host, port, path, _bodies_file(bodies, CLOSED_BODIES), args, limit)
    return _sample(records, duration_s)


def open_loop(
    host: str,
    port: int,
    path: str,
    bodies: BodyFactory,
    *,
    rate: float,
    duration_s: float,
    warmup_s: float = 0.0,
    max_connections: int = 512,
    timeout_s: float = 5.0,
) -> Sample:
    """Requests arriving at a fixed ``rate`` per second for ``duration_s``, whatever the answers.

    Each arrival takes an idle connection (opening one, up to ``max_connections``)
    or waits for one in arrival order; latency runs from the scheduled arrival,
    so waiting for a connection counts. Arrivals in the first ``warmup_s`` (same
    rate) are not recorded: they open the connections and meet the server's
    reaction to the step in load. After the last arrival, the answers still in
    flight get ``timeout_s``; what is unanswered then counts as an error.
    """
    total = int(rate * warmup_s) + int(rate * duration_s)
    args = ["--rate", repr(float(rate)), "--duration", str(duration_s), "--warmup", str(warmup_s)]
    args += ["--timeout", str(timeout_s), "--max-conns", str(max_connections)]
    limit = warmup_s + duration_s + timeout_s + 30
    records = _run(host, port, path, _bodies_file(bodies, max(total, 1)), args, limit)
    return _sample(records, duration_s)


__all__ = ["BodyFactory", "binary", "closed_loop", "open_loop"]
