"""Issue 22's acceptance battery: monitoring on a demo-shaped stack tells the truth.

One stack for the module (see :mod:`tests.integration.monitoring_stack`): real
Feast (applied, materialized, read online by the serving pipeline and offline
by ``monitor skew``), real MLflow versions, real DuckDB and Evidently. Every
traffic set is scored up front through the serving pipeline into its own log,
so the tests only analyse and do not depend on each other's order:

- clean traffic to a champion and an equally good canary (same features, a
  different training cut), windows of 100, 300, 1,000 and 10,000 rows: no
  drift or quality alarm on any arm, no skew, canary analysis never ``fail``;
- ``amount`` × 3 at request time: drift naming ``amount`` (through the CLI);
- ``chargeback_rate_90d`` written as a percentage upstream (× 100), offline
  and online alike: no skew, but prediction drift (the positive rate goes
  from about 1.3 % to 3.5 %, the issue's example);
- labels flipped for a segment of customers: a ``quality`` verdict;
- a canary trained on shuffled labels: canary ``fail`` on a label metric and
  on the paired score test.

The INT8 recall cliff is tests/integration/test_quantize_guard.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlpipe import demo, monitoring
from mlpipe.config import Settings, load_settings
from tests.integration import monitoring_stack as ms

pytestmark = pytest.mark.integration

SIZES = (100, 300, 1_000, 10_000)
CUSTOMERS, DAYS = 300, 14
WINDOW = "2h"


@dataclass
class Stack:
    base: Settings
    versions: dict[str, str]
    windows: dict[str, Settings] = field(default_factory=dict)
    requests: dict[str, ms.Requests] = field(default_factory=dict)


def _clean_windows(stack: Stack, loader: Any, data: demo.GeneratedData) -> None:
    """10,000 clean requests scored once; the smaller windows are their first rows."""
    biggest = ms.isolated(stack.base, f"clean-{SIZES[-1]}")
    requests = ms.last_day_requests(data, SIZES[-1], seed=1, prefix="clean")
    ms.score(biggest, loader, requests)
    for n in SIZES:
        window = biggest if n == SIZES[-1] else ms.isolated(stack.base, f"clean-{n}")
        if window is not biggest:
            ms.first_rows(biggest, window, n)
        head = ms.Requests(requests.bodies[:n], requests.labels[:n])
        ms.load_labels(window, head)
        stack.windows[f"clean-{n}"], stack.requests[f"clean-{n}"] = window, head


def _failure_windows(stack: Stack, loader: Any, data: demo.GeneratedData) -> None:
    """``amount`` × 3 at request time; ``chargeback_rate_90d`` × 100 upstream (offline, online)."""
    amount = ms.isolated(stack.base, "amount")
    ms.score(
        amount, loader, ms.last_day_requests(data, 1_000, seed=2, prefix="amt", amount_factor=3)
    )
    shifted_repo, shifted = ms.feature_repo(
        stack.base,
        "feature_repo_shifted",
        customers=CUSTOMERS,
        days=DAYS,
        chargeback_rate_90d=100.0,
    )
    upstream = ms.isolated(stack.base, "upstream", feature_repo=shifted_repo.feature_repo)
    ms.score(upstream, loader, ms.last_day_requests(shifted, 1_000, seed=3, prefix="up"))
    stack.windows.update(amount=amount, upstream=upstream)


def _blind_canary_window(stack: Stack, loader: Any, data: demo.GeneratedData) -> None:
    """The label-shuffled version as the canary, 3,000 labelled requests."""
    ms.deploy(stack.base, stack.versions["blind"])
    loader.refresh()
    window = ms.isolated(stack.base, "blind")
    requests = ms.last_day_requests(data, 3_000, seed=4, prefix="blind")
    ms.score(window, loader, requests)
    ms.load_labels(window, requests)
    stack.windows["blind"], stack.requests["blind"] = window, requests


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, registry_template: Path) -> Iterator[Stack]:
    from mlpipe.serving import GenerationLoader

    root = tmp_path_factory.mktemp("battery")
    # a copy of the session's registry: MLflow's database is slow to create
    shutil.copytree(registry_template / ".mlpipe", root / ".mlpipe")
    with pytest.MonkeyPatch.context() as env:
        for key in [k for k in os.environ if k.startswith("MLPIPE_")]:
            env.delenv(key)
        env.setenv("MLPIPE_HOME", str(root))
        base, data = ms.feature_repo(
            load_settings(home=root), "feature_repo", customers=CUSTOMERS, days=DAYS
        )
        frame = ms.training_set(base, data.transactions)
        versions = {
            "champion": ms.register(base, frame, "champion", n_estimators=100),
            "canary": ms.register(base, frame, "canary", n_estimators=100, holdout=0.25),
            "blind": ms.register(base, ms.shuffled(frame), "blind", n_estimators=100),
        }
        stack = Stack(base, versions)
        ms.deploy(base, versions["canary"], champion=versions["champion"])
        loader = GenerationLoader(base)
        loader.refresh()
        _clean_windows(stack, loader, data)
        _failure_windows(stack, loader, data)
        _blind_canary_window(stack, loader, data)
        yield stack


def _cli(
    args: list[str], window: Settings, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """The real entry point, pointed at ``window``'s log, warehouse and reports."""
    from mlpipe_cli import main

    env = {
        "MLPIPE_HOME": str(window.home),
        "MLPIPE_PREDLOG_DIR": str(window.predlog_path),
        "MLPIPE_REPORTS_DIR": str(window.reports_path),
        "MLPIPE_WAREHOUSE_URL": window.warehouse_url or "",
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.setattr(sys, "argv", ["mlpipe", *args])
        with pytest.raises(SystemExit) as exit_info:
            main.run()
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


def _alarms(verdict: monitoring.DriftVerdict) -> dict[str, list[str]]:
    return {f"{a.arm} v{a.version}": a.alarms for a in verdict.arms if a.alarms}


@pytest.mark.parametrize("rows", SIZES)
def test_clean_traffic_raises_no_alarm_on_any_arm(stack: Stack, rows: int) -> None:
    window = stack.windows[f"clean-{rows}"]
    drift = monitoring.drift(window, ms.MODEL, WINDOW)
    assert sum(a.rows for a in drift.arms) == rows
    assert {a.arm for a in drift.arms} == {"champion", "canary"}
    assert drift.verdict in ("ok", "insufficient"), _alarms(drift)
    assert all(a.verdict in ("ok", "insufficient", "no_data") for a in drift.arms), _alarms(drift)
    skew = monitoring.skew(window, ms.MODEL, WINDOW)
    assert skew.verdict == "ok", [(f.feature, f.mismatch_rate) for f in skew.features]
    canary = monitoring.analyze(window, ms.MODEL, WINDOW)
    failed = {c.name: c.detail for c in canary.checks if c.passed is False}
    assert canary.verdict in ("pass", "insufficient"), failed
    assert set(failed) <= {"requests"}, failed  # too few requests is insufficient, not fail
    assert canary.canary_version == stack.versions["canary"]
    champion = next(a for a in drift.arms if a.arm == "champion")
    if rows >= 1_000:  # the champion arm is tested, not waved through as insufficient
        assert champion.verdict == "ok" and champion.quality is not None
    if rows >= 10_000:  # enough of both arms to judge: the equally good canary passes, paired
        assert canary.verdict == "pass" and canary.paired


def test_amount_times_three_is_drift_naming_amount(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    window = stack.windows["amount"]
    code, out, err = _cli(
        ["monitor", "drift", ms.MODEL, "--window", WINDOW, "--json"], window, capsys
    )
    assert code == 1, err
    data = json.loads(out)
    assert data["verdict"] == "drift"
    champion = next(a for a in data["arms"] if a["arm"] == "champion")
    assert "amount" in champion["drifted_features"]
    assert any(alarm.startswith("amount:") for alarm in champion["alarms"])
    code, out, _ = _cli(["monitor", "drift", ms.MODEL, "--window", WINDOW], window, capsys)
    assert code == 1 and "verdict: drift" in out and "amount" in out  # the verdict on stdout


def test_a_feature_shifted_upstream_is_prediction_drift_not_skew(stack: Stack) -> None:
    window = stack.windows["upstream"]
    skew = monitoring.skew(window, ms.MODEL, WINDOW)
    assert skew.verdict == "ok"  # offline and online agree: skew cannot see it
    drift = monitoring.drift(window, ms.MODEL, WINDOW)
    champion = next(a for a in drift.arms if a.arm == "champion")
    predicted = [c.column for c in champion.columns if c.kind == "prediction" and c.drifted]
    assert predicted, [(c.column, c.score, c.threshold) for c in champion.columns]
    assert "chargeback_rate_90d" in champion.drifted_features
    assert champion.verdict == "drift" and drift.exit_code == 1


def test_flipped_labels_for_a_segment_is_a_quality_verdict(stack: Stack) -> None:
    source, requests = stack.windows["clean-1000"], stack.requests["clean-1000"]
    window = ms.isolated(stack.base, "flipped")
    ms.first_rows(source, window, 1_000)
    customers = np.array([b["entity"]["customer_id"] for b in requests.bodies])
    ms.load_labels(window, requests, flip=customers % 4 == 0)  # a quarter of the customers
    drift = monitoring.drift(window, ms.MODEL, WINDOW)
    champion = next(a for a in drift.arms if a.arm == "champion")
    assert champion.verdict == "quality", (champion.alarms, champion.quality)
    assert any(alarm.startswith("quality:") for alarm in champion.alarms)
    assert drift.verdict == "quality" and drift.exit_code == 1


def test_a_label_shuffled_canary_fails_on_labels_and_on_the_paired_scores(stack: Stack) -> None:
    canary = monitoring.analyze(stack.windows["blind"], ms.MODEL, WINDOW)
    checks = {c.name: c for c in canary.checks}
    assert canary.canary_version == stack.versions["blind"] and canary.paired
    assert canary.verdict == "fail" and canary.exit_code == 1
    assert checks["paired_score"].passed is False, checks["paired_score"].detail
    assert checks["auc"].passed is False, checks["auc"].detail
