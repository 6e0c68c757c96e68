"""``mlpipe tenants export | purge | audit``: one tenant's logged data, handed over or erased."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mlpipe_cli import console
from mlpipe_cli.state import state

if TYPE_CHECKING:
    from mlpipe.warehouse import PurgeResult

_JSON = typer.Option(False, "--json", help="One JSON document on stdout.")


def register(tenants_app: typer.Typer) -> None:
    tenants_app.command("export")(export)
    tenants_app.command("purge")(purge)
    tenants_app.command("audit")(audit)


def export(
    name: str = typer.Argument(..., help="Tenant name."),
    out: Path = typer.Option(..., "--out", help="Parquet file to write (*.parquet)."),
    since: str | None = typer.Option(None, "--since", help="From (ISO 8601, or an age: 30d)."),
    until: str | None = typer.Option(None, "--until", help="Before (ISO 8601, or an age)."),
    as_json: bool = _JSON,
) -> None:
    """Write a tenant's predictions, joined with their outcomes, to a Parquet file."""
    from mlpipe import warehouse

    done = warehouse.export_tenant(state.settings(), name, out, since=since, until=until)
    if as_json:
        console.print_json({**asdict(done), "path": str(done.path)})
        return
    console.status(
        f"exported {done.predictions} prediction(s) of tenant {name} "
        f"({done.outcomes} with an outcome) to {done.path}"
    )


def purge(
    name: str = typer.Argument(..., help="Tenant name."),
    entity: str | None = typer.Option(
        None, "--entity", help="Only this entity's rows (its key as logged: customer_id=42)."
    ),
    yes: bool = typer.Option(False, "--yes", help="Delete; without it, show what would go."),
    as_json: bool = _JSON,
) -> None:
    """Erase a tenant's (or one entity's) logged rows: warehouse tables and segments on disk."""
    from mlpipe import warehouse

    result = warehouse.purge_tenant(state.settings(), name, entity_key=entity, apply=yes)
    if as_json:
        console.print_json({**asdict(result), "rows": result.rows})
    else:
        _show_purge(result)
    if not yes:
        raise typer.Exit(2)


def _show_purge(result: PurgeResult) -> None:
    who = result.tenant + (f" (entity {result.entity_key})" if result.entity_key else "")
    verb = "purged" if result.applied else "would delete"
    console.status(
        f"{verb} for tenant {who}: {result.predictions} prediction(s), "
        f"{result.outcomes} outcome(s), {result.quarantine} quarantined line(s), "
        f"{result.segment_rows} row(s) in {result.segments_rewritten} segment file(s)"
    )
    console.status("not reached by a purge:")
    for note in result.unreachable:
        console.status(f"  - {note}")
    if not result.applied:
        console.status("nothing deleted: run again with --yes")


def audit(
    name: str | None = typer.Argument(None, help="Only this tenant's entries."),
    as_json: bool = _JSON,
) -> None:
    """List tenant data exports and purges: who, when, what, how many rows."""
    from mlpipe import warehouse

    entries = warehouse.tenant_audit(state.settings(), name)
    if as_json:
        console.print_json([asdict(e) for e in entries])
        return
    columns = ["at", "actor", "action", "tenant", "entity", "rows"]
    rows = [
        [e.at.isoformat(" ", "seconds"), e.actor, e.action, e.tenant, e.entity_key or "", e.rows]
        for e in entries
    ]
    console.show(console.table("tenant data audit", columns, rows))
