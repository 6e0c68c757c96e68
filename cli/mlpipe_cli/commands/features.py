"""``mlpipe features``: generate data, apply and materialize the Feast repo, build training sets."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer

from mlpipe_cli import console
from mlpipe_cli.state import state

features_app = typer.Typer(
    help="The Feast feature repository: data, apply, materialize, training sets.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(features_app, name="features")


@features_app.command("generate")
def generate(
    customers: int = typer.Option(500, "--customers", help="Number of customers."),
    days: int = typer.Option(30, "--days", help="Days of transactions, ending now."),
    seed: int = typer.Option(7, "--seed", help="Random seed (same seed, same data)."),
    shift: list[str] = typer.Option(
        [], "--shift", help="FEATURE=FACTOR: scale a column, for drift demos (repeatable)."
    ),
) -> None:
    """Write a synthetic labelled transaction stream into the repo's data/ directory."""
    from mlpipe.demo import generate as generate_transactions

    settings = state.settings()
    data = generate_transactions(
        settings.feature_repo_path / "data",
        customers=customers,
        days=days,
        seed=seed,
        shift=_parse_shift(shift),
    )
    rows = [[p.name, str(p.parent)] for p in (data.customer_stats, data.customer_profile)]
    rows.append([data.transactions.name, str(data.transactions.parent)])
    console.show(console.table("generated", ["file", "directory"], rows))
    console.status(
        f"{data.customers} customers, {data.transaction_count} transactions "
        f"({data.fraud_rate:.1%} fraud), {data.start:%Y-%m-%d %H:%M} "
        f"to {data.end:%Y-%m-%d %H:%M} UTC"
    )


@features_app.command("apply")
def apply() -> None:
    """Register the repo's entities, feature views and services with Feast (``feast apply``)."""
    from mlpipe import features

    result = features.apply(state.settings())
    rows = [["entity", n] for n in result.entities]
    rows += [["feature view", n] for n in result.feature_views]
    rows += [["feature service", n] for n in result.feature_services]
    rows += [["deleted", n] for n in result.deleted]
    console.show(console.table(f"applied to project {result.project}", ["kind", "name"], rows))


@features_app.command("materialize")
def materialize(
    end: datetime | None = typer.Option(None, "--end", help="Load values up to this time (UTC)."),
) -> None:
    """Load each feature view's latest values (within its TTL) into the online store."""
    from mlpipe import features

    result = features.materialize(state.settings(), end=end)
    rows = [
        [v, f"{a:%Y-%m-%d %H:%M}", f"{b:%Y-%m-%d %H:%M}"] for v, (a, b) in result.windows.items()
    ]
    console.show(console.table("materialized (UTC)", ["feature view", "from", "to"], rows))


@features_app.command("dataset")
def dataset(
    service: str = typer.Option(..., "--service", help="FeatureService, e.g. fraud_v1."),
    entities: Path = typer.Option(..., "--entities", help="Entity rows: .csv or .parquet."),
    out: Path = typer.Option(..., "--out", help="Where to write the set: .csv or .parquet."),
) -> None:
    """Build a point-in-time-correct training set for ENTITIES with SERVICE's features."""
    from mlpipe import features

    rows = features.read_entities(entities)
    frame = features.training_set(state.settings(), service, rows)
    path = features.write_dataset(frame, out)
    added = frame.shape[1] - rows.shape[1]
    console.status(f"wrote {len(frame)} rows ({added} features of {service}) to {path}")


@features_app.command("services")
def services(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the registered FeatureServices and their features."""
    from dataclasses import asdict

    from mlpipe import features

    specs = features.list_services(state.settings())
    if json_out:
        console.print_json([asdict(s) for s in specs])
        return
    rows = [[s.name, ", ".join(s.refs), s.definition_sha256[:12]] for s in specs]
    console.show(console.table("feature services", ["service", "features", "definition"], rows))


def _parse_shift(items: list[str]) -> dict[str, float]:
    from mlpipe.errors import InvalidInput

    shift: dict[str, float] = {}
    for item in items:
        name, sep, factor = item.partition("=")
        try:
            shift[name.strip()] = float(factor)
        except ValueError as exc:
            raise InvalidInput(f"--shift {item!r}: expected FEATURE=FACTOR") from exc
        if not sep or not name.strip():
            raise InvalidInput(f"--shift {item!r}: expected FEATURE=FACTOR")
    return shift
