"""Entry point: the Typer app, its command groups, and the one error boundary.

Exit codes: 0 ok, 1 a check failed, 2 usage or input error, 3 a store unreachable.
A user error prints one red line; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import sys

import typer
from typer._click.exceptions import ClickException  # typer 0.29 vendors click

from mlpipe_cli import console
from mlpipe_cli.commands import (
    deploy,
    export,
    features,
    models,
    monitor,
    project,
    serve,
    tenants,
    warehouse,
)
from mlpipe_cli.state import state

app = typer.Typer(
    name="mlpipe",
    help="Register, deploy (canary/shadow), promote, roll back, serve and monitor models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _global(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
    profile: str | None = typer.Option(None, "--profile", help="Settings profile to use."),
) -> None:
    state.debug = debug
    state.profile = profile


project.register(app)
models.register(app)
deploy.register(app)
features.register(app)
serve.register(app)
warehouse.register(app)
monitor.register(app)
tenants.register(app)
export.register(app)


def run() -> None:
    """Console-script entry: run the app and map errors to exit codes in one place."""
    from mlpipe.errors import MlpipeError

    try:
        rv = app(standalone_mode=False)
    except MlpipeError as exc:
        _fail(exc, exc.exit_code)
    except typer.Abort:
        console.error("aborted")
        sys.exit(130)
    except ClickException as exc:
        exc.show()
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)


def _fail(exc: BaseException, code: int) -> None:
    if state.debug:
        console.err.print_exception()
    console.error(str(exc))
    sys.exit(code)
