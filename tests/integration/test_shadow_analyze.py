"""``mlpipe shadow analyze`` through the real CLI, over the real warehouse."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe import warehouse
from mlpipe.predlog import ENCODER, PredictionRecord

pytestmark = pytest.mark.integration


def _log(settings: Any, rows: int, blind_shadow: bool, tenant: str = "t", seed: int = 0) -> None:
    """Champion answers and a shadow answer per request (same request id), with labels."""
    rng = np.random.default_rng(seed)
    logit = rng.normal(-2.5, 1.5, rows)
    shadow_logit = rng.normal(-2.5, 0.3, rows) if blind_shadow else logit
    truth = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(int)
    now, records = time.time() - 5, []
    for i in range(rows):
        for arm, version, z, latency in (
            ("champion", "1", logit, 3.0),
            ("shadow", "2", shadow_logit, 7.0),
        ):
            score = float(1 / (1 + np.exp(-z[i])))
            records.append(
                PredictionRecord(
                    request_id=f"q{i}", ts=now - i * 0.01, tenant=tenant, model="fraud",
                    version=version, arm=arm, generation=1,  # type: ignore[arg-type]
                    entity_key=f"customer_id={i % 120}", entity={"customer_id": i % 120},
                    features={"amount": float(i)}, score=score, label=int(score >= 0.5),
                    latency_ms=latency,
                )
            )  # fmt: skip
    log = settings.predlog_path / f"shadow-{tenant}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    warehouse.sync(settings)
    labels = settings.home / "labels.csv"
    pd.DataFrame({"request_id": [f"q{i}" for i in range(rows)], "label": truth}).to_csv(
        labels, index=False
    )
    warehouse.load_outcomes(settings, labels, tenant=tenant)


def test_a_blind_shadow_fails_with_its_largest_disagreements_html_and_json(
    home: Path, settings: Any, cli: Any
) -> None:
    _log(settings, 800, blind_shadow=True)
    result = cli("shadow", "analyze", "fraud", "--top", "3")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "fraud: shadow v2 vs champion v1 on 800 paired request(s)" in result.stdout
    assert "verdict: fail;" in result.stdout and "largest disagreements" in result.stdout
    (entry,) = warehouse.list_reports(settings, model="fraud", kind="shadow")
    assert entry.verdict == "fail" and entry.version == "2" and entry.arm == "shadow"
    document = json.loads(Path(entry.path).read_text())
    failed = {c["name"] for c in document["checks"] if c["passed"] is False}
    assert {"paired_score", "auc"} <= failed
    top = document["disagreements"]
    assert len(top) == 3 and all(d["request_id"] in result.stdout for d in top)
    assert document["latency_ms"]["shadow_p50"] == 7.0 and document["label_agreement"] < 1
    page = Path(entry.path).with_name("shadow.html").read_text()
    assert top[0]["request_id"] in page


def test_the_same_model_in_shadow_passes(home: Path, settings: Any) -> None:
    from mlpipe import monitoring

    _log(settings, 400, blind_shadow=False)
    result = monitoring.analyze_shadow(settings, "fraud", "1h")
    assert result.verdict == "pass" and result.exit_code == 0
    assert result.label_agreement == 1.0 and result.score_delta["max_abs"] == 0.0
    assert (result.champion_version, result.shadow_version) == ("1", "2")


def test_two_tenants_sending_the_same_ids_do_not_poison_the_shadow(
    home: Path, settings: Any
) -> None:
    from mlpipe import monitoring

    _log(settings, 200, blind_shadow=False, tenant="a", seed=0)
    _log(settings, 200, blind_shadow=False, tenant="b", seed=1)  # the same ids, other answers
    result = monitoring.analyze_shadow(settings, "fraud", "1h")
    assert (result.paired_requests, result.unpaired_shadow_rows) == (400, 0)
    assert result.verdict == "pass" and result.score_delta["max_abs"] == 0.0


def test_a_model_without_logs_or_a_bad_window_is_one_line_exit_2_and_records_nothing(
    home: Path, settings: Any, cli: Any
) -> None:
    _log(settings, 10, blind_shadow=False)
    missing = cli("shadow", "analyze", "nope")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        "error: model 'nope' has no logged predictions (the warehouse has: fraud)"
    )
    bad = cli("shadow", "analyze", "fraud", "--window", "soon")
    assert bad.returncode == 2 and "soon" in bad.stderr and "Traceback" not in bad.stderr
    assert warehouse.list_reports(settings, kind="shadow") == []
