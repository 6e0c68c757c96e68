"""``mlpipe init``, ``mlpipe doctor`` and ``mlpipe demo``."""

from __future__ import annotations

import typer

from mlpipe_cli import console
from mlpipe_cli.state import state


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("doctor")(doctor)


def init() -> None:
    """Create the local stack in .mlpipe/ (idempotent)."""
    from mlpipe import stack

    steps = stack.init(state.settings())
    rows = [[s.store, s.location, "created" if s.created else "exists"] for s in steps]
    console.show(console.table("local stack", ["store", "location", "state"], rows))
    if not any(s.created for s in steps):
        console.status("nothing to do: the local stack is already initialized")


def doctor(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Check every store the active settings name; exit 3 if one is unreachable."""
    from dataclasses import asdict

    from mlpipe import stack

    checks = stack.doctor(state.settings())
    if json_out:
        console.print_json([asdict(c) for c in checks])
    else:
        rows = [[c.store, c.location, "ok" if c.ok else "FAIL", c.detail] for c in checks]
        console.show(console.table("stores", ["store", "location", "status", "detail"], rows))
    if not all(c.ok for c in checks):
        raise typer.Exit(3)
