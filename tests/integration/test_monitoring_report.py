"""Drift against the registered version's training reference, and the HTML report in a browser.

``fraud`` v1 (from the session's registry template) was trained on ``amount``
and ``txn_count_7d``; its reference was stored at register time. Traffic drawn
from the same distributions is not drift; traffic whose ``amount`` grew is, in
``amount`` and the prediction but not ``txn_count_7d``. The HTML report opens in
headless Chromium (a screenshot is kept as the test's artefact) and the JSON
beside it parses with the verdicts the CLI printed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mlpipe import monitoring, registry
from mlpipe.predlog import ENCODER, PredictionRecord

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _traffic(settings, n: int, seed: int, amount_factor: float = 1.0, frame=None) -> None:  # type: ignore[no-untyped-def]
    """Requests for fraud v1 drawn like ``train_toy_model``'s data (or taken from ``frame``)."""
    rng = np.random.default_rng(seed)
    if frame is None:
        amount = rng.gamma(2.0, 30.0, n) * amount_factor
        count = rng.poisson(5, n)
        label = ((amount / 60 + rng.normal(0, 1, n)) > 1.5).astype(int)
    else:
        amount, count, label = (frame[c].to_numpy() for c in ("amount", "txn_count_7d", "label"))
    # Served as fraud v1 serves: its own scores and labels at its threshold.
    model = registry.load_verified(settings, "fraud", "1")
    inputs = {"amount": np.asarray(amount, float), "txn_count_7d": np.asarray(count, float)}
    scores = model.predict_scores(np.column_stack([inputs[f] for f in model.features]))
    label = (scores >= model.threshold).astype(int)
    now = time.time() - 60
    records = [
        PredictionRecord(
            request_id=f"{seed}-{i}",
            ts=now - i,
            tenant="t",
            model="fraud",
            version="1",
            arm="champion",
            generation=1,
            entity_key=f"customer_id={i}",
            entity={"customer_id": i},
            features={"amount": float(amount[i]), "txn_count_7d": float(count[i])},
            score=float(scores[i]),
            label=int(label[i]),
            latency_ms=3.0,
        )
        for i in range(n)
    ]
    path = settings.predlog_path / f"traffic-{seed}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from mlpipe_cli import main

    old = sys.argv
    sys.argv = ["mlpipe", *args]
    try:
        with pytest.raises(SystemExit) as exit_info:
            main.run()
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


def test_unshifted_traffic_matches_the_training_reference(registered_home: Path, settings) -> None:  # type: ignore[no-untyped-def]
    reference = registry.load_reference(settings, "fraud", "1")
    assert set(reference.columns) == {"amount", "txn_count_7d", "label"} and len(reference) == 600
    # Requests that are a sample of the training rows themselves: no drift, whatever the seed.
    _traffic(settings, 400, seed=5, frame=reference.sample(400, random_state=5))
    verdict = monitoring.drift(settings, "fraud", "1h")  # reference="training" is the default
    assert verdict.reference == "training reference"
    (arm,) = verdict.arms
    assert arm.reference_rows == 600 and arm.rows == 400
    tested = {c.column for c in arm.columns}
    assert tested == {"amount", "txn_count_7d", "prediction", "positive_rate"}
    assert arm.drifted_features == [] and verdict.verdict == "ok" and verdict.exit_code == 0


def test_shifted_amount_drifts_and_the_html_report_renders(
    registered_home: Path,
    settings,  # type: ignore[no-untyped-def]
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    _traffic(settings, 400, seed=12, amount_factor=2.5)
    code, out, err = _cli(
        ["monitor", "drift", "fraud", "--window", "1h", "--reference", "training", "--json"],
        capsys,
    )
    assert code == 1, err
    printed = json.loads(out)
    (arm,) = printed["arms"]
    assert printed["verdict"] == "drift" and arm["verdict"] == "drift"
    drifted = {c["column"] for c in arm["columns"] if c["drifted"]} - {"positive_rate"}
    assert drifted == {"amount", "prediction"}  # txn_count_7d did not move
    assert any(a.startswith("amount:") for a in arm["alarms"])

    # The JSON next to the HTML says what the CLI printed, column by column and overall.
    report = json.loads(Path(arm["json"]).read_text())
    failed = {
        t["metric_config"]["params"].get("column"): str(t["status"]).endswith("FAIL")
        for t in report["tests"]
    }
    assert {c for c, f in failed.items() if f and c is not None} == drifted
    assert failed[None] is True  # the dataset-level test, at mlpipe's drift share
    summary = json.loads((Path(printed["report_dir"]) / "summary.json").read_text())
    assert summary["verdict"] == printed["verdict"]
    assert summary["arms"][0]["columns"] == arm["columns"]

    html = Path(arm["html"])
    assert html.read_text(errors="replace").lstrip().lower().startswith("<!doctype html")
    if CHROMIUM is None:
        pytest.skip("chromium not installed: the HTML report was not opened in a browser")
    shot = tmp_path / "report.png"
    run = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",  # let the report's scripts draw before the shot
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A blank page compresses to a few KB; the rendered report (tables, charts) is far larger.
    assert shot.stat().st_size > 30_000, shot.stat().st_size
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console
    artefacts = Path(printed["report_dir"]) / "chromium-screenshot.png"
    shutil.copyfile(shot, artefacts)  # kept beside the report it shows
