"""``mlpipe init``, ``mlpipe doctor`` and ``mlpipe demo``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mlpipe_cli import console
from mlpipe_cli.state import state

if TYPE_CHECKING:
    from mlpipe.demo import DemoEvent
    from mlpipe.stack import StoreCheck


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("doctor")(doctor)
    app.command("demo")(demo)


def init(
    directory: Path | None = typer.Argument(
        None,
        help="Project directory (default: the project around this one, else this one).",
        show_default=False,
    ),
    no_feature_store: bool = typer.Option(
        False,
        "--no-feature-store",
        help="No Feast repository: models take every input from the request.",
    ),
) -> None:
    """Make a directory an mlpipe project: mlpipe.toml and the local stack (idempotent)."""
    from mlpipe import stack

    settings, steps = stack.init_project(
        directory, feature_store=not no_feature_store, profile=state.profile
    )
    rows = [[s.store, s.location, "created" if s.created else "exists"] for s in steps]
    console.show(console.table(f"project {settings.home}", ["store", "location", "state"], rows))
    if not any(s.created for s in steps):
        console.status("nothing to do: the local stack is already initialized")


def doctor(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Check every store the active settings name; exit 3 if one is unreachable."""
    from dataclasses import asdict

    from mlpipe import stack
    from mlpipe.config import config_path

    settings = state.settings()
    checks = stack.doctor(settings)
    if json_out:
        console.print_json([asdict(c) for c in checks])
    else:
        config = config_path(settings.home)
        source = str(config) if config.is_file() else "defaults: no mlpipe.toml"
        title = f"stores of profile {settings.profile!r} (config: {source})"
        rows = [[c.store, c.location, _check_status(c), c.detail] for c in checks]
        console.show(console.table(title, ["store", "location", "status", "detail"], rows))
    if not all(c.ok for c in checks):
        raise typer.Exit(3)


def _check_status(check: StoreCheck) -> str:
    if not check.configured:
        return "-"
    return "ok" if check.ok else "FAIL"


def demo(
    customers: int = typer.Option(500, "--customers", min=10),
    days: int = typer.Option(30, "--days", min=2),
    requests: int = typer.Option(600, "--requests", min=50, help="Requests per traffic phase."),
    serve: bool = typer.Option(True, "--serve/--no-serve", help="Run the loop under traffic."),
) -> None:
    """Run the whole loop on a fresh embedded stack in .mlpipe-demo/."""
    from mlpipe import demo as demo_run

    result = demo_run.run(
        state.settings(project=False),
        _narrate,
        customers=customers,
        days=days,
        serve=serve,
        requests_per_phase=requests,
    )
    console.status(
        f"\ndemo home: {result.home} (try: MLPIPE_HOME={result.home} mlpipe history fraud)"
    )


def _narrate(event: DemoEvent) -> None:
    from mlpipe_cli.commands.deploy import render_deployment

    console.status(f"[bold]▶ {event.title}[/bold] {event.detail}")
    if event.deployment is not None:
        render_deployment(event.deployment)
    if event.table is not None:
        columns, rows = event.table
        console.show(console.table(None, columns, rows))
