"""``python -m bench.run [--quick]``: the side-by-side serving benchmark.

Builds (or reuses) the bench home, then starts each system in turn on
loopback (``--quick``: all at once, measured one at a time), drives it
closed-loop at each concurrency and open-loop at rates derived from mlpipe's
measured saturation, stops it, and writes
``bench/results/<timestamp>.json``, ``latest.json``, ``latest.md`` and
``latest.png``. It asserts no timing: the target check it prints is
information. Every server it starts is stopped, on failure too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import loadgen, noise, servers
from bench.summary import SYSTEMS, best_closed, check_row, find, markdown_table, summarize
from bench.workload import (
    Cases,
    bentoml_bodies,
    ensure_home,
    mlflow_bodies,
    mlpipe_bodies,
    onnx_deployed,
    v1_features,
)
from mlpipe.config import ServingSettings
from mlpipe.serving import free_port

RESULTS = Path(__file__).resolve().parent / "results"
# Each open-loop point first runs this long unrecorded at its rate: the step from the
# previous point opens ~300 connections at once and fills the queue (decision 017)
OPEN_WARMUP_S = 1.0
# Full runs also find mlpipe's open-loop saturation with a ramp of these fractions of
# its c=32 rate and measure every system at OPEN_OPERATING × that saturation too.
OPEN_RAMP = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
OPEN_RAMP_S = 2.0
OPEN_OPERATING = 0.8
BATCH = ServingSettings().max_batch_size  # mlpipe's default, what the batch-2 variant is against

VARIANTS = {  # mlpipe runs with one setting changed, for the tuning table (label → env)
    # BentoML refuses max_batch_size=1 on a batchable API; 2 is as close to unbatched as it gets
    "batch-2": {"MLPIPE_SERVING__MAX_BATCH_SIZE": "2"},
    "1-worker": {"MLPIPE_SERVING__WORKERS": "1"},
    # the prediction log's cost end to end: the same path with a sink that drops every row
    "log-off": {"MLPIPE_PREDLOG__SINK": "none"},
    # the same path with the champion and canary served as their ONNX conversions
    # (``register --to-onnx``), deployed for this run only (bench.workload.onnx_deployed)
    "onnx": {},
}
SECTIONS = ("serving", "predlog", "reliability", "security", "monitor")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the CI smoke run: < 3 min, c=32 only")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    p.add_argument("--concurrency", default=None, help="e.g. 1,8,32,128")
    p.add_argument("--duration", type=float, default=None, help="seconds per measurement")
    p.add_argument("--warmup", type=float, default=None, help="seconds of warm-up per system")
    p.add_argument(
        "--open",
        default=None,
        help="open-loop rates as fractions of mlpipe's "
        "saturation (e.g. 0.8,1.5); absolute with a trailing /s (e.g. 400/s)",
    )
    p.add_argument(
        "--variants",
        default="",
        help=f"extra mlpipe runs: {','.join(VARIANTS)} or settings as "
        "[SECTION.]KEY=VALUE[+...] (no section: serving), e.g. reliability.max_inflight=16",
    )
    p.add_argument(
        "--parallel-start",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start every system at once, then measure one at a time (default: with --quick)",
    )
    p.add_argument("--home", type=Path, default=RESULTS / "home", help="bench stack (reused)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the bench stack")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    a.concurrency = [
        int(c) for c in (a.concurrency or ("32" if a.quick else "1,8,32,128")).split(",")
    ]
    a.duration = a.duration or (2.0 if a.quick else 10.0)
    a.warmup = a.warmup if a.warmup is not None else (1.0 if a.quick else 3.0)
    a.open = [x for x in (a.open or ("0.8" if a.quick else "0.8,1.5")).split(",") if x]
    a.parallel_start = a.quick if a.parallel_start is None else a.parallel_start
    a.open_saturation = 0.0  # answered/s, found by the ramp in full runs (_open_saturation)
    a.systems = [s for s in a.systems.split(",") if s]
    unknown = set(a.systems) - set(SYSTEMS)
    if unknown:
        p.error(f"unknown systems: {', '.join(sorted(unknown))}")
    a.variants = [v for v in a.variants.split(",") if v]
    for v in a.variants:
        try:
            variant_env(v)
        except ValueError as exc:
            p.error(str(exc))
    return a


def variant_env(label: str) -> dict[str, str]:
    """A variant's environment overrides for ``mlpipe serve``.

    A name from ``VARIANTS`` (``log-off`` → ``MLPIPE_PREDLOG__SINK=none``), or
    ``+``-joined ``[SECTION.]KEY=VALUE`` items: ``reliability.max_inflight=16``
    → ``MLPIPE_RELIABILITY__MAX_INFLIGHT=16``; a key without a section is a
    serving key (``workers=1`` → ``MLPIPE_SERVING__WORKERS=1``). ``tree=PATH``
    serves another source tree's mlpipe (``git archive C | tar -x -C PATH``): its
    ``platform`` and ``cli`` go ahead of the installed one on ``PYTHONPATH``, the
    way a before/after pair is measured. Raises ValueError for anything else.
    """
    if label in VARIANTS:
        return dict(VARIANTS[label])
    env: dict[str, str] = {}
    for item in label.split("+"):
        key, eq, value = item.partition("=")
        if key == "tree" and value:
            tree = Path(value).resolve()
            if not (tree / "platform" / "mlpipe").is_dir():
                raise ValueError(f"tree={value}: no platform/mlpipe there")
            env["PYTHONPATH"] = f"{tree / 'platform'}:{tree / 'cli'}"
            continue
        section, dot, name = key.rpartition(".")
        section = section if dot else "serving"
        if not eq or not name or not value or section not in SECTIONS:
            raise ValueError(
                f"unknown variant {item!r}: one of {', '.join(VARIANTS)} or "
                f"[SECTION.]KEY=VALUE with SECTION in {', '.join(SECTIONS)}"
            )
        env[f"MLPIPE_{section.upper()}__{name.upper()}"] = value
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    servers.install_signal_handlers()
    started = time.monotonic()
    print(f"bench: stack in {args.home} ...", file=sys.stderr, flush=True)
    home = ensure_home(args.home, rebuild=args.rebuild)
    from mlpipe.config import load_settings

    serving = load_settings(home=home).serving
    names, table = v1_features(home)
    cases = Cases()
    bodies = {
        "mlpipe": mlpipe_bodies(cases),
        "bentoml": bentoml_bodies(cases, names, table),
        "bentoml-tuned": bentoml_bodies(cases, names, table),
        "mlflow": mlflow_bodies(cases, names, table),
        "floor": mlpipe_bodies(cases),
    }
    rows: list[dict[str, Any]] = []
    rates: list[float] = _open_rates([r for r in args.open if r.endswith("/s")], 0.0)
    log_dir = args.out / "logs"
    order = [s for s in SYSTEMS if s in args.systems]
    failed: list[str] = []
    plan: list[tuple[str, servers.SystemSpec, int]] = []
    for system in order:
        port = free_port()
        while any(port == taken for _, _, taken in plan):  # all bound at once when parallel
            port = free_port()
        if system == "mlpipe":
            spec = servers.mlpipe_spec(home, port)
        elif system in ("bentoml", "bentoml-tuned"):
            spec = servers.bentoml_spec(
                home,
                port,
                tuned=system == "bentoml-tuned",
                workers=serving.workers,
                max_batch_size=serving.max_batch_size,
                max_latency_ms=serving.max_latency_ms,
            )
        elif system == "mlflow":
            spec = servers.mlflow_spec(home, port)
        else:
            spec = servers.floor_spec(port, serving.workers)
        plan.append((system, spec, port))
    try:
        if args.parallel_start:
            rows += _measure_together(plan, bodies, args, rates, log_dir, failed)
        else:
            for system, spec, port in plan:
                try:
                    rows += _measure(spec, port, bodies[system], args, rates, log_dir)
                except (RuntimeError, TimeoutError) as exc:  # one failing does not end the run
                    failed.append(f"{system}: {str(exc).splitlines()[-1]}")
                    print(f"bench: {system} failed: {exc}", file=sys.stderr, flush=True)
        for label in args.variants:
            port = free_port()
            spec = servers.mlpipe_spec(home, port, variant_env(label), label=label)
            deployed = onnx_deployed(home) if label == "onnx" else nullcontext()
            try:  # open loop at mlpipe's rates, so a variant's shedding shows next to it
                with deployed:
                    rows += _measure(spec, port, bodies["mlpipe"], args, rates, log_dir)
            except (RuntimeError, TimeoutError) as exc:
                failed.append(f"mlpipe ({label}): {str(exc).splitlines()[-1]}")
                print(f"bench: mlpipe ({label}) failed: {exc}", file=sys.stderr, flush=True)
    finally:
        servers.stop_all()
    for row in rows:
        check_row(row)
    meta = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "duration_s": args.duration,
        "parallel_start": args.parallel_start,
        "serving": serving.model_dump(),
        "wall_s": round(time.monotonic() - started, 1),
        "failed": failed,
        "open_saturation": round(args.open_saturation),
    }
    _write(args.out, rows, meta)
    return 0


def _open_rates(spec: list[str], saturation: float) -> list[float]:
    out = []
    for item in spec:
        if item.endswith("/s"):
            out.append(float(item[:-2]))
        elif saturation > 0:
            out.append(round(float(item) * saturation))
    return [r for r in out if r > 0]


def _measure(
    spec: servers.SystemSpec,
    port: int,
    body: loadgen.BodyFactory,
    args: argparse.Namespace,
    rates: list[float],
    log_dir: Path,
) -> list[dict[str, Any]]:
    """Start one system, load it, stop it (RuntimeError / TimeoutError if it does not start)."""
    name = spec.name + (f" ({spec.label})" if spec.label else "")
    print(f"bench: {name} starting on :{port}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    with servers.running(spec, port, log_dir) as started:
        print(f"  {name} ready in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        rows = _load(started, body, args, rates)
        loaded = time.monotonic()
    print(f"  {name} stopped in {time.monotonic() - loaded:.1f} s", file=sys.stderr, flush=True)
    return rows


def _measure_together(
    plan: list[tuple[str, servers.SystemSpec, int]],
    bodies: dict[str, loadgen.BodyFactory],
    args: argparse.Namespace,
    rates: list[float],
    log_dir: Path,
    failed: list[str],
) -> list[dict[str, Any]]:
    """Start every system at once, wait until all are ready, then load each and stop it.

    Starting is what takes a quick run's time (15-45 s a system here, mostly
    imports); started together it overlaps. No load runs before every system
    is ready, and each is stopped once measured, so a measured system shares
    the machine only with idle servers.
    """
    t0 = time.monotonic()
    started = [(system, servers.start(spec, port, log_dir)) for system, spec, port in plan]
    names = ", ".join(system for system, _, _ in plan)
    print(f"bench: started {names} together", file=sys.stderr, flush=True)
    ready: list[tuple[str, servers.Started]] = []
    for system, proc in started:
        try:
            servers.wait_ready(proc)
            ready.append((system, proc))
        except (RuntimeError, TimeoutError) as exc:  # one system failing does not end the run
            servers.stop(proc)
            failed.append(f"{system}: {str(exc).splitlines()[-1]}")
            print(f"bench: {system} failed: {exc}", file=sys.stderr, flush=True)
    print(f"  all ready in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    rows: list[dict[str, Any]] = []
    for system, proc in ready:
        try:
            rows += _load(proc, bodies[system], args, rates)
        finally:
            servers.stop(proc)
    return rows


def _load(
    started: servers.Started,
    body: loadgen.BodyFactory,
    args: argparse.Namespace,
    rates: list[float],
) -> list[dict[str, Any]]:
    """Warm a ready system up, then measure it closed loop at each concurrency and open loop."""
    spec, port, pid = started.spec, started.port, started.proc.pid
    name = spec.name + (f" ({spec.label})" if spec.label else "")
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    host, path = "127.0.0.1", spec.path
    loadgen.closed_loop(
        host, port, path, body, concurrency=max(args.concurrency), duration_s=args.warmup
    )
    for c in args.concurrency:
        before = noise.snapshot()
        sample = loadgen.closed_loop(
            host, port, path, body, concurrency=c, duration_s=args.duration, warmup_s=0.5
        )
        rows.append(summarize(spec.name, "closed", sample, concurrency=c, label=spec.label))
        rows[-1].update(noise.since(before, pid))
        _progress(rows[-1])
    if spec.name == "mlpipe" and not spec.label and not rates:
        c32 = best_closed(rows, "mlpipe")
        rates[:] = _open_rates(args.open, c32)
        if not args.quick and c32 > 0:
            args.open_saturation = _open_saturation(host, port, path, body, c32)
            rates.append(round(OPEN_OPERATING * args.open_saturation))
    for rate in rates:
        before = noise.snapshot()
        sample = loadgen.open_loop(
            host, port, path, body, rate=rate, duration_s=args.duration, warmup_s=OPEN_WARMUP_S
        )
        rows.append(summarize(spec.name, "open", sample, rate=rate, label=spec.label))
        rows[-1].update(noise.since(before, pid))
        _progress(rows[-1])
    print(f"  {name}: measured {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    return rows


def _open_saturation(
    host: str, port: int, path: str, body: loadgen.BodyFactory, closed_rps: float
) -> float:
    """The most requests a second mlpipe answered (2xx) in a ramp of open-loop rates.

    The rates are ``OPEN_RAMP`` × the closed-loop rate, ``OPEN_RAMP_S`` each after
    half a second unrecorded. Open loop, requests come one at a time instead of
    in the closed loop's bursts: smaller batches and a wake-up each, so the
    server saturates lower (decision 017).
    """
    best = 0.0
    for fraction in OPEN_RAMP:
        sample = loadgen.open_loop(
            host,
            port,
            path,
            body,
            rate=fraction * closed_rps,
            duration_s=OPEN_RAMP_S,
            warmup_s=0.5,
        )
        answered = len(sample.latencies_s) / sample.elapsed_s
        best = max(best, answered)
        print(
            f"  mlpipe ramp {fraction * closed_rps:.0f}/s: {answered:.0f} answered/s",
            file=sys.stderr,
            flush=True,
        )
    return best


def _progress(row: dict[str, Any]) -> None:
    load = f"c={row['concurrency']}" if row["mode"] == "closed" else f"{row['rate']:g}/s"
    print(
        f"  {row['system']}{' ' + row['label'] if row.get('label') else ''} {load}: "
        f"{row['rps']:.0f} req/s p99 {row['p99_ms']} ms errors {row['errors']}{noise.note(row)}",
        file=sys.stderr,
        flush=True,
    )


def _moved_note(rows: list[dict[str, Any]], point: dict[str, Any]) -> str:
    """A warning when a system's c=32 point is under 0.8 × its best at another
    concurrency: the floor's c=32 figure is bimodal on a 2-core machine (~17k or ~28k
    req/s; decision 042), and a fraction of its low mode reads as mlpipe at twice its
    share."""
    others = [
        r
        for r in rows
        if r["system"] == point["system"]
        and r["mode"] == "closed"
        and r.get("concurrency") != 32
        and not r.get("label")
        and r["rps"]
    ]
    best = max(others, key=lambda r: r["rps"], default=None)
    if best is None or point["rps"] >= 0.8 * best["rps"]:
        return ""
    return (
        f"; its c=32 point is under 0.8 × its c={best['concurrency']} point "
        f"({point['rps']:.0f} against {best['rps']:.0f} req/s): the figure moved, "
        "do not read this fraction alone"
    )


def _idle_note(point: dict[str, Any], workers: int) -> str:
    """A warning when fewer of a system's processes did work during ``point`` than it has
    workers: all the connections went to one worker and the others idled (decision 045).
    A process did work if it used a tenth of the busiest one's CPU or more."""
    used = point.get("server_cpu_ms") or []
    busy = [ms for ms in used if used and ms >= 0.1 * used[0]]
    if workers < 2 or not used or len(busy) >= workers:
        return ""
    return (
        f"; only {len(busy)} of its {workers} workers served its c={point['concurrency']} "
        f"point (its processes' CPU ms: {', '.join(map(str, used))}): the figure moved, "
        "do not read this fraction alone"
    )


def targets(
    rows: list[dict[str, Any]], open_saturation: float = 0.0, workers: int = 0
) -> list[str]:
    """The issue's serving targets as lines of text (information, never asserted).

    ``workers``: what mlpipe, tuned BentoML and the floor were started with, so
    a point where some of them idled is flagged (0: not checked).
    """
    out: list[str] = []
    if open_saturation:
        out.append(
            f"mlpipe open-loop saturation: {open_saturation:.0f} answered/s (most of a ramp "
            f"{OPEN_RAMP[0]:g}-{OPEN_RAMP[-1]:g} × the c=32 rate); {OPEN_OPERATING:.0%} of it: "
            f"{round(OPEN_OPERATING * open_saturation)}/s"
        )
    m32 = find(rows, "mlpipe", mode="closed", concurrency=32)
    if m32:
        out.append(
            f"mlpipe c=32: {m32['rps']:.0f} req/s, p99 {m32['p99_ms']} ms "
            f"(target ≤ 100), errors {m32['errors']} (target 0){_idle_note(m32, workers)}"
        )
        for other, want in (
            ("bentoml", 1.5),
            ("mlflow", 1.5),
            ("bentoml-tuned", 1.0),
            ("floor", None),
        ):
            o = find(rows, other, mode="closed", concurrency=32)
            if o and o["rps"]:
                ratio = m32["rps"] / o["rps"]
                goal = f" (target ≥ {want})" if want else " (fraction of the floor)"
                note = _moved_note(rows, o) if other == "floor" else ""
                note += _idle_note(o, workers) if other in ("floor", "bentoml-tuned") else ""
                out.append(f"  mlpipe / {other} at c=32: {ratio:.2f}{goal}{note}")
        u = _labelled(rows, "batch-2", concurrency=32)
        if u and u["rps"]:
            out.append(
                f"  batched ({BATCH}) / batch-2 at c=32: {m32['rps'] / u['rps']:.2f} "
                f"(target ≥ 1.25), p99 {m32['p99_ms']} vs {u['p99_ms']} ms"
            )
        off = _labelled(rows, "log-off", concurrency=32)
        if off and off["rps"] and m32["p99_ms"] is not None and off["p99_ms"] is not None:
            cost = 1 - m32["rps"] / off["rps"]
            out.append(
                f"  prediction log on / off at c=32: {m32['rps'] / off['rps']:.2f} "
                f"({cost:+.1%} throughput cost, target ≤ 5 %), p99 "
                f"{m32['p99_ms'] - off['p99_ms']:+.2f} ms ({m32['p99_ms']} vs {off['p99_ms']}; "
                "target ≤ 1 ms)"
            )
    for r in rows:
        if r["system"] == "mlpipe" and r["mode"] == "open":
            name = f"mlpipe ({r['label']})" if r.get("label") else "mlpipe"
            s503 = (r.get("statuses") or {}).get("503", 0)
            e99 = r.get("error_p99_ms")
            fast = f", errors answered in p99 {e99} ms" if e99 is not None else ""
            out.append(
                f"{name} open {r['rate']:g}/s: p99 {r['p99_ms']} ms, {r['errors']} errors "
                f"({s503} × 503{fast}), {r['rps']:.0f} req/s answered{noise.note(r)}"
            )
    return out


def _labelled(rows: list[dict[str, Any]], label: str, **match: Any) -> dict[str, Any] | None:
    """The first mlpipe row of variant ``label`` whose keys equal ``match``."""
    return next(
        (
            r
            for r in rows
            if r.get("label") == label and all(r.get(k) == v for k, v in match.items())
        ),
        None,
    )


def _write(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps(rows, indent=1) + "\n"
    (out / f"{stamp}.json").write_text(text)
    (out / "latest.json").write_text(text)
    (out / "latest.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    table = markdown_table(rows)
    lines = targets(rows, meta.get("open_saturation") or 0, meta["serving"]["workers"])
    lines += [f"FAILED to run: {f}" for f in meta.get("failed", [])]
    notes = "\n".join(f"- {line}" for line in lines)
    (out / "latest.md").write_text(
        f"# bench {meta['when']} ({'quick' if meta['quick'] else 'full'}, "
        f"{meta['duration_s']:g} s per point)\n\n{table}\n{notes}\n"
    )
    try:
        from bench.plot import plot

        plot(rows, out / "latest.png")
    except Exception as exc:  # the plot is a convenience; the JSON and table are the result
        print(f"bench: no plot ({exc})", file=sys.stderr)
    print(table)
    print(notes)


if __name__ == "__main__":
    raise SystemExit(main())
