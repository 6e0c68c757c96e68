"""Entry point: the Typer app, its command groups, and the one error boundary.

Exit codes: 0 ok, 1 a check failed, 2 usage or input error, 3 a store unreachable.
A user error prints one red line; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import sys
import warnings

import typer
from typer._click import ClickException, Command, Context  # typer 0.29 vendors click
from typer.core import TyperOption

from mlpipe_cli import console
from mlpipe_cli.commands import (
    deploy,
    export,
    features,
    models,
    monitor,
    project,
    serve,
    shadow,
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
    if debug and not sys.warnoptions:
        warnings.simplefilter("default")  # --debug shows the library warnings too


project.register(app)
models.register(app)
deploy.register(app)
features.register(app)
serve.register(app)
warehouse.register(app)
monitor.register(app)
shadow.register(app)
tenants.register(app)
export.register(app)


def run() -> None:
    """Console-script entry: run the app and map errors to exit codes in one place."""
    from mlpipe.errors import MlpipeError

    _quiet_libraries()
    try:
        rv = _command()(args=_debug_first(sys.argv[1:]), standalone_mode=False)
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


def _debug_first(args: list[str]) -> list[str]:
    """``--debug`` anywhere before a ``--`` is the global option: ``mlpipe register ...
    --debug`` works as ``mlpipe --debug register ...`` (no command has its own)."""
    end = args.index("--") if "--" in args else len(args)
    if "--debug" not in args[:end]:
        return args
    return ["--debug", *(a for a in args[:end] if a != "--debug"), *args[end:]]


def _quiet_libraries() -> None:
    """Library warnings (scikit-learn's feature names, Evidently's and litestar's
    deprecations) speak to mlpipe's developers, not to the person running a command:
    ignored unless ``--debug`` or ``python -W`` / ``PYTHONWARNINGS`` asks for them."""
    if not sys.warnoptions:
        warnings.simplefilter("ignore")


def _command() -> Command:
    """The app as a click command whose --help lists flags without Typer's ``<bool>``."""
    command = typer.main.get_command(app)
    _plain_flags(command)
    return command


def _plain_flags(command: Command) -> None:
    """A flag takes no value, so its help shows none (an empty metavar hides the type)."""
    help_option = command.get_help_option(Context(command))
    for param in [*command.params, *([help_option] if help_option else [])]:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _plain_flags(sub)


def _fail(exc: BaseException, code: int) -> None:
    if state.debug:
        console.err.print_exception()
    console.error(str(exc))
    sys.exit(code)
