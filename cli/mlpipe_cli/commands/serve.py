"""``mlpipe serve``: run the scoring service in the foreground."""

from __future__ import annotations

import subprocess

import typer

from mlpipe_cli import console
from mlpipe_cli.state import state


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    port: int | None = typer.Option(None, "--port", help="Port (default: serving.port)."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Worker processes."),
    host: str | None = typer.Option(None, "--host", help="Bind address (default: serving.host)."),
) -> None:
    """Serve /predict for every deployed model until interrupted."""
    from mlpipe.serving.server import server_command

    settings = state.settings()
    argv, env = server_command(settings, host=host, port=port, workers=workers)
    console.status(
        f"serving {settings.home} on http://{env['MLPIPE_SERVING__HOST']}:"
        f"{env['MLPIPE_SERVING__PORT']} (Ctrl-C stops)"
    )
    try:
        code = subprocess.call(argv, env=env)
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)
