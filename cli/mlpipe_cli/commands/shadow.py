"""``mlpipe shadow analyze``: the shadow version vs the champion on the same requests.

Exit 0 pass, 1 fail or insufficient data, 2 error (like ``canary analyze``).
The table, the figures and the verdict line go to stdout; progress to stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from mlpipe_cli import console
from mlpipe_cli.console import number
from mlpipe_cli.state import state

if TYPE_CHECKING:
    from mlpipe.monitoring import Disagreement, ShadowAnalysis


def register(app: typer.Typer) -> None:
    shadow = typer.Typer(help="Shadow vs champion analysis.", no_args_is_help=True)
    shadow.command("analyze")(analyze)
    app.add_typer(shadow, name="shadow")


def analyze(
    name: str = typer.Argument(..., help="Registered model name."),
    window: str = typer.Option("1h", "--window", help="How far back from now, e.g. 30m, 1h."),
    version: str | None = typer.Option(
        None, "--version", help="Shadow version to analyse (default: the newest logged)."
    ),
    top: int = typer.Option(10, "--top", min=0, help="Largest disagreements to list."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
) -> None:
    """Shadow vs champion, paired by request id: exit 0 pass, 1 fail or insufficient, 2 error."""
    from mlpipe import deployments, monitoring

    settings = state.settings()
    result = monitoring.analyze_shadow(
        settings, name, window, version=version, top=top, notify=console.status,
        history=deployments.history_feed(settings, console.status),
    )  # fmt: skip
    if as_json:
        console.print_json(result.to_dict())
    else:
        _render(name, result)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _render(name: str, result: ShadowAnalysis) -> None:
    rows = console.check_rows(result.checks)
    title = (
        f"{name}: shadow v{result.shadow_version} vs champion v{result.champion_version} "
        f"on {result.paired_requests} paired request(s), {result.task}"
    )
    columns = ["check", "champion", "shadow", "threshold", "result", "detail"]
    console.show(console.table(title, columns, rows))
    spread = ", ".join(f"{k}={number(v)}" for k, v in result.score_delta.items())
    latency = ", ".join(f"{k}={number(v)}" for k, v in result.latency_ms.items())
    console.show(f"labelled: {result.labelled_requests} of {result.paired_requests}")
    if result.task != "regression":
        console.show(f"label agreement: {number(result.label_agreement)}")
    if result.score_delta:
        what = "prediction" if result.task == "regression" else "score"
        console.show(f"{what} delta (shadow - champion): {spread}")
    class_tables(result, "shadow")
    console.show(f"latency ms: {latency or '-'}")
    _top(result)
    for note in result.notes:
        console.show(escape(f"note: {note}"))
    console.show(
        f"verdict: {result.verdict}; recorded in {result.report_path} and {result.html_path}"
    )


def class_tables(result: Any, side: str) -> None:
    """A classifier's per-class tables of a ``side`` (canary or shadow) analysis: each arm on
    its own rows (canary), agreement and confusion of both versions' predicted classes on the
    same rows, probability deltas per class (multiclass)."""
    deltas = ["class", "mean", "mean_abs", "p1", "p99", "max_abs"]
    for title, records, shown in (
        ("per class, each arm's own rows", getattr(result, "arm_classes", []), None),
        ("predicted classes, same rows", result.class_agreement, None),
        (f"champion (rows) vs {side} (columns)", result.confusion, None),
        (f"probability delta per class ({side} - champion)", result.probability_delta, deltas),
    ):
        if records:
            columns = shown or list(records[0])
            rows = [[number(r[c]) for c in columns] for r in records]
            console.show(console.table(title, columns, rows))


def _top(result: ShadowAnalysis) -> None:
    multiclass = result.task.startswith("multiclass")
    top = [
        [d.request_id, d.entity_key, *([d.delta_class or "-"] if multiclass else []),
         number(d.champion_score), number(d.shadow_score), f"{d.delta:+.4f}", _labels(d),
         number(d.outcome)]
        for d in result.disagreements
    ]  # fmt: skip
    if top:
        columns = ["request_id", "entity", *(["class"] if multiclass else []), "champion",
                   "shadow", "delta", "labels", "outcome"]  # fmt: skip
        console.show(console.table("largest disagreements", columns, top))


def _labels(d: Disagreement) -> str:
    """Both predicted classes (champion/shadow), or ``-`` for a regression."""
    return "-" if d.champion_label is None else f"{d.champion_label}/{d.shadow_label}"
