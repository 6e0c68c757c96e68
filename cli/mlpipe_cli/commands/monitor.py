"""``mlpipe monitor drift|skew``, ``mlpipe canary analyze`` and ``mlpipe rollout``.

Verdicts set the exit code after the summary is printed: 0 ok / pass, 1 drift /
quality / skew / fail / insufficient canary / rolled back; an undelivered
``--alert-webhook`` exits 3. Tables and verdict lines go to stdout (so ``> file``
keeps both), progress and errors to stderr; webhook URLs are printed redacted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from mlpipe_cli import console
from mlpipe_cli.commands.shadow import class_tables
from mlpipe_cli.console import number
from mlpipe_cli.state import state

if TYPE_CHECKING:
    from mlpipe.monitoring import ArmDrift

_JSON = typer.Option(False, "--json", help="One JSON document on stdout.")
_WEBHOOK = typer.Option(None, "--alert-webhook", help="POST the verdict as JSON to this URL.")


def register(app: typer.Typer) -> None:
    monitor = typer.Typer(help="Drift and skew reports over logged traffic.", no_args_is_help=True)
    monitor.command("drift")(drift)
    monitor.command("skew")(skew)
    app.add_typer(monitor, name="monitor")
    canary = typer.Typer(help="Canary vs champion analysis.", no_args_is_help=True)
    canary.command("analyze")(analyze)
    app.add_typer(canary, name="canary")
    app.command("rollout")(rollout)


def _finish(
    kind: str, model: str, verdict: str, code: int, details: dict[str, Any], url: str | None
) -> None:
    if url:
        from mlpipe.monitoring import post_verdict, verdict_payload

        sent = post_verdict(url, verdict_payload(kind, model, verdict, details))
        if not sent.delivered:  # sent.url is redacted: cron logs must not hold the secret path
            console.error(f"alert to {sent.url} not delivered: {sent.error or sent.status}")
            raise typer.Exit(3)
        console.status(f"alert sent to {sent.url} ({sent.status})")
    if code:
        raise typer.Exit(code)


def drift(
    name: str = typer.Argument(..., help="Registered model name."),
    window: str = typer.Option("24h", "--window", help="How far back from now, e.g. 1h, 24h, 7d."),
    arm: str | None = typer.Option(
        None, "--arm", help="champion, canary or shadow (default: each)."
    ),
    version: str | None = typer.Option(
        None, "--version", help="Report this version only (default: each version served)."
    ),
    reference: str = typer.Option(
        "training", "--reference", help="training | window:7d | window:ISO..ISO"
    ),
    false_alarm_rate: float = typer.Option(
        0.01,
        "--false-alarm-rate",
        help="Share of clean reports allowed to alarm; sets each column's threshold.",
    ),
    as_json: bool = _JSON,
    alert_webhook: str | None = _WEBHOOK,
) -> None:
    """Drift, prediction drift and quality: exit 0 ok / insufficient / no data, 1 drift or
    quality, 2 error."""
    from mlpipe import deployments, monitoring

    settings = state.settings()
    feed = deployments.history_feed(settings, console.status)
    result = monitoring.drift(
        settings,
        name,
        window,
        arm=arm,
        reference=reference,
        notify=console.status,
        history=feed,
        false_alarm_rate=false_alarm_rate,
        version=version,
    )
    data = result.to_dict()
    if as_json:
        console.print_json(data)
    else:
        for a in result.arms:
            _drift_arm(name, a)
        console.show(monitoring.thresholds_text(result.calibration))
        console.show(
            f"verdict: {result.verdict} ({result.reference}, drift share threshold "
            f"{result.drift_share_threshold}); reports in {result.report_dir}"
        )
    _finish("drift", name, result.verdict, result.exit_code, data, alert_webhook)


def _drift_arm(name: str, a: ArmDrift) -> None:
    """One arm's table, then its alarms, quality and notes: all on stdout with the table."""
    rows = [
        [
            c.column,
            c.kind,
            c.method,
            number(c.score),
            number(c.threshold),
            number(c.effective_size),
            c.status if c.severity is None else f"{c.status} ({c.severity})",
            c.detail,
        ]
        for c in a.columns
    ]
    from mlpipe import monitoring

    title = monitoring.arm_title(name, a)
    columns = ["column", "kind", "method", "score", "threshold", "n eff", "result", "detail"]
    console.show(console.table(title, columns, rows))
    for alarm in a.alarms:
        console.show(escape(f"alarm {a.arm}: {alarm}"))
    for line in monitoring.quality_lines(a):
        console.show(escape(line))
    _skipped_and_notes(a.skipped, a.notes)


def _skipped_and_notes(skipped: Sequence[Any], notes: Sequence[str]) -> None:
    for s in skipped:
        console.status(f"[yellow]skipped[/yellow] {escape(s.column)}: {escape(s.reason)}")
    for note in notes:
        console.status(escape(f"note: {note}"))


def skew(
    name: str = typer.Argument(..., help="Registered model name."),
    window: str = typer.Option("24h", "--window", help="How far back from now, e.g. 1h, 24h, 7d."),
    sample: int | None = typer.Option(
        None, "--sample", min=1, help="Logged rows to check (default: monitor.skew_sample_rows)."
    ),
    version: str | None = typer.Option(
        None, "--version", help="Check this version only (default: each version served)."
    ),
    as_json: bool = _JSON,
    alert_webhook: str | None = _WEBHOOK,
) -> None:
    """Train/serve skew (served vs Feast point-in-time features): exit 0 ok, 1 skew, 2 error."""
    from mlpipe import deployments, monitoring

    settings = state.settings()
    feed = deployments.history_feed(settings, console.status)
    result = monitoring.skew(
        settings, name, window, sample=sample, notify=console.status, history=feed, version=version
    )
    data = result.to_dict()
    if as_json:
        console.print_json(data)
    else:
        for served in result.versions:
            _skew_version(name, result, served)
        if not result.versions:
            console.show(f"{name}: {result.verdict} — no request of it in the window")
        _skipped_and_notes(result.skipped, result.notes)
        console.show(
            f"verdict: {result.verdict} (relative tolerance {result.rel_tolerance:g}, "
            f"max mismatch rate {result.max_mismatch_rate:g}); recorded in {result.report_path}"
        )
    _finish("skew", name, result.verdict, result.exit_code, data, alert_webhook)


def _skew_version(name: str, result: Any, served: Any) -> None:
    """One version's table: its own rows, compared rows and features; its skewed examples."""
    mine = [f for f in result.features if f.version == served.version]
    rows = [
        [f.feature, str(f.compared), str(f.mismatched), f"{f.mismatch_rate:.2%}",
         number(f.max_abs_diff), "yes" if f.skewed else "no"]
        for f in mine
    ]  # fmt: skip
    services = ", ".join(sorted({f.feature_service for f in mine})) or "-"
    title = (
        f"{name} v{served.version}: {served.verdict} — {served.compared} of {served.rows} "
        f"request(s) compared with the offline store ({services})"
    )
    columns = ["feature", "compared", "mismatched", "rate", "max |diff|", "skewed"]
    console.show(console.table(title, columns, rows))
    for f in mine:
        for e in f.examples if f.skewed else []:
            console.status(
                f"  v{served.version} {f.feature} {e.entity_key} at {e.ts:%Y-%m-%d %H:%M:%S}: "
                f"served {number(e.served)}, offline {number(e.offline)}"
            )


def analyze(
    name: str = typer.Argument(..., help="Registered model name."),
    window: str = typer.Option("1h", "--window", help="How far back from now, e.g. 30m, 1h."),
    version: str | None = typer.Option(
        None, "--version", help="Canary version to analyse (default: the newest on the arm)."
    ),
    as_json: bool = _JSON,
    alert_webhook: str | None = _WEBHOOK,
) -> None:
    """Canary version vs champion on the same rows: exit 0 pass, 1 fail or insufficient, 2 error."""
    from mlpipe import deployments, monitoring

    settings = state.settings()
    feed = deployments.history_feed(settings, console.status)
    result = monitoring.analyze(
        settings, name, window, notify=console.status, history=feed, version=version
    )
    data = result.to_dict()
    if as_json:
        console.print_json(data)
    else:
        rows = console.check_rows(result.checks)
        title = (
            f"{name}: canary v{result.canary_version} ({result.canary_requests} req) vs "
            f"champion v{result.champion_version} ({result.champion_requests} req), "
            f"{result.task}"
        )
        console.show(
            console.table(
                title, ["check", "champion", "canary", "threshold", "result", "detail"], rows
            )
        )
        class_tables(result, "canary")
        for note in result.notes:
            console.show(escape(f"note: {note}"))
        paired = "both versions on the same rows" if result.paired else "arms' own rows"
        console.show(
            f"verdict: {result.verdict} ({paired}); recorded in {result.report_path} "
            f"and {result.html_path}"
        )
    _finish("canary", name, result.verdict, result.exit_code, data, alert_webhook)


def rollout(
    name: str = typer.Argument(..., help="Registered model name."),
    steps: str = typer.Option("5,25,50,100", "--steps", help="Canary weights in percent."),
    interval: str = typer.Option("10m", "--interval", help="Wait, then analyse, at each step."),
    version: str | None = typer.Option(
        None, "--version", help="Version to roll out (default: the canary)."
    ),
    max_waits: int = typer.Option(
        3, "--max-waits", min=1, help="Intervals to wait for enough data."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Take over an abandoned rollout and go on from its weight."
    ),
    as_json: bool = _JSON,
    alert_webhook: str | None = _WEBHOOK,
) -> None:
    """Progressive delivery: promote at 100 %, roll back by itself (exit 1) on a failed step."""
    from mlpipe import deployments

    def on_step(step: deployments.RolloutStep, _analysis: object) -> None:
        if not as_json:
            console.status(f"step {step.weight:g}%: {step.verdict} {step.detail}")

    result = deployments.rollout(
        state.settings(),
        name,
        deployments.parse_steps(steps),
        interval,
        version=version,
        max_waits=max_waits,
        on_step=on_step,
        resume=resume,
    )
    data = result.to_dict()
    if as_json:
        console.print_json(data)
    else:
        console.status(f"rollout of {name} v{result.version}: {result.outcome}")
    _finish("rollout", name, result.outcome, result.exit_code, data, alert_webhook)
