"""``mlpipe warehouse sync | query | reports | prune | status`` and ``mlpipe outcomes load``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from mlpipe_cli import console
from mlpipe_cli.state import state

if TYPE_CHECKING:
    from mlpipe import warehouse
    from mlpipe.config import Settings
    from mlpipe.warehouse import PartitionLag

_JSON = typer.Option(False, "--json", help="One JSON document on stdout.")
_SKIPPED_SHOWN = 20  # skipped lines listed one by one; the rest are counted


def register(app: typer.Typer) -> None:
    wh = typer.Typer(
        help="The warehouse: prediction log, outcomes, reports (DuckDB).", no_args_is_help=True
    )
    wh.command("sync")(sync)
    wh.command("query")(query)
    wh.command("reports")(reports)
    wh.command("prune")(prune)
    wh.command("status")(status)
    app.add_typer(wh, name="warehouse")
    outcomes = typer.Typer(help="Ground-truth labels for logged predictions.", no_args_is_help=True)
    outcomes.command("load")(load)
    app.add_typer(outcomes, name="outcomes")


def sync(
    as_json: bool = _JSON,
    follow: bool = typer.Option(
        False,
        "--follow",
        help='Keep loading the Kafka topic as records arrive (predlog.sink = "kafka"); '
        "stops on SIGTERM or Ctrl-C.",
    ),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="With --follow: serve Prometheus metrics (lag) on this port."
    ),
) -> None:
    """Load the prediction log (segments, or the Kafka topic) into the warehouse (idempotent)."""
    from dataclasses import asdict

    from mlpipe import deployments, warehouse

    settings = state.settings()
    feed = deployments.history_feed(settings, console.status)
    result = warehouse.sync(settings, notify=console.status, history=feed)
    if follow:
        _follow(settings, metrics_port)
        return
    counts = result.skipped_counts
    if as_json:
        console.print_json(
            {**asdict(result), "duplicates": result.duplicates, "skipped_counts": counts}
        )
        return
    source = (
        f"{result.kafka_records} Kafka record(s)"
        if settings.predlog.sink == "kafka"
        else f"{result.segments_read} segment(s) ({result.segments_unchanged} unchanged)"
    )
    if result.kafka_lag:
        console.status(_lag_line(result.kafka_lag))
    console.status(
        f"read {source}, "
        f"{result.rows_read} row(s): {result.rows_loaded} new, "
        f"{result.duplicates - result.reused_ids} already loaded; "
        f"predictions now {result.rows_total}; {result.deployments_loaded} deployment change(s) "
        f"mirrored ({result.seconds:.2f}s)"
    )
    if result.segments_released or result.rows_pruned:
        console.status(
            f"released {result.segments_released} loaded segment(s) "
            f"({result.bytes_released / 1e6:.1f} MB); pruned {result.rows_pruned} row(s) "
            "past their retention"
        )
    if result.reused_ids:
        console.status(
            f"[yellow]{result.reused_ids} row(s) repeated a request id already loaded for the "
            "same tenant, model and arm at another time: kept the first, left these out[/yellow]"
        )
    if counts:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        still_open = len(result.skipped) - result.quarantined
        console.status(
            f"[yellow]skipped {len(result.skipped)} line(s):[/yellow] {kinds}; "
            f"{result.quarantined} kept in the quarantine table"
            + (f", {still_open} of segments still open" if still_open else "")
        )
    for line in result.skipped[:_SKIPPED_SHOWN]:
        console.status(
            f"[yellow]skipped[/yellow] {escape(line.segment)}:{line.line}: {escape(line.reason)}"
        )
    if len(result.skipped) > _SKIPPED_SHOWN:
        console.status(f"… and {len(result.skipped) - _SKIPPED_SHOWN} more (--json lists all)")


def prune(as_json: bool = _JSON) -> None:
    """Delete the rows of predictions, outcomes and quarantine past their retention
    (warehouse_retention_days; per tenant: tenants set NAME --retention-days N)."""
    from dataclasses import asdict

    from mlpipe import warehouse

    pruned = warehouse.prune(state.settings(), notify=console.status)
    if as_json:
        console.print_json({**asdict(pruned), "rows": pruned.rows})
        return
    dropped = f" ({pruned.partitions} day partition(s) dropped)" if pruned.partitions else ""
    console.status(
        f"pruned {pruned.predictions} prediction(s){dropped}, {pruned.outcomes} outcome(s), "
        f"{pruned.quarantine} quarantined line(s)"
    )


def status(as_json: bool = _JSON) -> None:
    """What the warehouse holds: rows, day partitions (PostgreSQL), retention and what it
    removed."""
    from dataclasses import asdict

    from mlpipe import warehouse

    found = warehouse.status(state.settings(), notify=console.status)
    if as_json:
        console.print_json(
            {**asdict(found), "prunes": [{**asdict(m), "note": m.note} for m in found.prunes]}
        )
        return
    console.show(console.table(None, ["", "state"], _status_rows(found)))


def _status_rows(found: warehouse.WarehouseStatus) -> list[list[Any]]:
    rows: list[list[Any]] = [["warehouse", f"{found.backend} (schema {found.schema_version})"]]
    rows += [[table, f"{n} row(s)"] for table, n in found.rows.items()]
    days = found.partition_days
    if found.default_partition_rows is not None:
        span = f", {days[0]} to {days[-1]}" if days else ""
        rows.append(
            [
                "partitions",
                f"{len(days)} day partition(s) of predictions{span}; "
                f"{found.default_partition_rows} row(s) in the default partition",
            ]
        )
    default = f"{found.retention_days} day(s)" if found.retention_days else "forever"
    own = "".join(f"; {t} {d} day(s)" for t, d in found.tenant_retention.items())
    rows.append(["retention", f"{default}{own}"])
    for mark in found.prunes:
        last = f"the last prune ({mark.pruned_at:%Y-%m-%d %H:%M}) removed {mark.rows}"
        rows.append(["pruned", f"{mark.note}; {last}, {mark.rows_total} in all"])
    return rows


def _lag_line(lags: list[PartitionLag]) -> str:
    per = ", ".join(f"p{p.partition} {p.lag}" for p in lags)
    line = f"Kafka lag: {sum(p.lag for p in lags)} record(s) not yet loaded ({per})"
    expired = sum(p.expired for p in lags)
    if expired:
        line += f"; [red]{expired} record(s) expired before they were loaded[/red]"
    return line


def _follow(settings: Settings, metrics_port: int | None) -> None:
    """``sync --follow``: load batches as they arrive until SIGTERM or SIGINT."""
    import signal
    import time

    from mlpipe import warehouse
    from mlpipe.errors import InvalidInput

    if settings.predlog.sink != "kafka":
        raise InvalidInput('--follow reads a Kafka topic: set [predlog] sink = "kafka"')
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))
    gauge = _lag_gauge(metrics_port)
    last = {"rows": 0, "lag_at": 0.0}

    def after_batch(result: warehouse.SyncResult) -> None:
        if result.rows_loaded != last["rows"]:
            console.status(
                f"loaded {result.rows_loaded} row(s) so far, {result.duplicates} already loaded, "
                f"{result.quarantined} quarantined"
            )
            last["rows"] = result.rows_loaded
        if gauge is not None and time.monotonic() - last["lag_at"] > 5:
            for p in warehouse.topic_lag(settings):
                gauge.labels(p.topic, str(p.partition)).set(p.lag)
            last["lag_at"] = time.monotonic()

    console.status(
        f"following Kafka topic {settings.predlog.kafka_topic!r} as group "
        f"{settings.predlog.kafka_group!r} (SIGTERM or Ctrl-C stops)"
    )
    warehouse.follow(settings, warehouse.SyncResult(), lambda: bool(stopping), after_batch)
    console.status("stopped: every loaded batch is committed with its offsets")


def _lag_gauge(port: int | None) -> Any:
    if port is None:
        return None
    from prometheus_client import Gauge, start_http_server

    gauge = Gauge(
        "mlpipe_predlog_kafka_lag_records",
        "Prediction-log records in the Kafka topic not yet loaded into the warehouse",
        ["topic", "partition"],
    )
    start_http_server(port, addr="127.0.0.1")
    return gauge


def query(
    sql: str = typer.Argument(..., help="One read-only SQL statement."),
    limit: int = typer.Option(1000, "--limit", min=1, help="Most rows to print."),
    as_json: bool = _JSON,
) -> None:
    """Run read-only SQL against the warehouse."""
    from mlpipe import warehouse

    result = warehouse.query(state.settings(), sql, limit=limit, notify=console.status)
    if as_json:
        rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
        console.print_json({"columns": result.columns, "rows": rows, "truncated": result.truncated})
        return
    console.show(console.table(None, result.columns, [list(r) for r in result.rows]))
    if result.truncated:
        console.status(f"first {limit} rows shown (--limit)")


def reports(
    name: str | None = typer.Argument(None, help="Model name (all models if omitted)."),
    kind: str | None = typer.Option(None, "--kind", help="drift, canary or skew."),
    limit: int = typer.Option(20, "--limit", min=1),
    as_json: bool = _JSON,
) -> None:
    """The report index, newest first."""
    from dataclasses import asdict

    from mlpipe import warehouse

    settings = state.settings()
    entries = warehouse.list_reports(settings, model=name, kind=kind, limit=limit)
    mark = warehouse.latest_prune_cutoff(settings)
    # a report over a window that reaches back past the cutoff: some of its rows are gone
    pruned = [bool(mark and e.window_start and mark.covers(e.window_start)) for e in entries]
    if as_json:
        console.print_json(
            [{**asdict(e), "rows_pruned": p} for e, p in zip(entries, pruned, strict=True)]
        )
        return
    rows = [
        [f"{e.created_at:%Y-%m-%d %H:%M:%S}", e.kind, e.model, e.arm, e.version, e.verdict, e.path]
        for e in entries
    ]
    console.show(
        console.table(None, ["created", "kind", "model", "arm", "version", "verdict", "path"], rows)
    )
    if mark and any(pruned):
        console.status(
            f"{sum(pruned)} of these report(s) cover a window from before the cutoff: "
            f"{mark.note}; each report keeps the figures it was made with"
        )


def load(
    file: Path = typer.Argument(
        ...,
        help="CSV or Parquet: request_id,label  or  entity_key,timestamp,label; "
        "a label is a class (1, setosa) or a numeric target (2.5); a tenant column optional",
    ),
    tolerance: float = typer.Option(
        60.0,
        "--tolerance-s",
        help="entity_key+timestamp: how far a prediction may lag the timestamp.",
    ),
    tenant: str | None = typer.Option(
        None,
        "--tenant",
        help="The tenant of every row (a file without a tenant column). Without it, an id "
        "more than one tenant logged is refused.",
    ),
    as_json: bool = _JSON,
) -> None:
    """Load outcomes (labels) and match them to logged predictions; all rows match or none load."""
    from dataclasses import asdict
    from functools import partial

    from mlpipe import deployments, registry, warehouse

    settings = state.settings()
    result = warehouse.load_outcomes(
        settings,
        file,
        notify=console.status,
        tolerance_s=tolerance,
        tenant=tenant,
        sync_first=True,
        history=deployments.history_feed(settings, console.status),
        classes=partial(registry.classes_of, settings),
    )
    if result.unknown_labels:
        console.status(
            f"Warning: {result.unknown_labels} label(s) name no class of the model that "
            f"scored them (first: {result.unknown_label_example}); loaded as given"
        )
    if as_json:
        console.print_json(asdict(result))
        return
    console.status(
        f"{result.rows} outcome(s) from {file} matched by {result.matched_by}: "
        f"{result.inserted} new, {result.replaced} replaced, {result.unchanged} unchanged"
    )
