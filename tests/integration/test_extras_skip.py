"""Where an extra is missing, the tests that need it are skipped, naming the extra.

Proven as a machine without XGBoost sees it: pytest runs in a child process whose
``sitecustomize`` hides ``xgboost`` from the import system (no finder finds it, as
when it is not installed), on the real test files that use it. The hook itself, its
CI branch and the static check that marks are present are unit tests
(tests/unit/test_extras.py); this child pytest, which imports mlpipe, scikit-learn and
the formats extra's converters, moved here from there (issue 31, item 5).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import REPO

XGBOOST_FILES = [
    "tests/unit/registry/test_flavor_formats.py",
    "tests/unit/registry/test_task_inference.py",
    "tests/integration/test_formats.py",
    "tests/integration/test_missing_values.py",
]
HIDE = """
import importlib.machinery
import sys

HIDDEN = {hidden!r}


class _PathFinderWithout(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in HIDDEN:
            return None
        return super().find_spec(fullname, path, target)


sys.meta_path[:] = [
    _PathFinderWithout if f is importlib.machinery.PathFinder else f for f in sys.meta_path
]
"""


def _pytest_without(
    tmp_path: Path, hidden: set[str], files: list[str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, list[tuple[str, str]]]]:
    """Run the ``formats`` tests of ``files`` with ``hidden`` uninstallable; outcome per file."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE.format(hidden=hidden))
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "PYTEST_ADDOPTS"}}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    report = tmp_path / "report.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "formats", "-p", "no:cacheprovider", "-q"]
        + ["--junitxml", str(report), *files],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    outcomes: dict[str, list[tuple[str, str]]] = {}
    for case in ET.parse(report).iter("testcase"):
        file = case.get("classname", "").replace(".", "/") + ".py"
        result = next(iter(case), None)
        kind = "passed" if result is None else result.tag
        text = "" if result is None else f"{result.get('message')} {result.text}"
        outcomes.setdefault(file, []).append((kind, text))
    return done, outcomes


def test_without_xgboost_its_tests_are_skipped_naming_the_extra(tmp_path: Path) -> None:
    done, outcomes = _pytest_without(tmp_path, {"xgboost"}, XGBOOST_FILES)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(outcomes) == sorted(XGBOOST_FILES)  # each collected, its marked tests ran
    runs = [run for file_runs in outcomes.values() for run in file_runs]
    assert all(
        kind == "skipped" and "needs mlpipe[formats]: xgboost not installed" in text
        for kind, text in runs
    ), runs
