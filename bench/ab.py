"""``python -m bench.ab``: mlpipe variants side by side, measured in alternating rounds.

``bench.run`` measures one server after another, so on a shared machine a
neighbour's test run lands on one variant and not the other: sequential runs
of the *same* settings differed by ±30 % here, which hides a 5 % effect. This
starts every variant at once (the idle ones cost next to nothing), then
measures them in rounds, in ABBA order, and reports per-round *paired*
ratios: the median of (variant / baseline) over rounds, where both sides of a
pair ran within seconds of each other.

``--variants default,log-off,reliability.max_inflight=16`` (``default`` is
the settings as they are; the rest as in ``bench.run``). Writes
``bench/results/ab-<timestamp>.json``, ``ab-latest.json`` and ``ab-latest.md``.

``--neighbour-rows 1024`` measures every point twice, alone and (labelled
``<variant>+oip<rows>``) while a neighbour sends back-to-back Open Inference
Protocol requests of that many rows to the same server: how much a big ``/v2``
request slows the small ``/predict`` requests around it (issue 29, item 8).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import loadgen, noise, servers
from bench.run import OPEN_WARMUP_S, RESULTS, variant_env
from bench.summary import summarize
from bench.workload import Cases, ensure_home, mlpipe_bodies
from mlpipe.serving import free_port

BASELINE = "default"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    p.add_argument("--variants", default=f"{BASELINE},log-off", help="the first is the baseline")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--duration", type=float, default=4.0, help="seconds per measurement")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument(
        "--open",
        default="",
        help="open-loop rates per round: fractions of the baseline's first-round closed "
        "req/s (0.8,1.5) or absolute (400/s)",
    )
    p.add_argument(
        "--neighbour-rows",
        type=int,
        default=0,
        help="also measure each point beside back-to-back /v2 infer requests of this many rows",
    )
    p.add_argument("--home", type=Path, default=RESULTS / "home")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    a.variants = [v for v in a.variants.split(",") if v]
    if len(a.variants) < 2 or len(set(a.variants)) != len(a.variants):
        p.error("--variants: two or more, each once")
    for v in a.variants:
        if v != BASELINE:
            try:
                variant_env(v)
            except ValueError as exc:
                p.error(str(exc))
    a.open = [x for x in a.open.split(",") if x]
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    servers.install_signal_handlers()
    started = time.monotonic()
    home = ensure_home(args.home)
    body = mlpipe_bodies(Cases())
    ports: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    try:
        with contextlib.ExitStack() as stack:
            for label in args.variants:
                port = free_port()
                env = {} if label == BASELINE else variant_env(label)
                spec = servers.mlpipe_spec(home, port, env, label=label)
                print(f"bench.ab: starting mlpipe ({label})", file=sys.stderr, flush=True)
                running = servers.running(spec, port, args.out / "logs")
                ports[label] = stack.enter_context(running).port
            for port in ports.values():
                _closed(port, body, args.concurrency, args.warmup)
            rates: list[float] = []
            for r in range(args.rounds):
                order = args.variants if r % 2 == 0 else args.variants[::-1]
                for label, port, neighbour in _points(order, ports, args.neighbour_rows):
                    before = noise.snapshot()
                    with neighbour:
                        sample = _closed(port, body, args.concurrency, args.duration)
                    rows.append(
                        _row("closed", sample, label, r, before, concurrency=args.concurrency)
                    )
                if r == 0:
                    base = _find(rows, args.variants[0], "closed", 0)
                    rates = _rates(args.open, base["rps"] if base else 0.0)
                for rate in rates:
                    for label, port, neighbour in _points(order, ports, args.neighbour_rows):
                        before = noise.snapshot()
                        with neighbour:
                            sample = loadgen.open_loop(
                                "127.0.0.1",
                                port,
                                "/predict",
                                body,
                                rate=rate,
                                duration_s=args.duration,
                                warmup_s=OPEN_WARMUP_S,
                            )
                        rows.append(_row("open", sample, label, r, before, rate=rate))
    finally:
        servers.stop_all()
    meta = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "variants": args.variants,
        "rounds": args.rounds,
        "duration_s": args.duration,
        "wall_s": round(time.monotonic() - started, 1),
    }
    labels = [lab for lab, _, _ in _points(args.variants, ports, args.neighbour_rows)]
    text = paired_table(rows, labels)
    _write(args.out, rows, meta, text)
    print(text)
    return 0


def _points(
    order: list[str], ports: dict[str, int], neighbour_rows: int
) -> list[tuple[str, int, contextlib.AbstractContextManager[Any]]]:
    """(label, port, what runs beside it) for each measurement of a round, in order."""
    out: list[tuple[str, int, contextlib.AbstractContextManager[Any]]] = []
    for label in order:
        port = ports.get(label, 0)
        out.append((label, port, contextlib.nullcontext()))
        if neighbour_rows:
            out.append((f"{label}+oip{neighbour_rows}", port, _Neighbour(port, neighbour_rows)))
    return out


class _Neighbour:
    """Back-to-back ``/v2`` infer requests of ``rows`` rows to ``port``, one at a time."""

    def __init__(self, port: int, rows: int) -> None:
        self.port, self.rows = port, rows
        self.statuses: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Neighbour:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        print(f"  neighbour ({self.rows} rows): {self.statuses}", file=sys.stderr, flush=True)

    def _run(self) -> None:
        import httpx

        n, sent = self.rows, 0
        url = f"http://127.0.0.1:{self.port}/v2/models/fraud/infer"
        customers = {"name": "customer_id", "datatype": "INT64", "shape": [n]}
        customers["data"] = [1 + i % 500 for i in range(n)]
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                # new amounts every request: the prediction cache must not answer them
                amounts = [round(10 + (sent * n + i) * 0.01, 2) for i in range(n)]
                amount = {"name": "amount", "datatype": "FP64", "shape": [n], "data": amounts}
                status = client.post(url, json={"inputs": [customers, amount]}).status_code
                self.statuses[status] = self.statuses.get(status, 0) + 1
                sent += 1


def _closed(port: int, body: loadgen.BodyFactory, concurrency: int, seconds: float) -> Any:
    return loadgen.closed_loop(
        "127.0.0.1", port, "/predict", body, concurrency=concurrency, duration_s=seconds
    )


def _row(
    mode: str, sample: Any, label: str, rnd: int, before: noise.Snapshot, **load: Any
) -> dict[str, Any]:
    row = summarize("mlpipe", mode, sample, label=label, **load)
    row.update(noise.since(before), round=rnd)
    load_text = f"c={row['concurrency']}" if mode == "closed" else f"{row['rate']:g}/s"
    print(
        f"  round {rnd} {label} {load_text}: {row['rps']:.0f} req/s p99 {row['p99_ms']} ms "
        f"errors {row['errors']}{noise.note(row)}",
        file=sys.stderr,
        flush=True,
    )
    return row


def _rates(spec: list[str], saturation: float) -> list[float]:
    out = [float(x[:-2]) if x.endswith("/s") else round(float(x) * saturation) for x in spec]
    return [r for r in out if r > 0]


def _find(
    rows: list[dict[str, Any]], label: str, mode: str, rnd: int, load: Any = None
) -> dict[str, Any] | None:
    key = "concurrency" if mode == "closed" else "rate"
    for r in rows:
        if (
            r["label"] == label
            and r["mode"] == mode
            and r["round"] == rnd
            and (load is None or r[key] == load)
        ):
            return r
    return None


def paired_table(rows: list[dict[str, Any]], variants: list[str]) -> str:
    """Per variant and load: medians over rounds, and the median paired ratio to the baseline."""
    base = variants[0]
    loads = sorted(
        {(r["mode"], r["concurrency"] if r["mode"] == "closed" else r["rate"]) for r in rows},
        key=lambda m: (m[0] != "closed", m[1]),
    )
    head = (
        "| variant | load | rounds | req/s (median) | p99 ms (median) | errors (median) | "
        f"req/s / {base} (paired median, range) | p99 − {base} ms (paired median) |"
    )
    out = [head, "|---|---|---|---|---|---|---|---|"]
    for mode, load in loads:
        key = "concurrency" if mode == "closed" else "rate"
        load_text = f"c={load}" if mode == "closed" else f"{load:g}/s"
        for label in variants:
            mine = [r for r in rows if r["label"] == label and r["mode"] == mode and r[key] == load]
            if not mine:
                continue
            ratios, diffs = [], []
            for r in mine:
                b = _find(rows, base, mode, r["round"], load)
                if label != base and b and b["rps"]:
                    ratios.append(r["rps"] / b["rps"])
                    if r["p99_ms"] is not None and b["p99_ms"] is not None:
                        diffs.append(r["p99_ms"] - b["p99_ms"])
            p99s = [r["p99_ms"] for r in mine if r["p99_ms"] is not None]
            ratio = (
                f"{statistics.median(ratios):.3f} ({min(ratios):.2f}–{max(ratios):.2f})"
                if ratios
                else "–"
            )
            diff = f"{statistics.median(diffs):+.1f}" if diffs else "–"
            out.append(
                f"| {label} | {load_text} | {len(mine)} | "
                f"{statistics.median(r['rps'] for r in mine):.0f} | "
                f"{statistics.median(p99s) if p99s else float('nan'):.1f} | "
                f"{statistics.median(r['errors'] for r in mine):.0f} | {ratio} | {diff} |"
            )
    return "\n".join(out) + "\n"


def _write(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any], table: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n"
    (out / f"ab-{stamp}.json").write_text(text)
    (out / "ab-latest.json").write_text(text)
    (out / "ab-latest.md").write_text(
        f"# bench.ab {meta['when']} ({meta['rounds']} rounds, {meta['duration_s']:g} s each)\n\n"
        + table
    )


if __name__ == "__main__":
    raise SystemExit(main())
