"""A credit table with string columns, served with raw strings (issue 21 item 3).

A scikit-learn Pipeline whose ColumnTransformer selects columns BY NAME
(OneHotEncoder on the Yes/No ``student`` column, StandardScaler on the numbers)
is registered from the dataset (its typed inputs recorded), deployed, and
served by a real server over ``/predict`` and the Open Inference Protocol
(BYTES), scored on a DataFrame like the model's own ``predict_proba``. A wrong
type and an unknown category are 422s naming the field; ``region``'s encoder
ignores unknown categories, so an unseen region is scored. Registration
refuses, in one line, a ``--features`` column the dataset lacks and a model
that fails on the dataset as serving would score it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from tests.e2e.conftest import Server, predlog_rows

INPUTS = ["student", "balance", "income", "region"]


def _credit(home: Path) -> tuple[Path, pd.DataFrame]:
    """The table: the model's inputs, a column it does not take (``branch``), the label."""
    rng = np.random.default_rng(7)
    n = 600
    frame = pd.DataFrame(
        {
            "student": rng.choice(["Yes", "No"], n),
            "balance": rng.gamma(2.0, 400.0, n),
            "income": rng.normal(40_000, 9_000, n),
            "region": rng.choice(["north", "south", "east"], n),
            "branch": rng.choice(["a", "b"], n),
        }
    )
    logit = (frame["balance"] - 800) / 300 + (frame["student"] == "Yes") * 0.8
    frame["default"] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    data = home / "credit.csv"
    frame.to_csv(data, index=False)
    return data, frame


def _pipeline(by_name: bool) -> Any:
    """The unfitted pipeline; its ColumnTransformer selects columns by name or by position."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    def columns(*names: str) -> list[Any]:
        return list(names) if by_name else [INPUTS.index(n) for n in names]

    prep = ColumnTransformer(
        [
            ("student", OneHotEncoder(), columns("student")),
            ("region", OneHotEncoder(handle_unknown="ignore"), columns("region")),
            ("numbers", StandardScaler(), columns("balance", "income")),
        ]
    )
    return Pipeline([("prep", prep), ("lr", LogisticRegression(max_iter=500))])


@pytest.fixture(scope="module")
def credit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """``credit`` registered with ``--features`` (its model names no inputs) and served."""
    import joblib

    from mlpipe import deployments, registry
    from mlpipe.config import load_settings

    home = tmp_path_factory.mktemp("credit-home")
    settings = load_settings(home=home)
    data, frame = _credit(home)
    model = _by_name(frame)
    joblib.dump(model, home / "credit.joblib")
    info = registry.register(
        settings,
        "credit",
        dataset=data,
        model_path=home / "credit.joblib",
        label="default",
        features=INPUTS,
    )
    deployments.deploy(settings, "credit", info.version)
    with Server(home, settings).running() as server:
        yield SimpleNamespace(settings=settings, server=server, model=model, info=info)


def _by_name(frame: pd.DataFrame) -> Any:
    """The pipeline fit on the DataFrame, its ColumnTransformer selecting by column name."""
    return _pipeline(by_name=True).fit(frame[INPUTS], frame["default"])


def _expected(model: Any, rows: list[dict[str, Any]]) -> list[float]:
    return model.predict_proba(pd.DataFrame(rows)[INPUTS])[:, 1].tolist()  # type: ignore[no-any-return]


def test_the_version_records_its_typed_inputs(credit: Any) -> None:
    schema = credit.info.input_schema
    assert credit.info.features == INPUTS
    assert schema.frame
    assert [(c.name, c.kind, c.categories, c.open) for c in schema.columns] == [
        ("student", "string", ("No", "Yes"), False),
        ("balance", "number", None, False),
        ("income", "number", None, False),
        ("region", "string", ("east", "north", "south"), True),
    ]


def test_raw_strings_over_predict_score_like_the_model(credit: Any) -> None:
    rows = [
        {"student": "Yes", "balance": 1500.0, "income": 30_000.0, "region": "north"},
        {"student": "No", "balance": 200.0, "income": 52_000.0, "region": "west"},  # unseen: ok
    ]
    answers = []
    for i, features in enumerate(rows):
        body = {"model": "credit", "entity": {}, "features": features, "request_id": f"s{i}"}
        r = credit.server.post(body)
        assert r.status_code == 200, r.text
        answers.append(r.json()["score"])
    assert answers == pytest.approx(_expected(credit.model, rows), abs=1e-9)
    logged = {row.request_id: row for row in predlog_rows(credit.settings)}
    assert logged["s0"].features["student"] == "Yes"


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"student": 1}, "features.student: expected a string (allowed: No, Yes), got 1.0"),
        ({"student": "Maybe"}, "features.student: unknown category 'Maybe' (allowed: No, Yes)"),
        ({"balance": "lots"}, "features.balance: expected a number, got a string 'lots'"),
    ],
)
def test_a_value_the_model_cannot_take_is_422_naming_the_field(
    credit: Any, features: dict[str, Any], message: str
) -> None:
    good = {"student": "No", "balance": 1.0, "income": 2.0, "region": "east"}
    body = {"model": "credit", "entity": {}, "features": {**good, **features}}
    r = credit.server.post(body)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == message
    assert r.json()["field"] == message.split(":")[0]


def _infer(url: str, columns: dict[str, tuple[str, list[Any]]], binary: bool) -> httpx.Response:
    inputs, blobs = [], b""
    for name, (dtype, data) in columns.items():
        tensor: dict[str, Any] = {"name": name, "datatype": dtype, "shape": [len(data)]}
        if binary and dtype == "BYTES":
            blob = b"".join(struct.pack("<I", len(v.encode())) + v.encode() for v in data)
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs += blob
        else:
            tensor["data"] = data
        inputs.append(tensor)
    head = json.dumps({"inputs": inputs}).encode()
    headers = {"inference-header-content-length": str(len(head))} if blobs else {}
    return httpx.post(f"{url}/v2/models/credit/infer", content=head + blobs, headers=headers)


@pytest.mark.parametrize("binary", [False, True])
def test_oip_takes_bytes_for_strings_and_states_each_input_type(credit: Any, binary: bool) -> None:
    url = credit.server.url
    meta = httpx.get(f"{url}/v2/models/credit").json()
    assert [(i["name"], i["datatype"]) for i in meta["inputs"]] == [
        ("student", "BYTES"),
        ("balance", "FP64"),
        ("income", "FP64"),
        ("region", "BYTES"),
    ]
    columns = {
        "student": ("BYTES", ["Yes", "No"]),
        "balance": ("FP64", [900.0, 100.0]),
        "income": ("FP64", [20_000.0, 60_000.0]),
        "region": ("BYTES", ["south", "east"]),
    }
    r = _infer(url, columns, binary)
    assert r.status_code == 200, r.text
    scores = next(o for o in r.json()["outputs"] if o["name"] == "score")["data"]
    rows = [{k: v[1][i] for k, v in columns.items()} for i in range(2)]
    assert scores == pytest.approx(_expected(credit.model, rows), abs=1e-9)
    wrong = _infer(url, {**columns, "student": ("FP64", [1.0, 0.0])}, binary)
    assert wrong.status_code == 422
    assert "inputs.student" in wrong.json()["error"]


def test_a_missing_features_column_or_a_failing_model_is_one_line_and_registers_nothing(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    import joblib

    from mlpipe import registry
    from mlpipe.errors import InvalidInput

    data, frame = _credit(home)
    joblib.dump(_by_name(frame), home / "named.joblib")
    encoded = frame.assign(student=(frame["student"] == "Yes").astype(float))  # 0/1, not Yes/No
    positional = _pipeline(by_name=False).fit(encoded[INPUTS].to_numpy(), frame["default"])
    joblib.dump(positional, home / "positional.joblib")
    base = ["register", "credit", "--dataset", str(data), "--label", "default"]

    r = cli_in_process(
        *base, "--model", str(home / "named.joblib"), "--features", "student,balance,income,age"
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: dataset lacks column(s) the model needs (named with --features): age (its "
        "columns: student, balance, income, region, branch, default)"
    ]
    with pytest.raises(InvalidInput) as raised:  # the same check, in process (no second CLI)
        registry.register(
            settings,
            "credit",
            dataset=data,
            model_path=home / "positional.joblib",
            label="default",
            features=INPUTS,
        )
    assert str(raised.value).startswith(
        "the sklearn model fails on the dataset's first rows, given the 4 columns "
        "student, balance, income, region: "
    )
    assert registry.list_models(settings) == []


def test_monitor_drift_compares_string_inputs_as_categories(
    credit: Any, cli_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served raw strings reach the drift report as categories: a window of students only
    (the reference is about half) drifts on ``student``; ``region`` as sent does not."""
    rng = np.random.default_rng(3)
    for i in range(80):
        features = {
            "student": "Yes",
            "balance": float(rng.gamma(2.0, 400.0)),
            "income": float(rng.normal(40_000, 9_000)),
            "region": str(rng.choice(["north", "south", "east"])),
        }
        body = {"model": "credit", "entity": {}, "features": features, "request_id": f"d{i}"}
        assert credit.server.post(body).status_code == 200
    monkeypatch.setenv("MLPIPE_HOME", str(credit.settings.home))
    assert cli_in_process("warehouse", "sync").returncode == 0
    result = cli_in_process("monitor", "drift", "credit", "--json")
    assert result.stdout.startswith("{"), result.stderr
    report = json.loads(result.stdout)
    (arm,) = [a for a in report["arms"] if a["arm"] == "champion"]
    columns = {c["column"]: c for c in arm["columns"]}
    assert columns["student"]["method"] == "jensenshannon"
    assert columns["student"]["drifted"] is True, json.dumps(arm)
    assert columns["region"]["method"] == "jensenshannon"
    assert columns["region"]["drifted"] is False, columns["region"]
    assert result.returncode == 1, result.stdout + result.stderr
