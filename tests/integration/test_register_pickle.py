"""Which pickles ``mlpipe register`` unpickles: real ``mlpipe`` processes, real MLflow.

A local file named with ``--model`` is the user's opt-in for that file; a pickle in
an MLflow model directory or downloaded from a run needs ``--trust pickle``; and
``MLFLOW_ALLOW_PICKLE_DESERIALIZATION=false`` refuses every pickle. The planted
pickle's ``__reduce__`` writes a marker file: a refusal must leave it unwritten.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe import registry
from mlpipe.config import load_settings
from tests.conftest import run_cli, train_toy_model
from tests.planted_pickle import plant

pytestmark = pytest.mark.integration
GATE = "MLFLOW_ALLOW_PICKLE_DESERIALIZATION"


def _refused(result, marker: Path, message: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 2 and result.stdout == "", result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert message in line, line
    assert not marker.exists(), "the pickle was unpickled"
    assert registry.list_models(load_settings()) == []


def test_a_named_file_is_refused_when_mlflows_gate_is_false(home: Path) -> None:
    marker = home / "ran.txt"
    _, data = train_toy_model(home / "in")
    planted = plant(home / "model.joblib", marker)
    for value in ("false", "False", "0"):
        result = run_cli(
            "register", "fraud", "--model", str(planted), "--dataset", str(data),
            cwd=home, env={GATE: value},
        )  # fmt: skip
        _refused(result, marker, f"{GATE}=false forbids unpickling {planted}: register the model")
    opted_in = run_cli(
        "register", "fraud", "--model", str(planted), "--dataset", str(data), cwd=home
    )
    assert opted_in.returncode == 2 and marker.exists()  # named file: read (then: not a model)


def test_an_mlflow_directory_needs_trust_pickle(home: Path) -> None:
    marker = home / "ran.txt"
    _, data = train_toy_model(home / "in")
    plant(home / "mlflow-model" / "model.pkl", marker)
    argv = ["register", "fraud", "--model", str(home / "mlflow-model"), "--dataset", str(data)]
    result = run_cli(*argv, cwd=home)
    where = home / "mlflow-model"
    _refused(result, marker, f"{where} holds a pickle (model.pkl), which runs code when read")
    assert "pass --trust pickle if you trust whoever made it" in result.stderr
    _refused(run_cli(*argv, "--trust", "pickle", cwd=home, env={GATE: "false"}), marker, GATE)
    trusted = run_cli(*argv, "--trust", "pickle", cwd=home)
    assert trusted.returncode == 2 and marker.exists()  # trusted: read (then: not a model)


def test_a_run_artifact_needs_trust_pickle(home: Path) -> None:
    import mlflow

    from mlpipe.registry._client import client

    marker = home / "ran.txt"
    _, data = train_toy_model(home / "in")
    settings = load_settings()
    client(settings)
    mlflow.set_experiment(settings.experiment)
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(plant(home / "art" / "model.pkl", marker)), artifact_path="model")
    result = run_cli(
        "register", "fraud", "--run", run.info.run_id, "--dataset", str(data), cwd=home
    )
    _refused(result, marker, f"run {run.info.run_id} holds a pickle (model.pkl), which runs code")


def test_a_pickle_whose_module_is_missing_names_the_module(home: Path) -> None:
    _, data = train_toy_model(home / "in")
    model = home / "model.joblib"
    model.write_bytes(b"cmypkg_not_installed\nModel\n)\x81.")  # a mypkg_not_installed.Model()
    result = run_cli("register", "fraud", "--model", str(model), "--dataset", str(data), cwd=home)
    _refused(
        result,
        home / "never.txt",
        "model.joblib needs the module 'mypkg_not_installed' to load (ModuleNotFoundError): "
        "install it in this environment",
    )
