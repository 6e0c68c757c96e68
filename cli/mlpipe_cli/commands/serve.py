"""``mlpipe serve``: run the scoring service in the foreground."""

from __future__ import annotations

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
    from mlpipe.serving import exec_server, server_command

    settings = state.settings()
    argv, env = server_command(settings, host=host, port=port, workers=workers)
    console.status(
        f"serving {settings.home} on http://{env['MLPIPE_SERVING__HOST']}:"
        f"{env['MLPIPE_SERVING__PORT']} (Ctrl-C or SIGTERM drains and stops)"
    )
    exec_server(argv, env)  # this process becomes the server: a supervisor's signal reaches it
