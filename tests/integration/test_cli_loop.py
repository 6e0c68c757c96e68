"""The CLI: exit codes, one readable line for user errors, --json, init idempotence.

The error cases run a real ``mlpipe`` process (``cli``); the longer stories run the console
script's entry point in this process (``cli_in_process``: the same exit codes and output,
without an interpreter start and imports per command).
"""

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_deploy_status_json_and_errors(registered_home: Path, cli_in_process) -> None:  # type: ignore[no-untyped-def]
    assert cli_in_process("deploy", "fraud", "--version", "1").returncode == 0
    status = cli_in_process("status", "fraud", "--json")
    assert status.returncode == 0
    assert json.loads(status.stdout)["champion"] == "1"
    bad = cli_in_process("deploy", "fraud", "--version", "2", "--canary", "150")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: --canary must be in (0, 100) percent, got 150"
    assert "Traceback" not in bad.stderr
    missing = cli_in_process("status", "ghost")
    assert missing.returncode == 2 and "ghost has no deployment" in missing.stderr
    history = cli_in_process("history", "fraud", "--json")
    assert [h["action"] for h in json.loads(history.stdout)] == ["deploy"]


def test_debug_shows_the_traceback(registered_home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("--debug", "promote", "fraud")
    assert result.returncode == 2 and "Traceback" in result.stderr


def test_corrupt_config_is_one_line_exit_2(home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    (home / "mlpipe.toml").write_text("serving = [\n")
    result = cli("status", "fraud")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "mlpipe.toml is not valid TOML" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_register_errors(home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    (home / "junk.pkl").write_text("junk")
    result = cli("register", "fraud", "--model", "junk.pkl", "--dataset", "nope.parquet")
    assert result.returncode == 2
    assert "junk.pkl is not a model file" in result.stderr
    bad_metric = cli("register", "fraud", "--model", "x", "--dataset", "y", "--metric", "auc")
    assert bad_metric.returncode == 2 and "--metric expects KEY=NUMBER" in bad_metric.stderr


def test_init_is_idempotent_and_doctor_reports(  # type: ignore[no-untyped-def]
    home: Path, cli_in_process, monkeypatch: pytest.MonkeyPatch
) -> None:
    # doctor's log check reads the free space of the host's disk: not this test's subject
    monkeypatch.setenv("MLPIPE_PREDLOG__MIN_FREE_PERCENT", "0")
    first = cli_in_process("init")
    assert first.returncode == 0, first.stderr
    assert "created" in first.stdout
    second = cli_in_process("init")
    assert second.returncode == 0
    assert "nothing to do: the local stack is already initialized" in second.stderr
    assert (home / "mlpipe.toml").is_file()
    doctor = cli_in_process("doctor", "--json")
    checks = {c["store"]: c for c in json.loads(doctor.stdout)}
    assert checks["registry"]["ok"] and checks["control plane"]["ok"]
    # init wrote a starter Feast repository: empty, but a feature store doctor can open
    assert checks["feature store"]["detail"] == "0 feature service(s), online store: sqlite"
    assert doctor.returncode == 0, doctor.stdout
    (home / "feature_repo" / "feature_store.yaml").unlink()
    broken = cli_in_process("doctor", "--json")
    assert broken.returncode == 3
    detail = {c["store"]: c["detail"] for c in json.loads(broken.stdout)}["feature store"]
    assert detail == f"no feature_store.yaml in {home.resolve() / 'feature_repo'}"


def test_status_shows_live_figures_per_arm(registered_home: Path, cli_in_process) -> None:  # type: ignore[no-untyped-def]
    import time

    from mlpipe.config import load_settings
    from mlpipe.predlog import ENCODER, PredictionRecord

    assert cli_in_process("deploy", "fraud", "--version", "1").returncode == 0
    assert cli_in_process("deploy", "fraud", "--version", "2", "--canary", "10").returncode == 0
    segment = load_settings().predlog_path / "w1-1.jsonl"
    segment.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        PredictionRecord(
            request_id=f"r{i}",
            ts=time.time(),
            tenant="default",
            model="fraud",
            version="2" if i % 10 == 0 else "1",
            arm="canary" if i % 10 == 0 else "champion",
            generation=2,
            entity_key=f"customer_id={i}",
            entity={"customer_id": i},
            features={"amount": 10.0, "txn_count_7d": 3.0},
            score=0.1,
            label=0,
            latency_ms=float(i),
        )
        for i in range(50)
    ]
    segment.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in rows))
    assert cli_in_process("warehouse", "sync").returncode == 0
    status = json.loads(cli_in_process("status", "fraud", "--json").stdout)
    figures = {(f["arm"], f["version"]): f for f in status["figures"]}
    assert figures[("champion", "1")]["requests"] == 45
    assert figures[("canary", "2")]["requests"] == 5
    assert figures[("canary", "2")]["p99_ms"] <= 40.0
