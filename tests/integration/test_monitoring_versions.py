"""One version per figure: promote, traffic, rollback, traffic, and each report names versions
with their own row counts (issue 28, item 3).

The prediction log is written as a serving process would write it after each step
(champion v1; a canary v2 beside it; v2 promoted; rolled back to v1), so the
window holds the champion arm served by two versions.
"""

from __future__ import annotations

import json
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlpipe import monitoring
from mlpipe.config import load_settings
from mlpipe.predlog import ENCODER, PredictionRecord

pytestmark = pytest.mark.integration
FEATURES = ["a", "b", "c"]


@pytest.fixture
def settings(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MLPIPE_HOME", str(tmp_path))
    return load_settings(home=tmp_path)


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({k: rng.normal(0, 1, n) for k in FEATURES})


def _phase(settings, name: str, arm: str, version: str, n: int, ago: float, shift=0.0) -> None:  # type: ignore[no-untyped-def]
    """``n`` requests answered by ``version`` on ``arm``, ending ``ago`` seconds ago."""
    f = _frame(n, zlib.crc32(name.encode()) % 1000) + shift
    now = time.time() - ago
    records = [
        PredictionRecord(
            request_id=f"{name}-{i}",
            ts=now - i,
            tenant="t",
            model="fraud",
            version=version,
            arm=arm,
            generation=1,
            entity_key=f"customer_id={i}",
            entity={"customer_id": i},
            features={k: float(v) for k, v in f.iloc[i].items()},
            score=float(1 / (1 + np.exp(-f["c"].iloc[i]))),
            label=int(f["c"].iloc[i] > 0),
            latency_ms=5.0,
        )
        for i in range(n)
    ]
    path = settings.predlog_path / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))


def _mirror(settings, of: str, version: str, n: int, ago: float) -> None:  # type: ignore[no-untyped-def]
    """A shadow ``version``'s answers to the first ``n`` requests of the phase ``of`` (logged
    under their request ids, as the gateway logs a shadow answer)."""
    f = _frame(n, zlib.crc32(of.encode()) % 1000)
    now = time.time() - ago
    records = [
        PredictionRecord(
            request_id=f"{of}-{i}", ts=now - i, tenant="t", model="fraud", version=version,
            arm="shadow", generation=1, entity_key=f"customer_id={i}", entity={"customer_id": i},
            features={k: float(v) for k, v in f.iloc[i].items()},
            score=float(1 / (1 + np.exp(-0.9 * f["c"].iloc[i]))), label=int(f["c"].iloc[i] > 0),
            latency_ms=6.0,
        )
        for i in range(n)
    ]  # fmt: skip
    path = settings.predlog_path / f"shadow-{of}-v{version}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))


def _promote_then_rollback(settings) -> None:  # type: ignore[no-untyped-def]
    _phase(settings, "v1-before", "champion", "1", 351, ago=3000)
    _phase(settings, "v2-canary", "canary", "2", 120, ago=2400)
    _phase(settings, "v1-beside", "champion", "1", 300, ago=2400)
    _phase(settings, "v2-promoted", "champion", "2", 300, ago=1200, shift=1.5)
    _phase(settings, "v1-rolled-back", "champion", "1", 300, ago=60)


def _cli(args: list[str], capsys) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
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


def test_drift_reports_each_version_an_arm_served(settings, capsys) -> None:  # type: ignore[no-untyped-def]
    _promote_then_rollback(settings)
    verdict = monitoring.drift(settings, "fraud", "24h", reference_frame=_frame(800, 99))
    got = {(a.arm, a.version): a.rows for a in verdict.arms}
    assert got == {("champion", "1"): 951, ("champion", "2"): 300, ("canary", "2"): 120}
    by_version = {(a.arm, a.version): a for a in verdict.arms}
    # v2's shifted traffic is v2's drift, not v1's: v1's figures hold v1's rows only.
    assert by_version["champion", "2"].verdict == "drift"
    assert by_version["champion", "1"].drifted_features == []
    # The newest first, one report file per version.
    assert [a.version for a in verdict.arms if a.arm == "champion"] == ["1", "2"]
    html = {Path(a.html).name for a in verdict.arms if a.html}
    assert html == {"canary.html", "champion-v1.html", "champion-v2.html"}


def test_cli_names_each_version_with_its_own_rows(settings, capsys) -> None:  # type: ignore[no-untyped-def]
    _phase(settings, "reference", "champion", "1", 800, ago=2 * 86400)
    _promote_then_rollback(settings)
    args = ["monitor", "drift", "fraud", "--window", "24h", "--reference", "window:3d"]
    code, out, err = _cli(args, capsys)
    assert code == 1, err  # v2 drifted
    assert "fraud champion v1: ok — 951 of 951 request(s)" in out
    assert "fraud champion v2: drift — 300 of 300 request(s)" in out
    assert "fraud canary v2: ok — 120 of 120 request(s)" in out
    code, out, err = _cli([*args, "--version", "1", "--json"], capsys)
    data = json.loads(out)
    assert [(a["arm"], a["version"], a["rows"]) for a in data["arms"]] == [
        ("canary", "1", 0),
        ("champion", "1", 951),
    ]
    assert data["verdict"] == "ok" and code == 0


def test_version_keeps_one_version_and_says_what_it_left_out(settings) -> None:  # type: ignore[no-untyped-def]
    _promote_then_rollback(settings)
    verdict = monitoring.drift(
        settings, "fraud", "24h", reference_frame=_frame(800, 99), version="1"
    )
    ((arm, rows, notes),) = [(a.arm, a.rows, a.notes) for a in verdict.arms if a.rows]
    assert (arm, rows) == ("champion", 951)
    assert "300 row(s) of other versions on the champion arm left out" in notes
    summary = json.loads((Path(verdict.report_dir) / "summary.json").read_text())
    assert {(a["arm"], a["version"], a["rows"]) for a in summary["arms"]} >= {
        ("champion", "1", 951)
    }


def test_canary_says_how_many_rows_of_other_versions_it_left_out(settings, capsys) -> None:  # type: ignore[no-untyped-def]
    _promote_then_rollback(settings)
    result = monitoring.analyze(settings, "fraud", "24h")
    assert (result.champion_version, result.champion_requests) == ("1", 951)
    assert (result.canary_version, result.canary_requests) == ("2", 120)
    assert "300 champion row(s) of other versions left out (v1 only)" in result.notes
    _, out, _ = _cli(["canary", "analyze", "fraud", "--window", "24h"], capsys)
    assert "fraud: canary v2 (120 req) vs champion v1 (951 req)" in out
    assert "note: 300 champion row(s) of other versions left out (v1 only)" in out


def test_shadow_pairs_one_version_per_side_and_counts_what_it_left_out(settings, capsys) -> None:  # type: ignore[no-untyped-def]
    """Shadow v3 mirrored v2 (promoted) and then v1 (rolled back); an older shadow v4 mirrored
    v1 before: each analysis pairs one shadow version with one champion version, with their
    own counts, and says how many rows of other versions it left out."""
    _promote_then_rollback(settings)
    _mirror(settings, "v1-before", "4", 100, ago=3000)
    _mirror(settings, "v2-promoted", "3", 300, ago=1200)
    _mirror(settings, "v1-rolled-back", "3", 300, ago=60)
    code, out, err = _cli(["shadow", "analyze", "fraud", "--window", "24h", "--json"], capsys)
    data = json.loads(out)
    assert (data["shadow_version"], data["champion_version"]) == ("3", "1"), err
    assert (data["paired_requests"], data["unpaired_shadow_rows"]) == (300, 0)
    assert data["notes"] == [
        "100 shadow row(s) of other versions left out (v3 only)",
        "300 paired request(s) the champion answered with other versions left out "
        "(champion v1 only)",
    ]
    _, out, _ = _cli(["shadow", "analyze", "fraud", "--window", "24h"], capsys)
    assert "fraud: shadow v3 vs champion v1 on 300 paired request(s)" in out
    assert "note: 100 shadow row(s) of other versions left out (v3 only)" in out
    older = monitoring.analyze_shadow(settings, "fraud", "24h", version="4")
    assert (older.shadow_version, older.champion_version, older.paired_requests) == ("4", "1", 100)
    assert older.notes == ["600 shadow row(s) of other versions left out (v4 only)"]
