"""The deployment loop against a real MLflow registry and SQLite control plane."""

import subprocess
import threading
from pathlib import Path

import pytest

from mlpipe import deployments, registry
from mlpipe.config import load_settings
from mlpipe.deployments import plan_promote
from mlpipe.errors import Conflict, InvalidInput, NotFound
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
    promoted = deployments.promote(s, "fraud")
    assert (promoted.generation, promoted.champion, promoted.previous) == (3, "2", "1")
    assert _alias(s, "champion") == "2" and _alias(s, "previous") == "1"
    assert _alias(s, "canary") is None
    rolled = deployments.rollback(s, "fraud", reason="bad p99")
    assert (rolled.champion, rolled.generation) == ("1", 4)
    assert _alias(s, "champion") == "1" and _alias(s, "previous") is None
    actions = [h.action for h in deployments.history(s, "fraud")]
    assert actions == ["rollback", "promote", "canary", "deploy"]
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
    cmd = [MLPIPE, "promote", "fraud", "--expect-generation", str(record.generation)]
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
