"""The launcher: argv and environment for the server (`_arbiter`), and `mlpipe serve`."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from mlpipe.config import load_settings
from mlpipe.serving import MLPIPE_WORKER, server_command, service_dir, unguarded_worker


def test_server_command_passes_home_and_overrides(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    argv, env = server_command(settings, port=4123, workers=3)
    assert argv[1:4] == ["-m", "mlpipe.serving._arbiter", "service:Scoring"]
    assert argv[argv.index("--workers") + 1] == "3"
    assert argv[argv.index("--working-dir") + 1] == str(service_dir())
    assert argv[argv.index("--port") + 1] == "4123"
    assert env["MLPIPE_HOME"] == str(tmp_path.resolve())
    assert env["MLPIPE_SERVING__WORKERS"] == "3"
    assert (service_dir() / "service.py").is_file()


def test_serve_command_registers() -> None:
    from mlpipe_cli.commands import serve

    app = typer.Typer()
    serve.register(app)

    @app.command()
    def other() -> None:  # a second command keeps `serve` a named subcommand
        pass

    result = CliRunner().invoke(app, ["serve", "--help"])
    assert result.exit_code == 0
    assert "--port" in result.output and "--workers" in result.output


def test_serving_workers_give_up_on_a_dead_registry_in_seconds(tmp_path, monkeypatch) -> None:
    from mlpipe.config import load_settings
    from mlpipe.serving import server_command

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    _, env = server_command(load_settings(home=tmp_path))
    assert env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "1"
    assert env["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "3"  # the operator's own value wins


def test_a_worker_another_server_started_is_told_its_heads_are_unbounded() -> None:
    """``bentoml serve`` runs BentoML's worker, on uvicorn's own protocol: the service
    logs this at start (the wheel test reads it in a Bento's server log)."""
    said = unguarded_worker({})
    assert said is not None
    for words in ("`bentoml serve`", "serving.max_header_bytes (431)", "`mlpipe serve`"):
        assert words in said
    assert "serving.header_timeout_s (408)" in said
    assert unguarded_worker({MLPIPE_WORKER: "1"}) is None
    assert unguarded_worker({MLPIPE_WORKER: "0"}) is not None  # only mlpipe's arbiter says 1
