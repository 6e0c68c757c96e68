"""Issue-23 items 2, 3 (gateway), 5 and the /v2 per-row charge, against a real server.

One server (one worker) on a model over the demo feature repository's
``fraud_v1`` service (entity ``customer_id``, INT64), with one tenant whose bucket barely refills
(``RATE`` tokens/s), so every token a request costs can be counted:

- join keys outside the entity's type (``2**63`` for an INT64 key) get 422
  naming the field, and the feature-store breaker stays closed: a good request
  afterwards gets its real features (before: 200, then the breaker open and
  every tenant served defaults for ``breaker_reset_s``);
- control characters in a request id (``/predict``'s ``request_id``, the
  protocol's ``id``) or an entity string get 400 and are never logged;
- a 100-row infer request on an idle server is answered (before: 503, with
  48 of its rows scored and logged);
- a failed store read is logged with its exception;
- an infer request costs a token per row: one row over the budget gets 429
  with ``Retry-After`` and leaves no prediction-log row.

The tests run in order and share the tenant's budget (``served.spent``).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from mlpipe.serving import free_port
from tests.conftest import REPO
from tests.e2e.conftest import predlog_rows

pytestmark = pytest.mark.e2e

RATE = 0.001  # tokens/s: one more token every ~17 minutes, none during the test
BURST = 400
CONTROL = ["\x00", "\x1f", "\x7f", "\x85"]  # NUL, C0, DEL, C1


def _feast_backed_model(settings: Any) -> list[dict[str, Any]]:
    """Generate and materialize the fraud feature repo; deploy a model on fraud_v1 + amount.

    Returns 100 good /predict bodies (customers the online store holds).
    """
    import joblib
    import numpy as np
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    from mlpipe import demo, deployments, features, registry

    data = demo.generate(settings.feature_repo_path / "data", customers=40, days=5, seed=7)
    features.apply(settings)
    features.materialize(settings)
    inputs = [*features.describe_service(settings, "fraud_v1").features, "amount"]
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.gamma(2.0, 10.0, (400, len(inputs))), columns=inputs)
    frame["label"] = (frame["amount"] + rng.normal(0, 5, 400) > 20).astype(int)
    model = LogisticRegression().fit(frame[inputs], frame["label"])
    joblib.dump(model, settings.home / "model.joblib")
    frame.to_csv(settings.home / "train.csv", index=False)
    info = registry.register(
        settings,
        "fraud",
        dataset=settings.home / "train.csv",
        model_path=settings.home / "model.joblib",
        feature_service="fraud_v1",
    )
    deployments.deploy(settings, "fraud", info.version)
    return demo.fraud_requests(data.transactions, 100, seed=3)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    from mlpipe import security
    from mlpipe.config import load_settings
    from mlpipe.serving import ScoringProcess

    home = tmp_path_factory.mktemp("mlpipe-hostile")
    shutil.copytree(
        REPO / "feature_repo", home / "feature_repo", ignore=shutil.ignore_patterns("data")
    )
    settings = load_settings(home=home)
    good = _feast_backed_model(settings)
    _, key = security.add_tenant(settings, "probe", rate=RATE, burst=BURST)
    server = ScoringProcess(
        settings,
        port=free_port(),
        workers=1,
        log_path=home / "server.log",
        env={
            "MLPIPE_SERVING__MAX_LATENCY_MS": "2000",  # as in conftest: a loaded CI machine
            "MLPIPE_SERVING__FEATURE_CACHE_TTL_S": "0",  # every request reads the store
            "MLPIPE_PREDLOG__FSYNC_INTERVAL_S": "0.1",
        },
    )
    with server:
        yield SimpleNamespace(
            settings=settings, url=server.url, key=key, good=good, spent=0, log=server.log_path
        )


def _post(served: Any, path: str, body: Any) -> httpx.Response:
    """POST with the tenant's key; counts the token the request costs on arrival."""
    served.spent += 1
    auth = {"Authorization": f"Bearer {served.key}"}
    return httpx.post(f"{served.url}{path}", json=body, headers=auth, timeout=60)


def _infer_body(good: list[dict[str, Any]], request_id: str) -> dict[str, Any]:
    n = len(good)
    return {
        "id": request_id,
        "inputs": [
            {
                "name": "customer_id",
                "datatype": "INT64",
                "shape": [n],
                "data": [b["entity"]["customer_id"] for b in good],
            },
            {
                "name": "amount",
                "datatype": "FP64",
                "shape": [n],
                "data": [b["features"]["amount"] for b in good],
            },
        ],
    }


def _logged_ids(served: Any, barrier: str) -> list[str]:
    """Every logged request id, once a good request (a barrier) is answered and logged."""
    r = _post(served, "/predict", {**served.good[0], "request_id": barrier})
    assert r.status_code == 200, r.text
    return [row.request_id for row in predlog_rows(served.settings)]


def test_out_of_range_join_keys_get_422_and_leave_the_breaker_closed(served: Any) -> None:
    bad_keys: list[Any] = [2**63, 2**63, 2**63, -(2**63) - 1, 10**30, "9223372036854775808"]
    for key in bad_keys:
        body = {**served.good[1], "entity": {"customer_id": key}}
        r = _post(served, "/predict", body)
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "entity.customer_id", r.json()
        assert "922337203685477580" in r.json()["error"], r.json()  # names the int64 bound
    big = _infer_body(served.good[:2], "keys")
    big["inputs"][0] = {**big["inputs"][0], "datatype": "UINT64", "data": [2**63, 1]}
    r = _post(served, "/v2/models/fraud/infer", big)
    assert r.status_code == 422 and "entity.customer_id" in r.json()["error"], r.text

    good = _post(served, "/predict", served.good[1])
    assert good.status_code == 200, good.text
    assert good.json()["features_missing"] == []  # real features, not the defaults
    metrics = httpx.get(f"{served.url}/metrics", timeout=30).text
    assert not re.search(r"^mlpipe_feature_store_breaker_open\{.*\} 1\.0$", metrics, re.M)
    assert "feature-store breaker" not in served.log.read_text()


def test_control_characters_in_ids_get_400_and_are_never_logged(served: Any) -> None:
    for char in CONTROL:
        r = _post(served, "/predict", {**served.good[2], "request_id": f"ctl{char}x"})
        assert r.status_code == 400, r.text
        assert r.json()["field"] == "request_id", r.json()
        assert "control character" in r.json()["error"], r.json()
        r = _post(served, "/v2/models/fraud/infer", _infer_body(served.good[:2], f"ctl{char}v2"))
        assert r.status_code == 400, r.text
        assert "id" in r.json()["error"] and "control character" in r.json()["error"], r.json()
        body = {**served.good[2], "entity": {**served.good[2]["entity"], "note": f"a{char}"}}
        r = _post(served, "/predict", body)
        assert r.status_code == 400 and r.json()["field"] == "entity.note", r.text
    assert not [i for i in _logged_ids(served, "after-ctl") if i.startswith("ctl")]


def test_a_100_row_infer_request_is_answered_and_logged_once(served: Any) -> None:
    before = len(predlog_rows(served.settings))
    r = _post(served, "/v2/models/fraud/infer", _infer_body(served.good, "hundred"))
    served.spent += len(served.good) - 1
    assert r.status_code == 200, r.text
    (score,) = [o for o in r.json()["outputs"] if o["name"] == "score"]
    assert score["shape"] == [100]
    logged = _logged_ids(served, "after-hundred")[before:]
    assert sorted(i for i in logged if i.startswith("hundred-")) == sorted(
        f"hundred-{i}" for i in range(100)
    )


def test_a_store_failure_is_logged_with_its_exception(served: Any) -> None:
    (served.settings.feature_repo_path / "data" / "online_store.db").unlink()
    r = _post(served, "/predict", served.good[4])
    assert r.status_code == 200 and r.json()["features_missing"], r.text  # defaults, flagged
    log = served.log.read_text(errors="replace")
    assert "feature store read for fraud_v1 failed (1 entities); serving defaults" in log
    assert "FileNotFoundError" in log  # with the exception and its traceback


def test_infer_rows_cost_a_token_each_and_a_refused_request_logs_nothing(served: Any) -> None:
    left = BURST - served.spent
    assert left > 10, "the tests above spent the budget this test needs"
    over = (served.good * 5)[: left + 1]
    r = _post(served, "/v2/models/fraud/infer", _infer_body(over, "over"))
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1
    assert f"{len(over)} rows" in r.json()["error"], r.json()
    assert not [i for i in _logged_ids(served, "after-over") if i.startswith("over")]

    left = BURST - served.spent  # the refused request spent the token it arrived with
    fits = (served.good * 5)[:left]
    r = _post(served, "/v2/models/fraud/infer", _infer_body(fits, "fits"))
    assert r.status_code == 200, r.text
    served.spent += len(fits) - 1
    r = _post(served, "/predict", served.good[0])
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1, r.text
