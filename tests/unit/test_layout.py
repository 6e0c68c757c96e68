"""The repository layout keeps the standard library's ``platform`` module reachable."""

import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_no_platform_package_at_repo_root() -> None:
    assert not (REPO / "platform" / "__init__.py").exists()


def test_import_platform_from_repo_root_is_stdlib() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import platform; print(platform.__file__)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(out).parent == Path(sysconfig.get_paths()["stdlib"])


def test_help_imports_no_heavy_library() -> None:
    code = (
        "import sys; from mlpipe_cli.main import app;"
        "heavy = {'mlflow', 'feast', 'evidently', 'bentoml', 'torch', 'pandas', 'duckdb'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"
