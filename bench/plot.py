"""p99 latency against throughput, one line per system (closed-loop points, by concurrency)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    systems: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["mode"] == "closed" and r["p99_ms"] is not None:
            name = r["system"] + (f" ({r['label']})" if r.get("label") else "")
            systems.setdefault(name, []).append(r)
    for name, pts in systems.items():
        pts.sort(key=lambda r: r["concurrency"])
        ax.plot([p["rps"] for p in pts], [p["p99_ms"] for p in pts], marker="o", label=name)
        for p in pts:
            ax.annotate(
                str(p["concurrency"]),
                (p["rps"], p["p99_ms"]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    opens = [
        r for r in rows if r["mode"] == "open" and r["p99_ms"] is not None and not r.get("label")
    ]
    if opens:
        ax.scatter(
            [r["rps"] for r in opens],
            [r["p99_ms"] for r in opens],
            marker="x",
            color="black",
            label="open loop (any system)",
        )
    ax.axhline(100, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("throughput (req/s, successful)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_yscale("log")
    ax.set_title("p99 vs throughput (labels: connections)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
