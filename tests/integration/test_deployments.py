"""The deployment loop against a real MLflow registry and SQLite control plane."""

import json
import subprocess
import threading
from pathlib import Path

import pytest

from mlpipe import deployments, registry
from mlpipe.config import load_settings
from mlpipe.deployments import plan_promote
from mlpipe.errors import CheckFailed, Conflict, InvalidInput, NotFound
from mlpipe.serving import GenerationLoader
from tests.conftest import MLPIPE

pytestmark = pytest.mark.integration


def _alias(settings, alias: str) -> str | None:  # type: ignore[no-untyped-def]
    from mlflow.exceptions import MlflowException

    try:
        return str(registry.client(settings).get_model_version_by_alias("fraud", alias).version)
    except MlflowException:
        return None


def _snapshot(settings):  # type: ignore[no-untyped-def]
    record = deployments.current(settings, "fraud")
    hist = deployments.control_plane(settings).history("fraud") if record else []
    aliases = {a: _alias(settings, a) for a in ("champion", "canary", "shadow", "previous")}
    return record, len(hist), aliases


def test_canary_promote_rollback_mirror_aliases(registered_home: Path) -> None:
    s = load_settings()
    deployments.deploy(s, "fraud", "1", reason="first")
    deployments.deploy(s, "fraud", "2", canary=10)
    assert _snapshot(s)[2] == {"champion": "1", "canary": "2", "shadow": None, "previous": None}
    promoted = deployments.promote(s, "fraud", force=True)
    assert (promoted.generation, promoted.champion, promoted.previous) == (3, "2", "1")
    assert _alias(s, "champion") == "2" and _alias(s, "previous") == "1"
    assert _alias(s, "canary") is None
    rolled = deployments.rollback(s, "fraud", reason="bad p99")
    assert (rolled.champion, rolled.generation) == ("1", 4)
    assert _alias(s, "champion") == "1" and _alias(s, "previous") is None
    actions = [h.action for h in deployments.history(s, "fraud")]
    assert actions == ["rollback", "promote --force", "canary", "deploy"]
    assert deployments.history(s, "fraud")[0].reason == "bad p99"


def _unchanged(settings, before, call) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises((InvalidInput, NotFound)) as info:
        call()
    assert _snapshot(settings) == before
    return str(info.value)


def test_bad_input_changes_nothing(registered_home: Path) -> None:
    s = load_settings()
    deployments.deploy(s, "fraud", "1")
    before = _snapshot(s)
    assert _unchanged(s, before, lambda: deployments.deploy(s, "nope", "1")) == (
        "no registered model named 'nope'"
    )
    assert "fraud has no version 9 (versions: 1, 2)" in _unchanged(
        s, before, lambda: deployments.deploy(s, "fraud", "9")
    )
    for pct in (0, 100, 150, -5):
        msg = _unchanged(s, before, lambda p=pct: deployments.deploy(s, "fraud", "2", canary=p))
        assert msg.startswith("--canary must be in (0, 100) percent")
    assert _unchanged(s, before, lambda: deployments.promote(s, "fraud")) == (
        "fraud has no canary to promote"
    )
    assert _unchanged(s, before, lambda: deployments.rollback(s, "fraud")) == (
        "fraud has no previous version to roll back to"
    )
    with pytest.raises(NotFound, match="ghost has no deployment"):
        deployments.promote(s, "ghost")


def test_compare_and_swap_lets_exactly_one_writer_win(registered_home: Path) -> None:
    s = load_settings()
    deployments.deploy(s, "fraud", "1")
    deployments.deploy(s, "fraud", "2", canary=10)
    plane = deployments.control_plane(s)
    read = plane.get("fraud")
    assert read is not None
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def writer() -> None:
        barrier.wait()
        try:
            plane.commit(plan_promote(read), read_generation=read.generation, action="promote")
            outcomes.append("won")
        except Conflict as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes)[-1] == "won" and outcomes.count("won") == 1
    assert "changed concurrently" in sorted(outcomes)[0]
    assert len(plane.history("fraud")) == 3


def test_two_promote_commands_at_once(registered_home: Path) -> None:
    s = load_settings()
    deployments.deploy(s, "fraud", "1")
    record = deployments.deploy(s, "fraud", "2", canary=10)
    cmd = [MLPIPE, "promote", "fraud", "--force", "--expect-generation", str(record.generation)]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    assert "changed concurrently" in loser or "is at generation 3, not 2" in loser
    assert len(loser.strip().splitlines()) == 1
    final, n_history, aliases = _snapshot(s)
    assert n_history == 3 and final is not None and final.champion == "2"
    assert aliases == {"champion": "2", "canary": None, "shadow": None, "previous": "1"}


class Cli:
    """``mlpipe ARGS`` run in this process (entry point, error boundary, exit code)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
        self.monkeypatch, self.capsys = monkeypatch, capsys

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        from mlpipe_cli.main import run
        from mlpipe_cli.state import state

        self.monkeypatch.setattr("sys.argv", ["mlpipe", *args])
        self.monkeypatch.setattr(state, "debug", False)
        with pytest.raises(SystemExit) as exit_:
            run()
        out, err = self.capsys.readouterr()
        return subprocess.CompletedProcess(args, int(exit_.value.code or 0), out, err)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(monkeypatch, capsys)


def _analysed(settings, version: str, verdict: str) -> None:  # type: ignore[no-untyped-def]
    """An entry in the reports index as ``canary analyze`` writes it."""
    from datetime import UTC, datetime
    from uuid import uuid4

    from mlpipe import warehouse

    entry = warehouse.ReportEntry(
        id=uuid4().hex,
        kind="canary",
        model="fraud",
        arm="canary",
        version=version,
        window_start=None,
        window_end=None,
        created_at=datetime.now(UTC),
        verdict=verdict,
        path=None,
        summary={},
    )
    warehouse.record_reports(settings, [entry])


def test_promote_needs_a_passing_analysis_of_the_canary_version(registered_home: Path) -> None:
    s = load_settings()
    deployments.deploy(s, "fraud", "1")
    deployments.deploy(s, "fraud", "2", canary=10)
    before = _snapshot(s)
    with pytest.raises(CheckFailed) as none:
        deployments.promote(s, "fraud")
    assert str(none.value) == (
        "fraud version 2 has no canary analysis; run `mlpipe canary analyze fraud`, "
        "or promote with --force (recorded in the history)"
    )
    _analysed(s, "1", "pass")  # a pass of another version does not count
    _analysed(s, "2", "pass")
    _analysed(s, "2", "fail")  # the newest analysis of the version decides
    with pytest.raises(CheckFailed, match="latest canary analysis of fraud version 2 is fail"):
        deployments.promote(s, "fraud")
    assert _snapshot(s) == before
    _analysed(s, "2", "pass")
    assert deployments.promote(s, "fraud").champion == "2"
    assert deployments.history(s, "fraud", limit=1)[0].action == "promote"


def test_forced_promote_is_recorded_with_reason_and_actor(registered_home: Path, cli: Cli) -> None:
    s = load_settings()
    deployments.deploy(s, "fraud", "1")
    deployments.deploy(s, "fraud", "2", canary=10)
    refused = cli("promote", "fraud")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: fraud version 2 has no canary analysis")
    assert len(refused.stderr.strip().splitlines()) == 1
    forced = cli("promote", "fraud", "--force", "--reason", "hotfix, analysed by hand")
    assert forced.returncode == 0, forced.stderr
    (entry,) = deployments.history(s, "fraud", limit=1)
    assert (entry.action, entry.reason, entry.champion) == (
        "promote --force",
        "hotfix, analysed by hand",
        "2",
    )
    assert entry.actor == s.actor


def test_undeploy_takes_the_model_out_of_service(registered_home: Path, cli: Cli) -> None:
    s = load_settings()
    deployments.deploy(s, "fraud", "1")
    deployments.deploy(s, "fraud", "2", canary=10)
    loader = GenerationLoader(s)  # what a serving worker runs
    loader.refresh()
    assert set(loader.models["fraud"].versions) == {"1", "2"}
    result = cli("undeploy", "fraud", "--reason", "broken model")
    assert result.returncode == 0, result.stderr
    record, n_history, aliases = _snapshot(s)
    assert record is not None and record.generation == 3
    assert (record.champion, record.canary, record.shadow, record.previous) == (
        None,
        None,
        None,
        "1",
    )
    assert aliases == {"champion": None, "canary": None, "shadow": None, "previous": "1"}
    (entry,) = deployments.history(s, "fraud", limit=1)
    assert (entry.action, entry.reason, n_history) == ("undeploy", "broken model", 3)
    assert deployments.generations(s) == {}  # what servers poll
    loader.refresh()
    assert loader.models == {} and loader.ready  # stopped serving it
    # bad input: one line, exit 2, nothing changed
    before = _snapshot(s)
    for name, message in (
        ("fraud", "error: fraud is not deployed; nothing was changed"),
        ("ghost", "error: ghost has no deployment; run `mlpipe deploy ghost --version V` first"),
    ):
        bad = cli("undeploy", name)
        assert (bad.returncode, bad.stdout, bad.stderr.strip()) == (2, "", message)
        assert _snapshot(s) == before
    back = deployments.rollback(s, "fraud", reason="fixed")
    assert (back.champion, back.generation) == ("1", 4)
    assert deployments.generations(s) == {"fraud": 4}
    loader.refresh()
    assert loader.models["fraud"].generation == 4
    assert _alias(s, "champion") == "1"


def test_status_heals_alias_drift_and_doctor_reports_it(registered_home: Path, cli: Cli) -> None:
    s = load_settings()
    deployments.deploy(s, "fraud", "1")
    deployments.deploy(s, "fraud", "2", canary=10)
    assert deployments.check_aliases(s) == "MLflow aliases match the record for 1 model(s)"
    client = registry.client(s)
    client.set_registered_model_alias("fraud", "champion", "2")  # a writer that lost a race
    client.delete_registered_model_alias("fraud", "canary")
    with pytest.raises(CheckFailed) as drift:
        deployments.check_aliases(s)
    assert str(drift.value) == (
        "fraud: @champion is 2 (record: 1), @canary is None (record: 2); "
        "`mlpipe status fraud` heals it"
    )
    doctor = cli("doctor", "--json")
    (row,) = [c for c in json.loads(doctor.stdout) if c["store"] == "aliases"]
    assert not row["ok"] and "@champion is 2 (record: 1)" in row["detail"]
    status = cli("status", "fraud")
    assert status.returncode == 0, status.stderr
    assert "healed alias drift: @champion was 2, now 1" in status.stderr
    assert "healed alias drift: @canary was None, now 2" in status.stderr
    assert _snapshot(s)[2] == {"champion": "1", "canary": "2", "shadow": None, "previous": None}
    again = cli("status", "fraud", "--json")
    assert json.loads(again.stdout)["aliases_healed"] == []
