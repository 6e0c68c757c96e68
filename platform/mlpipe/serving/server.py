"""How to start the scoring service as a process: the command line and its environment.

The server reads its settings from the environment, so the launcher passes the
project home, profile and serving overrides as ``MLPIPE_*`` variables.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mlpipe.errors import NotFound

if TYPE_CHECKING:
    from mlpipe.config import Settings

SERVICE = "service:Scoring"


def service_dir() -> Path:
    """``bentos/scoring`` of this checkout (``MLPIPE_SCORING_DIR`` overrides)."""
    explicit = os.environ.get("MLPIPE_SCORING_DIR")
    path = Path(explicit) if explicit else Path(__file__).resolve().parents[3] / "bentos/scoring"
    if not (path / "service.py").is_file():
        raise NotFound(f"no scoring service at {path} (set MLPIPE_SCORING_DIR)")
    return path


def server_command(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, env) that run ``bentoml serve`` on the scoring service for these settings."""
    s = settings.serving
    host = host or s.host
    port = port or s.port
    argv = [
        sys.executable,
        "-m",
        "bentoml",
        "serve",
        SERVICE,
        "--working-dir",
        str(service_dir()),
        "--host",
        host,
        "--port",
        str(port),
    ]
    env = dict(os.environ)
    env.update(
        MLPIPE_HOME=str(settings.home),
        MLPIPE_PROFILE=settings.profile,
        MLPIPE_SERVING__HOST=host,
        MLPIPE_SERVING__PORT=str(port),
        BENTOML_DO_NOT_TRACK="true",
    )
    if workers is not None:
        env["MLPIPE_SERVING__WORKERS"] = str(workers)
    return argv, env


__all__ = ["SERVICE", "server_command", "service_dir"]
