"""The wheel as a user gets it (issue 21, item 1): built from this tree, installed in a
fresh virtual environment, and run through the loop in an empty directory.

The new environment borrows this one's dependencies through a ``.pth`` line (a plain
path, so this environment's editable ``mlpipe`` finder is not loaded), and the wheel is
installed with ``--no-deps``: nothing is downloaded, and ``mlpipe`` itself, its scoring
service and its feature-repository template can only come from the wheel.

The loop's second server (the Bento) logs to a real Kafka broker (``[predlog] sink =
"kafka"`` in the project's ``mlpipe.toml``), and the installed ``mlpipe warehouse sync``
consumes the topic: the log's production path, from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.kafka_broker import Broker, kafka_broker

pytestmark = pytest.mark.integration

SOURCES = ["pyproject.toml", "README.md", "platform", "cli", "bentos", "feature_repo"]


def _build_wheel(root: Path) -> Path:
    """``pip wheel`` of a copy of the sources (links kept), so no build output lands here."""
    src = root / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "data", "*.egg-info")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(REPO / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(root / "dist"), str(src)],
        check=True,
        timeout=300,
    )
    (wheel,) = (root / "dist").glob("mlpipe-*.whl")
    return wheel


def _venv_with(wheel: Path, venv: Path) -> Path:
    """A fresh venv that sees this environment's packages and has ``mlpipe`` from ``wheel``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    return venv / "bin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    root = tmp_path_factory.mktemp("wheel")
    bin_dir = _venv_with(_build_wheel(root), root / "venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLPIPE_", "PYTHON"))}
    yield SimpleNamespace(bin=bin_dir, env=env, root=root, wheel=next(root.glob("dist/*.whl")))


def _run(installed: SimpleNamespace, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(installed.bin / "mlpipe"), *args],
        cwd=cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_wheel_carries_the_package_and_its_files(installed: SimpleNamespace) -> None:
    code = (
        "import mlpipe; from mlpipe.serving import service_dir;"
        "from importlib.resources import files;"
        "print(mlpipe.__file__); print(service_dir());"
        "print(sorted(p.name for p in files('mlpipe').joinpath('_bundled', 'feature_repo')"
        ".iterdir() if p.is_file()))"
    )
    out = subprocess.run(
        [installed.bin / "python", "-c", code],
        cwd=installed.root,
        env=installed.env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    venv = str(installed.root / "venv")
    assert out[0].startswith(venv) and out[1].startswith(venv), out
    for name in ("service.py", "bentofile.yaml", "Dockerfile.template"):
        assert (Path(out[1]) / name).is_file(), name
    assert out[2] == "['feature_store.prod.yaml', 'feature_store.yaml', 'fraud.py']"


def _train(project: Path) -> None:
    import joblib
    import numpy as np
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"amount": rng.gamma(2, 50, 600), "n_items": rng.integers(1, 9, 600)})
    frame["label"] = ((frame["amount"] - 100) / 40 + rng.normal(0, 1, 600) > 0).astype(int)
    joblib.dump(
        LogisticRegression().fit(frame[["amount", "n_items"]], frame["label"]),
        project / "model.joblib",
    )
    frame.to_parquet(project / "train.parquet", index=False)


READY_IN_A_ROW = 20  # with two workers, a not-ready one is missed 20 times in 2**-19 of starts
# what the service logs when a worker of another server than mlpipe's serves it
UNGUARDED = "this worker was not started by `mlpipe serve`"


def _serve(
    installed: SimpleNamespace, project: Path, port: int, argv: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (default: the installed ``mlpipe serve``) and wait for /readyz.

    A Bento serves with several workers, each ready on its own, and every connection
    goes to one of them: ready is READY_IN_A_ROW answers of 200 in a row.
    """
    argv = argv or [str(installed.bin / "mlpipe"), "serve", "--port", str(port), "--workers", "1"]
    log = (project / "serve.log").open("wb")
    server = subprocess.Popen(
        argv,
        cwd=project,
        env=installed.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    in_a_row = 0
    while time.monotonic() < deadline and server.poll() is None:
        try:
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            ready = False
        in_a_row = in_a_row + 1 if ready else 0
        if in_a_row >= READY_IN_A_ROW:
            return server
        time.sleep(0.05 if ready else 0.5)
    os.killpg(server.pid, signal.SIGKILL)
    raise AssertionError((project / "serve.log").read_text(errors="replace")[-3000:])


def _predict_twice(
    installed: SimpleNamespace, project: Path, argv: list[str] | None
) -> list[httpx.Response]:
    """Serve (``mlpipe serve``, or ``argv``), predict twice, then stop with SIGTERM."""
    from mlpipe.serving import free_port

    port = free_port()
    if argv is not None:
        argv = [*argv, "--port", str(port)]
    server = _serve(installed, project, port, argv)
    body = {"model": "fraud", "entity": {"id": 7}, "features": {"amount": 180.0, "n_items": 3}}
    try:
        return [httpx.post(f"http://127.0.0.1:{port}/predict", json=body, timeout=30) for _ in "12"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # drains, and closes the log segment
        server.wait(timeout=60)


def _bento(installed: SimpleNamespace, project: Path) -> list[str]:
    """``bentoml build`` of the packaged scoring service with the wheel beside it (offline);
    the command that serves the Bento, with its environment (``env`` VAR=... first: the
    module's other tests run in other projects, so ``installed.env`` is left as it was)."""
    from mlpipe.serving import service_dir  # the source tree's: the same files as the wheel's

    build = project / "bento"
    shutil.copytree(service_dir(), build, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(installed.wheel, build)
    bento_env = {
        "BENTOML_HOME": str(project / "bentoml-home"),
        "BENTOML_DO_NOT_TRACK": "true",
        "MLPIPE_HOME": str(project),  # a Bento serves the project MLPIPE_HOME names
    }
    bentoml = [str(installed.bin / "python"), "-m", "bentoml"]
    built = subprocess.run(  # BentoML reads no file outside the working directory
        [*bentoml, "build", "."],
        cwd=build,
        env={**installed.env, **bento_env},
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    store = project / "bentoml-home" / "bentos" / "mlpipe-scoring"
    # every entry but the `latest` pointer (a generated tag may itself start with "l")
    (bento,) = [p for p in store.iterdir() if p.name != "latest"]
    assert (bento / "src" / "service.py").is_file()
    assert (bento / "env" / "python" / "wheels" / installed.wheel.name).is_file()
    requirements = (bento / "env" / "python" / "requirements.txt").read_text()
    assert "onnxruntime==" in requirements and "xgboost-cpu==" in requirements  # formats
    # the image's default command: mlpipe's server, after BentoML's entrypoint
    dockerfile = (bento / "env" / "docker" / "Dockerfile").read_text().splitlines()
    commands = [line for line in dockerfile if line.startswith(("ENTRYPOINT", "CMD"))]
    assert commands[-2:] == [
        'ENTRYPOINT [ "/home/bentoml/bento/env/docker/entrypoint.sh" ]',
        'CMD ["mlpipe", "serve", "--host", "0.0.0.0", "--port", "3000"]',
    ], commands
    assignments = [f"{k}={v}" for k, v in bento_env.items()]
    return ["env", *assignments, *bentoml, "serve", f"mlpipe-scoring:{bento.name}"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Future[Broker]]:
    """A Kafka broker starting in the background (seconds of a JVM) while the loop runs:
    ``result()`` where it is needed (which skips, or fails under CI, without Java)."""
    with ExitStack() as started, ThreadPoolExecutor(1) as pool:
        yield pool.submit(started.enter_context, kafka_broker(tmp_path / "kafka"))


def _log_to_kafka(project: Path, broker: Broker) -> None:
    """The project's prediction log on a fresh topic of ``broker``."""
    topic = "wheel-predictions"
    broker.create_topic(topic, partitions=1)
    with (project / "mlpipe.toml").open("a") as toml:
        toml.write(
            f'\n[predlog]\nsink = "kafka"\nkafka_bootstrap = "{broker.bootstrap}"\n'
            f'kafka_topic = "{topic}"\n'
        )


def _count(installed: SimpleNamespace, cwd: Path) -> int:
    query = _run(
        installed, cwd, "warehouse", "query", "SELECT count(*) AS n FROM predictions", "--json"
    )
    assert query.returncode == 0, query.stderr
    assert "Warning" not in query.stderr, query.stderr
    return int(json.loads(query.stdout)["rows"][0]["n"])


@pytest.mark.kafka
def test_init_register_deploy_serve_predict_sync_in_an_empty_directory(
    installed: SimpleNamespace, broker: Future[Broker]
) -> None:
    project = installed.root / "empty"
    project.mkdir()
    assert _run(installed, project, "status", "fraud").returncode == 2  # not a project yet
    init = _run(installed, project, "init", "--no-feature-store")
    assert init.returncode == 0, init.stderr
    _train(project)
    sub = project / "work"
    sub.mkdir()  # every later command runs from a subdirectory: the project is found above
    register = _run(
        installed, sub, "register", "fraud", "--model", "../model.joblib", "--dataset",
        "../train.parquet",
    )  # fmt: skip
    assert register.returncode == 0, register.stderr
    assert _run(installed, sub, "deploy", "fraud", "--version", "1").returncode == 0
    answers = _predict_twice(installed, project, None)
    assert [a.status_code for a in answers] == [200, 200], answers[0].text
    assert UNGUARDED not in (project / "serve.log").read_text(errors="replace")
    assert answers[0].json()["version"] == "1" and 0 <= answers[0].json()["score"] <= 1
    sync = _run(installed, sub, "warehouse", "sync", "--json")
    assert sync.returncode == 0, sync.stderr
    assert _count(installed, sub) == 2
    for out in (init, register, sync):
        assert "Warning" not in out.stderr, out.stderr
    assert sorted(p.name for p in sub.iterdir()) == []
    _log_to_kafka(project, broker.result())
    from_bento = _predict_twice(installed, project, _bento(installed, project))
    assert [a.status_code for a in from_bento] == [200, 200], from_bento[0].text
    # BentoML's worker bounds no request head: its server log says so, at each worker's start
    assert UNGUARDED in (project / "serve.log").read_text(errors="replace")
    assert from_bento[0].json()["score"] == answers[0].json()["score"]
    from_kafka = _run(installed, sub, "warehouse", "sync", "--json")
    assert from_kafka.returncode == 0, from_kafka.stderr
    assert "Warning" not in from_kafka.stderr, from_kafka.stderr
    loaded = json.loads(from_kafka.stdout)
    assert (loaded["kafka_records"], loaded["rows_loaded"]) == (2, 2), loaded
    assert sum(p["lag"] for p in loaded["kafka_lag"]) == 0
    assert _count(installed, sub) == 4


def test_demo_runs_from_the_wheel_in_an_empty_directory(installed: SimpleNamespace) -> None:
    """The demo's Feast repository and scoring service come from the wheel: no checkout."""
    anywhere = installed.root / "anywhere"
    anywhere.mkdir()
    env = {k: v for k, v in installed.env.items() if not k.startswith("MLPIPE_")}
    demo = subprocess.run(
        [str(installed.bin / "mlpipe"), "demo", "--no-serve", "--customers", "200"],
        cwd=anywhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "▶ feature store ready" in demo.stderr and "▶ roll back" in demo.stderr
    assert "Warning" not in demo.stderr
    assert sorted(p.name for p in anywhere.iterdir()) == [".mlpipe-demo"]


PLAN_INPUTS = ["balance", "income", "region"]
PLAN_CLASSES = ["high", "low", "mid"]


def _train_plan(project: Path) -> Any:
    """A Pipeline built for gaps: SimpleImputer + OneHotEncoder(handle_unknown="ignore")
    over numeric and string columns with NaN, multiclass with named classes."""
    import joblib
    import numpy as np
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(28)
    n = 300
    frame = pd.DataFrame(
        {
            "balance": rng.gamma(2.0, 400.0, n),
            "income": rng.normal(40_000, 9_000, n),
            "region": rng.choice(["north", "south", "east"], n).astype(object),
        }
    )
    frame["risk"] = np.asarray(PLAN_CLASSES)[(frame["balance"] // 600).clip(0, 2).astype(int)]
    for column in PLAN_INPUTS:
        frame.loc[rng.random(n) < 0.15, column] = np.nan
    frame.to_csv(project / "plan.csv", index=False)
    frame = pd.read_csv(project / "plan.csv")  # as the user's own code reads it
    prep = ColumnTransformer(
        [
            (
                "numbers",
                make_pipeline(SimpleImputer(strategy="median"), StandardScaler()),
                ["balance", "income"],
            ),
            (
                "region",
                make_pipeline(
                    SimpleImputer(strategy="most_frequent"), OneHotEncoder(handle_unknown="ignore")
                ),
                ["region"],
            ),
        ]
    )
    model = Pipeline([("prep", prep), ("lr", LogisticRegression(max_iter=1000))])
    model.fit(frame[PLAN_INPUTS], frame["risk"])
    joblib.dump(model, project / "plan.joblib")
    return model


# JSON null, an omitted key, NaN (Python's json writes the token), and an unseen string.
PLAN_ROWS: list[dict[str, Any]] = [
    {"balance": None, "income": 30_000.0, "region": "north"},
    {"income": 52_000.0, "region": None},
    {"balance": float("nan"), "income": float("nan"), "region": "south"},
    {"balance": 900.0, "income": 41_000.0, "region": "west"},
]


def test_a_multiclass_pipeline_with_gaps_scores_from_the_wheel_like_its_own_predict_proba(
    installed: SimpleNamespace,
) -> None:
    import numpy as np
    import pandas as pd

    from mlpipe.serving import free_port

    project = installed.root / "gaps"
    project.mkdir()
    init = _run(installed, project, "init", "--no-feature-store")
    assert init.returncode == 0, init.stderr
    model = _train_plan(project)
    register = _run(
        installed, project, "register", "plan", "--model", "plan.joblib", "--dataset",
        "plan.csv", "--label", "risk", "--json",
    )  # fmt: skip
    assert register.returncode == 0, register.stderr
    assert "Warning" not in register.stderr, register.stderr
    assert _run(installed, project, "deploy", "plan", "--version", "1").returncode == 0
    port = free_port()
    server = _serve(installed, project, port)
    try:
        answers = [
            httpx.post(
                f"http://127.0.0.1:{port}/predict",
                content=json.dumps({"model": "plan", "features": row}).encode(),
                headers={"content-type": "application/json"},
                timeout=30,
            )
            for row in PLAN_ROWS
        ]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    assert [a.status_code for a in answers] == [200] * len(PLAN_ROWS), answers[0].text
    probabilities = [a.json()["probabilities"] for a in answers]
    assert [list(p) for p in probabilities] == [PLAN_CLASSES] * len(PLAN_ROWS)
    frame = pd.DataFrame([{k: row.get(k, np.nan) for k in PLAN_INPUTS} for row in PLAN_ROWS])
    frame["region"] = frame["region"].astype(object).where(frame["region"].notna(), np.nan)
    own = model.predict_proba(frame[PLAN_INPUTS])
    got = [[p[c] for c in PLAN_CLASSES] for p in probabilities]
    assert np.allclose(got, own, rtol=0, atol=1e-9), (got, own.tolist())
    assert set(answers[1].json()["features_missing"]) == {"balance", "region"}
