"""Pure parts of the bench: percentiles, the JSON row schema and the markdown table.

No I/O and no timing here, so ``tests/unit/test_bench_summary.py`` can check them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

SYSTEMS = ("mlpipe", "bentoml", "bentoml-tuned", "mlflow", "floor")
MODES = ("closed", "open")

ROW_KEYS = (
    "system",
    "mode",
    "concurrency",
    "rate",
    "rps",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "errors",
    "requests",
)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of already sorted values, nearest-rank; NaN when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = max(1, math.ceil(q / 100 * n))
    return float(sorted_values[rank - 1])


@dataclass(frozen=True)
class Sample:
    """What one load run measured: each answered request's latency (s) and the error count.

    ``latencies_s`` holds successful (2xx) responses only; ``errors`` counts
    non-2xx answers (a 503 from the batcher included), timeouts and connection
    failures. ``elapsed_s`` is the measuring window. ``error_latencies_s``
    holds the non-2xx answers' latencies (timeouts and failed connections have
    none): whether shedding answers fast.
    """

    latencies_s: Sequence[float]
    errors: int
    elapsed_s: float
    statuses: dict[int, int] | None = None
    error_latencies_s: Sequence[float] | None = None


def summarize(
    system: str,
    mode: str,
    sample: Sample,
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """One result row in the issue's schema (``rps`` counts successful responses only)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "closed" and concurrency is None:
        raise ValueError("a closed-loop row needs a concurrency")
    if mode == "open" and rate is None:
        raise ValueError("an open-loop row needs a rate")
    lat = sorted(v * 1000.0 for v in sample.latencies_s)
    ok = len(lat)
    row: dict[str, Any] = {
        "system": system,
        "mode": mode,
        "concurrency": concurrency if mode == "closed" else None,
        "rate": float(rate) if mode == "open" and rate is not None else None,
        "rps": round(ok / sample.elapsed_s, 1) if sample.elapsed_s > 0 else 0.0,
        "p50_ms": _ms(percentile(lat, 50)),
        "p95_ms": _ms(percentile(lat, 95)),
        "p99_ms": _ms(percentile(lat, 99)),
        "max_ms": _ms(lat[-1] if lat else math.nan),
        "errors": int(sample.errors),
        "requests": ok + int(sample.errors),
    }
    if label:
        row["label"] = label
    if sample.statuses:
        row["statuses"] = {str(k): v for k, v in sorted(sample.statuses.items())}
    if sample.error_latencies_s:
        err = sorted(v * 1000.0 for v in sample.error_latencies_s)
        row["error_p50_ms"] = _ms(percentile(err, 50))
        row["error_p99_ms"] = _ms(percentile(err, 99))
    return row


def _ms(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 2)


def check_row(row: dict[str, Any]) -> None:
    """Raise ValueError when ``row`` does not follow the schema (extra keys are allowed)."""
    missing = [k for k in ROW_KEYS if k not in row]
    if missing:
        raise ValueError(f"row lacks {', '.join(missing)}")
    if row["mode"] not in MODES:
        raise ValueError(f"mode {row['mode']!r} is not one of {MODES}")
    if row["mode"] == "closed" and not isinstance(row["concurrency"], int):
        raise ValueError("closed-loop row without an integer concurrency")
    if row["mode"] == "open" and not isinstance(row["rate"], (int, float)):
        raise ValueError("open-loop row without a rate")
    for key in ("errors", "requests"):
        if not isinstance(row[key], int) or row[key] < 0:
            raise ValueError(f"{key} must be a non-negative int")
    if not isinstance(row["rps"], (int, float)):
        raise ValueError("rps must be a number")


def markdown_table(rows: Iterable[dict[str, Any]]) -> str:
    """The rows as a GitHub markdown table, in the order given."""
    head = [
        "system",
        "mode",
        "conc / rate",
        "req/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "errors",
        "requests",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        load = str(r["concurrency"]) if r["mode"] == "closed" else f"{r['rate']:g}/s"
        name = r["system"] + (f" ({r['label']})" if r.get("label") else "")
        cells = [name, r["mode"], load, f"{r['rps']:.0f}"]
        cells += [_cell(r[k]) for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")]
        cells += [str(r["errors"]), str(r["requests"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def best_closed(rows: Iterable[dict[str, Any]], system: str) -> float:
    """The highest closed-loop req/s a system reached (0 when it has no row)."""
    return max(
        (
            r["rps"]
            for r in rows
            if r["system"] == system and r["mode"] == "closed" and not r.get("label")
        ),
        default=0.0,
    )


def find(rows: Iterable[dict[str, Any]], system: str, **match: Any) -> dict[str, Any] | None:
    """The first unlabelled row of ``system`` whose keys equal ``match``."""
    for r in rows:
        if (
            r["system"] == system
            and not r.get("label")
            and all(r.get(k) == v for k, v in match.items())
        ):
            return r
    return None


__all__ = [
    "MODES",
    "ROW_KEYS",
    "SYSTEMS",
    "Sample",
    "best_closed",
    "check_row",
    "find",
    "markdown_table",
    "percentile",
    "summarize",
]
