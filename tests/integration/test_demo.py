"""``mlpipe demo`` on a small data set: the whole foundation loop, for real."""

import shutil
from pathlib import Path

import pytest

from mlpipe import demo, registry
from mlpipe.config import load_settings
from tests.conftest import REPO

pytestmark = pytest.mark.integration


def test_demo_walks_the_loop(home: Path) -> None:
    shutil.copytree(
        REPO / "feature_repo", home / "feature_repo", ignore=shutil.ignore_patterns("data")
    )
    events: list[demo.DemoEvent] = []
    result = demo.run(load_settings(), events.append, customers=80, days=6, serve=False)
    titles = [e.title for e in events]
    assert titles[:5] == [
        "local stack",
        "generated transactions",
        "feature store ready",
        "point-in-time training sets",
        "registered in MLflow",
    ]
    records = [e.deployment for e in events if e.deployment is not None]
    assert [(r.generation, r.champion, r.canary) for r in records] == [
        (1, "1", None),
        (2, "1", "2"),
        (3, "2", None),
        (4, "1", None),
    ]
    v2 = registry.show(result, "fraud/2")
    assert v2.tags["mlpipe.feature_service"] == "fraud_v2"
    assert "amount" in v2.features and "country_risk" in v2.features
    assert result.home == (home / demo.DEMO_DIR).resolve()
