"""``mlpipe deploy | promote | rollback | undeploy | status | history``: the deployment loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from mlpipe_cli import console
from mlpipe_cli.state import state

if TYPE_CHECKING:
    from mlpipe.config import Settings
    from mlpipe.deployments import Deployment, DeploymentStatus

_REASON = typer.Option(None, "--reason", help="Why; recorded in the history.")
_EXPECT = typer.Option(
    None, "--expect-generation", help="Fail unless the record is at this generation."
)


def register(app: typer.Typer) -> None:
    commands: list[tuple[str, Callable[..., Any]]] = [
        ("deploy", deploy),
        ("promote", promote),
        ("rollback", rollback),
        ("undeploy", undeploy),
        ("status", status),
        ("history", history),
    ]
    for name, fn in commands:
        app.command(name)(fn)


def deploy(
    name: str = typer.Argument(...),
    version: str = typer.Option(..., "--version", help="Registered version to deploy."),
    canary: float | None = typer.Option(None, "--canary", help="Run as canary at PCT %."),
    shadow: float | None = typer.Option(None, "--shadow", help="Mirror PCT % of traffic."),
    reason: str | None = _REASON,
    expect_generation: int | None = _EXPECT,
    force: bool = typer.Option(
        False, "--force", help="Take over from a running rollout (it stops at its next step)."
    ),
) -> None:
    """Deploy a version: as champion, or as a canary / shadow next to it."""
    from mlpipe import deployments

    record = deployments.deploy(
        state.settings(),
        name,
        version,
        canary=canary,
        shadow=shadow,
        reason=reason,
        expected_generation=expect_generation,
        force=force,
    )
    render_deployment(record)


def promote(
    name: str = typer.Argument(...),
    force: bool = typer.Option(
        False, "--force", help="Promote without a passing canary analysis (recorded)."
    ),
    reason: str | None = _REASON,
    expect_generation: int | None = _EXPECT,
) -> None:
    """Make the canary the champion; the old champion becomes @previous."""
    from mlpipe import deployments

    record = deployments.promote(
        state.settings(), name, reason=reason, force=force, expected_generation=expect_generation
    )
    render_deployment(record)


def rollback(
    name: str = typer.Argument(...),
    reason: str | None = _REASON,
    expect_generation: int | None = _EXPECT,
) -> None:
    """Drop the canary, or put @previous back as champion."""
    from mlpipe import deployments

    record = deployments.rollback(
        state.settings(), name, reason=reason, expected_generation=expect_generation
    )
    render_deployment(record)


def undeploy(
    name: str = typer.Argument(...),
    reason: str | None = _REASON,
    expect_generation: int | None = _EXPECT,
) -> None:
    """Take the model out of service (servers stop routing it); `rollback` brings it back."""
    from mlpipe import deployments

    record = deployments.undeploy(
        state.settings(), name, reason=reason, expected_generation=expect_generation
    )
    render_deployment(record)


def status(
    name: str = typer.Argument(...),
    window: str = typer.Option("1h", "--window", help="Figures over this window (e.g. 1h, 24h)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """The deployment record of a model and its per-arm figures from the warehouse."""
    from dataclasses import asdict

    from mlpipe import deployments

    settings = state.settings()
    report = deployments.status_report(settings, name)
    record = report.record
    figures, note = _figures(settings, name, window)
    lag, lag_line = _log_lag(settings)
    if json_out:
        console.print_json(
            {
                **asdict(record),
                **_status_extras(report),
                "figures": [asdict(f) for f in figures],
                **({"kafka_lag": [asdict(p) for p in lag]} if lag else {}),
            }
        )
        return
    render_deployment(record)
    rows = [[f.arm, f.version, f.requests, f.errors, _ms(f.p50_ms), _ms(f.p99_ms)] for f in figures]
    title = f"last {window} (as of the last `mlpipe warehouse sync`)"
    console.show(console.table(title, ["arm", "version", "requests", "errors", "p50", "p99"], rows))
    for line in [*_status_lines(report), note, lag_line]:
        if line:
            console.status(line)


def _status_extras(report: DeploymentStatus) -> dict[str, Any]:
    rollout = report.rollout
    return {
        "rollout": None
        if rollout is None
        else {
            "state": rollout.state,
            "version": rollout.lease.version,
            "weight": rollout.lease.weight,
            "pid": rollout.lease.pid,
            "host": rollout.lease.host,
            "heartbeat_at": rollout.lease.heartbeat_at.isoformat(),
        },
        "aliases_healed": [
            {"alias": d.alias, "was": d.mlflow, "now": d.record} for d in report.aliases_healed
        ],
        "aliases_error": report.aliases_error,
    }


def _status_lines(report: DeploymentStatus) -> list[str]:
    lines = []
    if report.rollout is not None:
        model = report.record.model
        way_out = (
            f"; end it with `mlpipe rollout {model} --resume` or `mlpipe rollback {model}`"
            if report.rollout.state == "abandoned"
            else ""
        )
        lines.append(f"{report.rollout.describe()}{way_out}")
    for d in report.aliases_healed:
        lines.append(f"healed alias drift: @{d.alias} was {d.mlflow}, now {d.record}")
    if report.aliases_error:
        lines.append(f"aliases not checked: {report.aliases_error}")
    return lines


def _log_lag(settings: Settings) -> tuple[list[Any], str | None]:
    """With the log on Kafka: per-partition lag, and a line saying what the figures lack."""
    from mlpipe import warehouse
    from mlpipe.errors import StoreUnavailable

    if settings.predlog.sink != "kafka":
        return [], None
    try:
        lag = warehouse.topic_lag(settings)
    except StoreUnavailable as exc:
        return [], f"prediction log lag unknown: {exc}"
    behind = sum(p.lag for p in lag)
    line = (
        f"prediction log: Kafka topic {settings.predlog.kafka_topic!r} holds {behind} "
        "record(s) not yet in the warehouse (not in the figures above)"
    )
    return lag, line


def _figures(settings: Settings, name: str, window: str) -> tuple[list[Any], str | None]:
    from mlpipe import warehouse
    from mlpipe.errors import StoreUnavailable
    from mlpipe.windows import window_ending  # not mlpipe.monitoring: that imports Evidently

    start = window_ending(window).start
    try:
        return warehouse.arm_figures(settings, name, start), None
    except StoreUnavailable as exc:
        return [], f"no live figures: {exc}"


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f} ms"


def history(
    name: str = typer.Argument(...),
    limit: int = typer.Option(20, "--limit", min=1),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Every change to the deployment record, newest first."""
    from dataclasses import asdict

    from mlpipe import deployments

    entries = deployments.history(state.settings(), name, limit)
    if json_out:
        console.print_json([asdict(e) for e in entries])
        return
    cols = ["gen", "action", "champion", "canary", "shadow", "previous", "at", "actor", "reason"]
    rows = [
        [
            e.generation,
            e.action,
            e.champion,
            _pct(e.canary, e.canary_weight),
            _pct(e.shadow, e.shadow_sample),
            e.previous,
            e.at.strftime("%Y-%m-%d %H:%M:%S"),
            e.actor,
            e.reason,
        ]
        for e in entries
    ]
    console.show(console.table(f"history of {name}", cols, rows))


def _pct(version: str | None, pct: float) -> str | None:
    return f"{version} ({pct:g}%)" if version else None


def render_deployment(record: Deployment) -> None:
    rows: list[list[Any]] = [
        ["generation", record.generation],
        ["champion", record.champion],
        ["canary", _pct(record.canary, record.canary_weight)],
        ["shadow", _pct(record.shadow, record.shadow_sample)],
        ["previous", record.previous],
        ["updated", f"{record.updated_at:%Y-%m-%d %H:%M:%S} by {record.actor}"],
        ["reason", record.reason],
    ]
    console.show(console.table(f"deployment of {record.model}", ["field", "value"], rows))
