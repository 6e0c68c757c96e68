"""``serving.tracing``: BentoML's OpenTelemetry middleware traces requests only when asked.

Off (the default; ``tests/e2e/test_serving.py`` checks it on the shared
server) the middleware passes every request through and no span exists. On,
BentoML's tracing applies: each answer carries the span id BentoML's
request hook takes from the request's span (``X-BentoML-Request-ID``).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from mlpipe.serving import ScoringProcess, free_port
from tests.e2e.conftest import deploy_one

pytestmark = pytest.mark.e2e


def test_tracing_on_gives_every_answer_a_span(
    tmp_path_factory: pytest.TempPathFactory, fraud_v1: Path
) -> None:
    from mlpipe.config import load_settings

    home = tmp_path_factory.mktemp("mlpipe-tracing")
    settings = load_settings(home=home)
    deploy_one(settings, fraud_v1)
    env = {"MLPIPE_SERVING__TRACING": "true", "MLPIPE_SERVING__MAX_LATENCY_MS": "2000"}
    server = ScoringProcess(
        settings, port=free_port(), workers=1, log_path=home / "server.log", env=env
    )
    with server:
        answers = [
            httpx.post(
                f"{server.url}/predict",
                json={
                    "model": "fraud",
                    "request_id": f"t-{i}",
                    "entity": {"customer_id": i},
                    "features": {"amount": 50.0 + i, "n_items": 2},
                },
                timeout=30,
            )
            for i in range(3)
        ]
    assert [r.status_code for r in answers] == [200, 200, 200], [r.text for r in answers]
    spans = [r.headers.get("x-bentoml-request-id") for r in answers]
    assert all(spans) and len(set(spans)) == 3, spans
    assert [r.json()["request_id"] for r in answers] == ["t-0", "t-1", "t-2"]
