"""``bench.ceiling``'s cuts still find their places in the source, and its table's arithmetic.

The bench's figures themselves are not asserted: it is a benchmark, not a test.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from bench.ceiling import CUTS, ROOT, Cut, cut_source, cut_tree, parse, steps


@pytest.mark.parametrize("cut", CUTS, ids=lambda c: c.name)
def test_every_cut_finds_its_place_and_the_cut_source_compiles(cut: Cut) -> None:
    source = (ROOT / cut.path).read_text()
    made = cut_source(source, cut)
    assert made != source
    ast.parse(made, cut.path)
    if cut.replace:
        assert cut.replace not in made and cut.by in made
    else:  # the answer comes first in the layer's __call__
        call = made.index("async def __call__", made.index(f"\nclass {cut.cls}"))
        assert made.index('if scope.get("path") == "/predict":', call) < made.index("\n\n", call)


def test_a_cut_whose_place_is_gone_says_which_and_where() -> None:
    gone = Cut("front-door", "…", "platform/mlpipe/serving/_overload.py", cls="NoSuchLayer")
    with pytest.raises(ValueError, match=r"front-door: no NoSuchLayer.__call__ in .*_overload.py"):
        cut_source((ROOT / gone.path).read_text(), gone)
    twice = Cut("x", "…", "p.py", replace="a\n", by="b\n")
    with pytest.raises(ValueError, match="x: the text to replace is not once in p.py"):
        cut_source("a\na\n", twice)


def test_cut_tree_extracts_the_commit_and_cuts_only_its_file(tmp_path: Path) -> None:
    cut = next(c for c in CUTS if c.name == "admitted")
    stale = tmp_path / "admitted" / "from-an-older-run.py"
    stale.parent.mkdir()
    stale.write_text("")
    tree = cut_tree(ROOT, cut, tmp_path)
    assert tree == tmp_path / "admitted"
    assert not stale.exists()  # made afresh
    committed = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"HEAD:{cut.path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert (tree / cut.path).read_text() == cut_source(committed, cut)
    other = "platform/mlpipe/serving/_pipeline.py"
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"HEAD:{other}"], check=True, capture_output=True
    ).stdout
    assert (tree / other).read_bytes() == shown


def test_steps_are_the_cpu_time_an_answer_between_cuts() -> None:
    rows = [
        {"label": "tree=/t/front-door+lane=false", "mode": "closed", "rps": 40_000.0},
        {"label": "tree=/t/front-door+lane=false", "mode": "closed", "rps": 50_000.0},
        {"label": "tree=/t/batched+lane=false", "mode": "closed", "rps": 20_000.0},
        {"label": "tree=/t/batched+lane=false", "mode": "open", "rps": 1.0},  # not counted
        {"label": "lane=false", "mode": "closed", "rps": 10_000.0},
        {"label": "default", "mode": "closed", "rps": 16_000.0},
    ]
    labels = {
        "tree=/t/front-door+lane=false": "edge",
        "tree=/t/batched+lane=false": "+ batcher",
        "lane=false": "+ all",
        "default": "the lane",
    }
    table = steps(rows, labels, cores=2)
    lines = table.splitlines()
    # 2 cores / 45,000 req/s = 44 µs; / 20,000 = 100 µs; / 10,000 = 200 µs; / 16,000 = 125 µs
    assert lines[2] == "| front-door | edge | 45,000 | 44 | – |"
    assert lines[3] == "| batched | + batcher | 20,000 | 100 | +56 |"
    assert lines[4] == "| the app's whole path | + all | 10,000 | 200 | +100 |"
    assert lines[5] == "| the whole path, the lane on | the lane | 16,000 | 125 | -75 |"


def test_an_unknown_cut_is_refused_naming_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse(["--cuts", "front-door,nowhere"])
    err = capsys.readouterr().err
    assert "--cuts: unknown nowhere; known: front-door, deadline" in err
    assert [c.name for c in parse(["--cuts", "auth,gateway"]).cuts] == ["auth", "gateway"]
