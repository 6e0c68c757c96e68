"""Shared fixtures: an isolated project home, and a registry template with two versions.

Registering a model costs a few seconds, so two versions of ``fraud`` are
registered once per session into a template home; each test that needs them
gets a fresh copy of that home (registry database included, control plane
empty), so no test sees another's deployments or aliases.

A test that needs one of mlpipe's optional extras says which with a marker named
after it (``@pytest.mark.formats``, ``nn``, ``prod``): where one of the extra's
modules is not installed it is skipped, naming the extra and the module, and
under CI (``CI`` set, everything installed) it fails instead, so CI never skips
one (tests/unit/test_extras.py).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MLPIPE = str(Path(sys.executable).parent / "mlpipe")

# The suite caches bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE,
# as on the development VM), in this process and every one a test starts: each xdist
# worker and each subprocess compiled mlpipe and rewrote the test modules again
# (~11 s of CPU a worker). The cache lands in the ignored __pycache__ directories.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# pyproject's [project.optional-dependencies] but `dev` (the test tools): for each extra,
# the module each of its distributions installs (tests/unit/test_extras.py keeps it in step).
EXTRAS: dict[str, dict[str, str]] = {
    "prod": {"psycopg": "psycopg", "redis": "redis", "confluent-kafka": "confluent_kafka"},
    "nn": {"torch": "torch", "tritonclient": "tritonclient.http"},
    "formats": {
        "onnx": "onnx",
        "onnxruntime": "onnxruntime",
        "skl2onnx": "skl2onnx",
        "onnxmltools": "onnxmltools",
        "xgboost-cpu": "xgboost",
    },
}


@functools.cache
def _installed(module: str) -> bool:
    """Whether ``module`` can be found; found, not imported (torch takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # its parent package is missing
        return False


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that are not installed."""
    return [m for m in EXTRAS[extra].values() if not _installed(m)]


def pytest_configure(config: pytest.Config) -> None:
    for extra, modules in EXTRAS.items():
        config.addinivalue_line(
            "markers",
            f"{extra}: needs mlpipe[{extra}] ({', '.join(modules.values())}): skipped where "
            "it is not installed, a failure under CI",
        )


# The files that take 20 s or more of a worker, longest first. `make test` runs
# `--dist loadfile --no-loadscope-reorder`, which hands files to workers in collection
# order: these go first (longest-processing-time first), the many short files after
# them fill the gaps, and no long file starts late and runs alone while the other
# workers idle. xdist's default order (most tests first) sent the one-test files
# (test_kafka_gateways.py, test_prod_loop.py) out last: a tail of 70-80 s.
# The order is the per-file sums of two full runs' junit times (2026-12-06, `-n 3` on
# the 2-core box: `pytest -n 3 --dist loadfile --junitxml=run.xml`).
LONGEST_FIRST = (
    "tests/integration/test_wheel.py",
    "tests/integration/test_kafka_log.py",
    "tests/integration/test_kafka_gateways.py",
    "tests/integration/test_prod_registry.py",
    "tests/integration/test_registry_outage.py",
    "tests/integration/test_task_types.py",
    "tests/integration/test_register_concurrency.py",
    "tests/integration/test_monitoring_battery.py",
    "tests/e2e/test_drain.py",
    "tests/e2e/test_fuzz.py",
    "tests/integration/test_monitoring_drift.py",
    "tests/e2e/test_serving.py",
    "tests/integration/test_register_pickle.py",
    "tests/e2e/test_demo_loop.py",
    "tests/integration/test_nn.py",
    "tests/e2e/test_overload.py",
    "tests/integration/test_prod_loop.py",
    "tests/e2e/test_hardening_edge.py",
    "tests/integration/test_monitoring_verdict_page.py",
    "tests/integration/test_rollout_signals.py",
    "tests/integration/test_monitoring_tasks.py",
    "tests/integration/test_prod_gateways.py",
    "tests/e2e/test_auth_limits.py",
    "tests/integration/test_warehouse_sync.py",
    "tests/integration/test_kafka_sasl.py",
    "tests/e2e/test_unloadable_model.py",
    "tests/e2e/test_task_serving.py",
    "tests/integration/test_string_inputs.py",
    "tests/integration/test_formats.py",
    "tests/integration/test_warehouse_tasks.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The :data:`LONGEST_FIRST` files' tests first, in that order; the rest as collected
    (a stable sort: a module's tests stay together and in their order)."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


@pytest.hookimpl(tryfirst=True)  # before any fixture: a module's server is not started
def pytest_runtest_setup(item: pytest.Item) -> None:
    for extra in EXTRAS:
        missing = missing_modules(extra) if item.get_closest_marker(extra) else []
        if missing:
            reason = f"needs mlpipe[{extra}]: {', '.join(missing)} not installed"
            if os.environ.get("CI"):
                pytest.fail(f"CI must run this test, but it {reason}", pytrace=False)
            pytest.skip(reason)


@pytest.fixture(scope="module")
def torch_imported(request: pytest.FixtureRequest) -> None:
    """``torch`` in the test module's globals, imported when its first test runs.

    A module-level import ran at collection, in every xdist worker, whichever
    worker then ran the module: ~2.7 s of CPU each. The module is marked ``nn``, so
    where torch is missing its tests skip (or fail under CI) before this runs.
    """
    request.module.torch = importlib.import_module("torch")


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory in no project (resolved), with no MLPIPE_* variable set."""
    for key in [k for k in os.environ if k.startswith("MLPIPE_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path.resolve()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project home; MLPIPE_* variables point every store into it."""
    for key in list(os.environ):
        if key.startswith("MLPIPE_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("MLPIPE_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def train_toy_model(dest: Path, seed: int = 0, n_estimators: int = 20) -> tuple[Path, Path]:
    """A small LightGBM classifier (joblib) and its training set (parquet) under ``dest``."""
    import joblib
    import numpy as np
    import pandas as pd
    from lightgbm import LGBMClassifier

    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"amount": rng.gamma(2.0, 30.0, 600), "txn_count_7d": rng.poisson(5, 600)})
    noise = rng.normal(0, 1, 600)
    frame["label"] = ((frame["amount"] / 60 + noise) > 1.5).astype(int)
    model = LGBMClassifier(n_estimators=n_estimators, verbose=-1, random_state=seed)
    model.fit(frame[["amount", "txn_count_7d"]], frame["label"])
    dest.mkdir(parents=True, exist_ok=True)
    model_path, data_path = dest / f"model-{seed}.joblib", dest / f"train-{seed}.parquet"
    joblib.dump(model, model_path)
    frame.to_parquet(data_path, index=False)
    return model_path, data_path


@pytest.fixture(scope="session")
def registry_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose registry holds ``fraud`` versions 1 and 2 (no deployments)."""
    from mlpipe import registry
    from mlpipe.config import Settings

    root = tmp_path_factory.mktemp("template")
    settings = Settings(home=root)
    for seed in (1, 2):
        model_path, data_path = train_toy_model(root / "inputs", seed=seed)
        registry.register(
            settings, "fraud", dataset=data_path, model_path=model_path, metrics={"auc": 0.9}
        )
    return root


@pytest.fixture
def registered_home(home: Path, registry_template: Path) -> Path:
    """``home`` with a copy of the template registry: fraud v1 and v2, nothing deployed."""
    shutil.copytree(registry_template / ".mlpipe", home / ".mlpipe")
    shutil.copytree(registry_template / "inputs", home / "inputs")
    return home


@pytest.fixture
def settings(home: Path):  # type: ignore[no-untyped-def]
    from mlpipe.config import load_settings

    return load_settings()


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    """Run the real ``mlpipe`` console script; returns the CompletedProcess."""
    return subprocess.run(
        [MLPIPE, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """Run ``mlpipe ARGS`` in this process: (exit code, stdout, stderr)."""
    from mlpipe_cli.main import run
    from mlpipe_cli.state import state

    monkeypatch.setattr("sys.argv", ["mlpipe", *args])
    monkeypatch.setattr(state, "debug", False)
    monkeypatch.setattr(state, "profile", None)
    with pytest.raises(SystemExit) as exit_:
        run()
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


@pytest.fixture
def cli() -> Iterator:  # type: ignore[type-arg]
    yield run_cli


@pytest.fixture
def cli_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``cli`` without a process: ``mlpipe ARGS`` through the console script's entry point
    here, its exit code and output as a CompletedProcess. Each real ``mlpipe`` starts an
    interpreter and imports what the command needs again (seconds of CPU for the monitors)."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        code, out, err = run_in_process(monkeypatch, capsys, *args)
        return subprocess.CompletedProcess(["mlpipe", *args], code, out, err)

    return run
