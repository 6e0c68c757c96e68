"""``python -m bench.soak [--minutes 10]``: the mlpipe service under steady load, watched for leaks.

Starts ``mlpipe serve`` on the bench home (the demo stack, as ``bench.run``
does), drives it open-loop at a fixed rate (``--rate``, moderate: well under
saturation, so the queue stays short and what grows is memory, not backlog),
and samples the resident set size (RSS, psutil) of every process of the
server every ``--sample-every`` seconds: the ``mlpipe serve`` launcher, the
arbiter (``mlpipe.serving._arbiter``) and each worker. At the end it prints one row per
process (RSS after the warm-up, at the end, growth, maximum and the slope over
the second half of the run) and the request totals, and writes
``bench/results/soak-<timestamp>.json``. It asserts nothing: growth is for a
person to read (a cache filling to its bound grows, then levels off; a leak
keeps its slope).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import loadgen, servers
from bench.summary import Sample, summarize
from bench.workload import Cases, ensure_home, mlpipe_bodies
from mlpipe.serving import free_port

RESULTS = Path(__file__).resolve().parent / "results"
MB = 1024 * 1024


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0, help="measured load (after warm-up)")
    p.add_argument("--rate", type=float, default=150.0, help="requests per second, open loop")
    p.add_argument("--warmup", type=float, default=30.0, help="seconds of load before the baseline")
    p.add_argument("--sample-every", type=float, default=10.0, help="seconds between RSS samples")
    p.add_argument("--workers", type=int, default=None, help="serving workers (default: settings)")
    p.add_argument("--home", type=Path, default=RESULTS / "home", help="bench stack (reused)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--keep-loaded-hours",
        type=float,
        default=0.0,
        help="a `warehouse sync` after each sample releases segments loaded this long ago "
        "(predlog.keep_loaded_hours; 0: at once); --no-sync: the log only grows",
    )
    p.add_argument("--no-sync", action="store_true", help="no warehouse sync between samples")
    a = p.parse_args(argv)
    if a.minutes <= 0 or a.rate <= 0 or a.sample_every <= 0 or a.warmup < 0:
        p.error("--minutes, --rate and --sample-every must be > 0, --warmup >= 0")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    servers.install_signal_handlers()
    started = time.monotonic()
    _say(f"stack in {args.home} ...")
    home = ensure_home(args.home)
    port = free_port()
    overrides = {"MLPIPE_SERVING__WORKERS": str(args.workers)} if args.workers else {}
    spec = servers.mlpipe_spec(home, port, overrides, label="soak")
    body = mlpipe_bodies(Cases())
    sent = 0

    def load(seconds: float) -> Sample:
        nonlocal sent
        offset = sent  # every window continues the request stream: no repeats, no cache hits
        sent += int(args.rate * seconds)
        return loadgen.open_loop(
            "127.0.0.1",
            port,
            spec.path,
            lambda i: body(offset + i),
            rate=args.rate,
            duration_s=seconds,
        )

    samples: list[dict[str, Any]] = []
    windows: list[Sample] = []
    try:
        with servers.running(spec, port, args.out / "logs"):
            _say(f"mlpipe serve on :{port}; warm-up {args.warmup:g} s at {args.rate:g} req/s")
            if args.warmup:
                load(args.warmup)
            t0 = time.monotonic()
            samples.append(_sample(0.0, home))
            _say(_progress(samples[-1], windows))
            total_s = args.minutes * 60
            while (elapsed := time.monotonic() - t0) < total_s - 0.5:
                windows.append(load(min(args.sample_every, total_s - elapsed)))
                if not args.no_sync:
                    _sync(home, args.keep_loaded_hours)
                samples.append(_sample(time.monotonic() - t0, home))
                _say(_progress(samples[-1], windows))
    finally:
        servers.stop_all()
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m bench.soak " + " ".join(sys.argv[1:] if argv is None else argv),
        "minutes": args.minutes,
        "rate": args.rate,
        "warmup_s": args.warmup,
        "sample_every_s": args.sample_every,
        "sync": None if args.no_sync else {"keep_loaded_hours": args.keep_loaded_hours},
        "wall_s": round(time.monotonic() - started, 1),
        "load": summarize("mlpipe", "open", _merge(windows), rate=args.rate, label="soak"),
        "processes": growth(samples),
        "samples": samples,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"soak-{stamp}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(render(result))
    _say(f"wrote {path}")
    return 0


def _server_processes() -> dict[str, Any]:
    """label → psutil.Process for everything this process started (the server's tree)."""
    import psutil

    found: dict[str, Any] = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            found[_label(proc.cmdline(), proc.pid)] = proc
        except psutil.Error:  # exited between the listing and the look
            pass
    return found


def _label(cmdline: list[str], pid: int) -> str:
    if "mlpipe.serving._worker" in cmdline:
        wid = cmdline[cmdline.index("--worker-id") + 1] if "--worker-id" in cmdline else "?"
        return f"worker {wid} (pid {pid})"
    if "mlpipe.serving._arbiter" in cmdline:
        return f"arbiter (pid {pid})"
    if any(Path(part).name == "mlpipe" for part in cmdline[:2]) and "serve" in cmdline:
        return f"mlpipe serve (pid {pid})"
    return f"{Path(cmdline[0]).name if cmdline else '?'} (pid {pid})"


def _sample(t_s: float, home: Path) -> dict[str, Any]:
    import psutil

    rss: dict[str, float] = {}
    for label, proc in _server_processes().items():
        try:
            rss[label] = round(proc.memory_info().rss / MB, 1)
        except psutil.Error:
            pass
    files = [p for p in _log_dir(home).rglob("*") if p.is_file()]
    log_mb = round(sum(p.stat().st_size for p in files if p.exists()) / MB, 2)
    return {"t_s": round(t_s, 1), "rss_mb": rss, "log_mb": log_mb, "log_files": len(files)}


def _log_dir(home: Path) -> Path:
    from mlpipe.config import load_settings

    return load_settings(home=home).predlog_path


def _sync(home: Path, keep_loaded_hours: float) -> None:
    """Load the log into the warehouse, which releases the segments it loaded whole."""
    from mlpipe import warehouse
    from mlpipe.config import load_settings

    settings = load_settings(home=home, predlog={"keep_loaded_hours": keep_loaded_hours})
    warehouse.sync(settings)


def _merge(windows: list[Sample]) -> Sample:
    statuses: Counter[int] = Counter()
    for w in windows:
        statuses.update(w.statuses or {})
    return Sample(
        [v for w in windows for v in w.latencies_s],
        sum(w.errors for w in windows),
        sum(w.elapsed_s for w in windows),
        dict(statuses),
    )


def growth(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per process: RSS at the first and last sample it appears in, growth, max, late slope."""
    labels = list(dict.fromkeys(label for s in samples for label in s["rss_mb"]))
    end_t = samples[-1]["t_s"] if samples else 0.0
    rows = []
    for label in labels:
        points = [(s["t_s"], s["rss_mb"][label]) for s in samples if label in s["rss_mb"]]
        (t_first, first), (t_last, last) = points[0], points[-1]
        late = [(t, v) for t, v in points if t >= t_first + (t_last - t_first) / 2]
        rows.append(
            {
                "process": label,
                "from_s": t_first,
                "to_s": t_last,
                "start_mb": first,
                "end_mb": last,
                "growth_mb": round(last - first, 1),
                "growth_pct": round(100 * (last - first) / first, 1) if first else None,
                "max_mb": max(v for _, v in points),
                "late_slope_mb_per_min": _slope(late),
                "alive_at_end": t_last == end_t,
            }
        )
    return rows


def _slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares MB per minute; None with fewer than three points."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return round(60 * sum((t - mt) * (v - mv) for t, v in points) / var, 2)


def render(result: dict[str, Any]) -> str:
    """The result as markdown: one row per process, then the load line."""
    head = ["process", "RSS start MB", "RSS end MB", "growth MB", "growth %", "max MB"]
    head.append("MB/min (2nd half)")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in result["processes"]:
        name = r["process"] + ("" if r["alive_at_end"] else f" (gone after {r['to_s']:g} s)")
        if r["from_s"] > 0:
            name += f" (from {r['from_s']:g} s)"
        pct = "–" if r["growth_pct"] is None else f"{r['growth_pct']:+.1f}"
        slope = "–" if r["late_slope_mb_per_min"] is None else f"{r['late_slope_mb_per_min']:+.2f}"
        cells = [name, f"{r['start_mb']:.1f}", f"{r['end_mb']:.1f}", f"{r['growth_mb']:+.1f}"]
        cells += [pct, f"{r['max_mb']:.1f}", slope]
        lines.append("| " + " | ".join(cells) + " |")
    sizes = [(s["t_s"], s["log_mb"], s["log_files"]) for s in result["samples"] if "log_mb" in s]
    if sizes:
        lines.append("")
        lines.append(
            "log directory (MB, files) over time: "
            + ", ".join(f"{t:g} s {mb:g} MB/{n}" for t, mb, n in sizes)
            + f"; max {max(mb for _, mb, _ in sizes):g} MB"
        )
    ld = result["load"]
    statuses = ", ".join(f"{k}: {v}" for k, v in (ld.get("statuses") or {}).items())
    lines.append("")
    lines.append(
        f"{result['minutes']:g} min at {result['rate']:g} req/s (after {result['warmup_s']:g} s "
        f"warm-up): {ld['requests']} requests, {ld['errors']} errors, {ld['rps']:.0f} req/s "
        f"answered, p50 {ld['p50_ms']} ms, p99 {ld['p99_ms']} ms, max {ld['max_ms']} ms "
        f"(statuses {statuses or 'none'})"
    )
    return "\n".join(lines)


def _progress(sample: dict[str, Any], windows: list[Sample]) -> str:
    done = sum(len(w.latencies_s) + w.errors for w in windows)
    errors = sum(w.errors for w in windows)
    rss = ", ".join(f"{k.split(' (pid')[0]} {v:.0f}" for k, v in sample["rss_mb"].items())
    log = f"; log {sample['log_mb']:g} MB in {sample['log_files']} file(s)"
    return f"t={sample['t_s']:>6.0f} s  {done} requests, {errors} errors; RSS MB: {rss}{log}"


def _say(text: str) -> None:
    print(f"soak: {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
