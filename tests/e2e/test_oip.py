"""The Open Inference Protocol (v2 REST) against a real server, with Triton's own client."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import predlog_rows

pytestmark = pytest.mark.e2e

ROWS = [(80.0, 3), (250.5, 7), (12.0, 1)]


def _predict_scores(stack: Any) -> list[float]:
    scores = []
    for amount, n_items in ROWS:
        body = {"model": "fraud", "entity": {}, "features": {"amount": amount, "n_items": n_items}}
        r = stack.server.post(body)
        assert r.status_code == 200, r.text
        scores.append(r.json()["score"])
    return scores


def test_tritonclient_gets_the_predict_score(stack: Any) -> None:
    import tritonclient.http as triton

    client = triton.InferenceServerClient(url=stack.server.url.removeprefix("http://"))
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("fraud")
        meta = client.get_model_metadata("fraud")
        assert meta["versions"] == [stack.versions[1]]
        assert [i["name"] for i in meta["inputs"]] == ["amount", "n_items"]

        inputs = []
        for j, name in enumerate(("amount", "n_items")):
            tensor = triton.InferInput(name, [len(ROWS)], "FP64")
            tensor.set_data_from_numpy(np.array([row[j] for row in ROWS], dtype=np.float64))
            inputs.append(tensor)
        result = client.infer("fraud", inputs, request_id="oip-1")  # binary outputs, by default
        scores = result.as_numpy("score")
        labels = result.as_numpy("label")
        response = result.get_response()
    finally:
        client.close()

    assert scores.tolist() == pytest.approx(_predict_scores(stack), abs=1e-12)
    assert labels.dtype == np.int64 and set(labels.tolist()) <= {0, 1}
    assert response["model_version"] == stack.versions[1]
    logged = {r.request_id for r in predlog_rows(stack.settings)}
    assert {"oip-1-0", "oip-1-1", "oip-1-2"} <= logged  # the /predict log, row by row


def test_json_tensors_and_errors(stack: Any) -> None:
    url = f"{stack.server.url}/v2/models/fraud/infer"
    matrix = {
        "inputs": [
            {
                "name": "features",
                "datatype": "FP32",
                "shape": [3, 2],
                "data": [list(r) for r in ROWS],
            }
        ],
        "outputs": [{"name": "score"}, {"name": "version"}],
    }
    r = httpx.post(url, json=matrix, timeout=30)
    assert r.status_code == 200, r.text
    out = {o["name"]: o for o in r.json()["outputs"]}
    assert set(out) == {"score", "version"}
    assert out["score"]["data"] == pytest.approx(_predict_scores(stack), abs=1e-5)
    assert out["version"]["data"] == [stack.versions[1]] * 3

    def status(body: Any, path: str = "/v2/models/fraud/infer") -> int:
        return httpx.post(f"{stack.server.url}{path}", json=body, timeout=30).status_code

    one = {"name": "amount", "datatype": "FP64", "shape": [1], "data": [1.0]}
    assert status({"inputs": [one]}) == 422  # n_items missing: the gateway's own answer
    assert status({"inputs": [{**one, "name": "amount_typo"}]}) == 400
    assert status({"inputs": [{**one, "shape": [2]}]}) == 400
    assert status({"inputs": [one], "outputs": [{"name": "nope"}]}) == 400
    assert status({"inputs": [one]}, "/v2/models/nope/infer") == 404
    assert status({"inputs": [one]}, "/v2/models/fraud/versions/1/infer") == 400
    assert httpx.get(f"{stack.server.url}/v2/health/ready").status_code == 200
    assert httpx.get(f"{stack.server.url}/v2/models/nope").status_code == 404
