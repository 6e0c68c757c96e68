"""``mlpipe tenants add | list | pin | revoke``: who may call the scoring service.

``export | purge | audit`` (a tenant's logged data) are in :mod:`.tenant_data`.
"""

from __future__ import annotations

import typer

from mlpipe_cli import console
from mlpipe_cli.state import state

tenants_app = typer.Typer(help="API keys and rate limits of the tenants of the scoring service.")


def register(app: typer.Typer) -> None:
    from mlpipe_cli.commands import tenant_data

    tenant_data.register(tenants_app)
    app.add_typer(tenants_app, name="tenants")


@tenants_app.command("add")
def add(
    name: str = typer.Argument(..., help="Tenant name (letters, digits, _ - .)."),
    rate: float | None = typer.Option(None, "--rate", help="Requests/s (default: settings)."),
    burst: int | None = typer.Option(None, "--burst", help="Bucket size (default: settings)."),
    pin: str | None = typer.Option(None, "--pin", help="Always route to: champion|canary."),
    retention_days: int | None = typer.Option(
        None, "--retention-days", help="Keep its warehouse rows N days (default: settings)."
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Add a tenant and print its API key; the key is shown this once only."""
    from mlpipe import security, warehouse

    warehouse.check_retention_days(retention_days)
    tenant, key = security.add_tenant(state.settings(), name, rate=rate, burst=burst, pin=pin)
    if retention_days:
        warehouse.set_tenant_retention(state.settings(), name, retention_days)
    if json_out:
        console.print_json({**tenant.public(), "key": key})
        return
    console.status(
        f"added tenant {tenant.name} ({tenant.rate:g}/s, burst {tenant.burst}); "
        "its key is shown once — store it now:"
    )
    console.out.out(key)


@tenants_app.command("list")
def list_tenants(json_out: bool = typer.Option(False, "--json")) -> None:
    """List tenants (key ids and limits; never keys)."""
    from mlpipe import security

    rows = [t.public() for t in security.list_tenants(state.settings())]
    if json_out:
        console.print_json(rows)
        return
    columns = ["name", "key_id", "rate", "burst", "pin", "created_at", "revoked_at"]
    console.show(console.table("tenants", columns, [[r[c] for c in columns] for r in rows]))


@tenants_app.command("pin")
def pin(
    name: str = typer.Argument(...),
    arm: str = typer.Argument(..., help="champion, canary, or none to unpin."),
) -> None:
    """Route all of a tenant's requests to one arm (servers apply it within key_refresh_s)."""
    from mlpipe import security

    tenant = security.pin_tenant(state.settings(), name, None if arm == "none" else arm)
    where = f"pinned to the {tenant.pin}" if tenant.pin else "routed by the split again"
    console.status(f"tenant {tenant.name} is {where}")


@tenants_app.command("set")
def set_(
    name: str = typer.Argument(...),
    retention_days: int = typer.Option(
        ..., "--retention-days", help="Keep its warehouse rows N days; 0: the default again."
    ),
) -> None:
    """Set a tenant's warehouse retention (applied by `warehouse prune` and after each sync)."""
    from mlpipe import warehouse

    days = warehouse.set_tenant_retention(state.settings(), name, retention_days)
    kept = "kept until purged" if days is None else f"kept {days} day(s)"
    console.status(f"tenant {name}: warehouse rows {kept}")


@tenants_app.command("revoke")
def revoke(name: str = typer.Argument(...)) -> None:
    """Revoke a tenant's key; servers refuse it within ``security.key_refresh_s``."""
    from mlpipe import security

    tenant = security.revoke_tenant(state.settings(), name)
    console.status(f"revoked tenant {tenant.name} (key {tenant.key_id})")
