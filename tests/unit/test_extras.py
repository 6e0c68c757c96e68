"""A test that needs an optional extra is skipped, naming it, where the extra is missing.

The suite runs where only the base install is (issue 31 item 5): tests/conftest.py
turns the markers ``formats``, ``nn`` and ``prod`` into a skip that names the
extra and its missing modules, or under CI (``CI`` set) into a failure, since CI
installs every extra and must not skip a test of one. Modules that need an extra
throughout skip with ``pytest.importorskip`` at their top instead.

The hook is called here with a marked item, with and without ``CI`` set; a pytest
run as a machine without XGBoost sees it (a child process whose import system cannot
find ``xgboost``) is tests/integration/test_extras_skip.py. A static check keeps new
tests honest: a test that imports an extra's module, itself or through a helper or
fixture of its file, carries the extra's marker.
"""

from __future__ import annotations

import ast
import tomllib
from typing import Any

import pytest
from packaging.requirements import Requirement

from tests import conftest
from tests.conftest import EXTRAS, REPO

# Where a module runs on a service its fixtures skip (fail under CI) without the prod
# extra's client for it: tests/integration/prod_services.py, tests/kafka_broker.py.
SERVICE_MARKERS = {"postgres": "prod", "redis": "prod", "kafka": "prod"}


def test_the_table_names_every_distribution_of_each_extra() -> None:
    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    in_pyproject = {
        extra: sorted(Requirement(r).name for r in requirements)
        for extra, requirements in optional.items()
        if extra != "dev"
    }
    assert in_pyproject == {extra: sorted(modules) for extra, modules in EXTRAS.items()}


def test_each_extra_is_a_registered_marker(pytestconfig: pytest.Config) -> None:
    registered = {line.partition(":")[0] for line in pytestconfig.getini("markers")}
    assert set(EXTRAS) <= registered


class _Marked:
    """Stands for a test item marked with ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == self.marker else None


def test_under_ci_a_missing_extra_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "formats", {"nowhere": "mlpipe_test_nowhere"})
    monkeypatch.delenv("CI", raising=False)
    item: Any = _Marked("formats")
    with pytest.raises(
        pytest.skip.Exception, match=r"^needs mlpipe\[formats\]: mlpipe_test_nowhere"
    ):
        conftest.pytest_runtest_setup(item)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(
        pytest.fail.Exception,
        match=r"^CI must run this test, but it needs mlpipe\[formats\]: mlpipe_test_nowhere not",
    ):
        conftest.pytest_runtest_setup(item)
    unmarked_item: Any = _Marked("integration")
    conftest.pytest_runtest_setup(unmarked_item)  # no extra's marker: left alone


# -- the static check --

MODULE_EXTRA = {
    module.partition(".")[0]: extra for extra, table in EXTRAS.items() for module in table.values()
}


def _mark(expr: ast.expr) -> str | None:
    """``X`` for ``pytest.mark.X`` or ``pytest.mark.X(...)``."""
    if isinstance(expr, ast.Call):
        expr = expr.func
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Attribute):
        return expr.attr if expr.value.attr == "mark" else None
    return None


def _pytestmark(body: list[ast.stmt]) -> set[str]:
    for node in body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            value = node.value
            values = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            return {m for v in values if (m := _mark(v))}
    return set()


def _covered(marks: set[str]) -> set[str]:
    return {m for m in marks if m in EXTRAS} | {
        SERVICE_MARKERS[m] for m in marks & set(SERVICE_MARKERS)
    }


def _imported_extras(node: ast.AST) -> dict[str, str]:
    """extra -> a module of it, for every import anywhere inside ``node``."""
    found = {}
    for n in ast.walk(node):
        names = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            names = [n.module]
        for name in names:
            if (extra := MODULE_EXTRA.get(name.partition(".")[0])) is not None:
                found.setdefault(extra, name)
    return found


def _fixture_name(fn: ast.FunctionDef) -> str | None:
    for decorator in fn.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call else decorator
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            named = [k.value for k in (call.keywords if call else []) if k.arg == "name"]
            if named and isinstance(named[0], ast.Constant):
                return str(named[0].value)
            return fn.name
    return None


def unmarked(source: str, where: str) -> list[str]:
    """Tests in ``source`` that need an extra they are not marked with, in words."""
    tree = ast.parse(source)
    module_marks = _pytestmark(tree.body)
    for node in tree.body:  # a module that skips itself without the module: covered
        call = node.value if isinstance(node, ast.Expr | ast.Assign) else None
        if isinstance(call, ast.Call) and _called(call) == "importorskip" and call.args:
            arg = call.args[0]
            if isinstance(arg, ast.Constant) and str(arg.value) in MODULE_EXTRA:
                module_marks.add(MODULE_EXTRA[str(arg.value)])
    problems = [
        f"{where}:{node.lineno} imports {module} at module level: use pytest.importorskip"
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for module in _imported_extras(node).values()
    ]
    functions: dict[str, tuple[ast.FunctionDef, set[str]]] = {}  # name -> (def, its marks)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = (node, {m for d in node.decorator_list if (m := _mark(d))})
        elif isinstance(node, ast.ClassDef):
            class_marks = {m for d in node.decorator_list if (m := _mark(d))}
            class_marks |= _pytestmark(node.body)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                    marks = {m for d in item.decorator_list if (m := _mark(d))}
                    functions[f"{node.name}.{item.name}"] = (item, marks | class_marks)
    fixtures = {name: f for f, _ in functions.values() if (name := _fixture_name(f))}
    needs = {name: _imported_extras(fn) for name, (fn, _) in functions.items()}
    uses = {
        name: {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in functions}
        | {fixtures[a.arg].name for a in fn.args.args if a.arg in fixtures}
        for name, (fn, _) in functions.items()
    }
    changed = True
    while changed:  # what a helper or fixture needs, its users need
        changed = False
        for name, used in uses.items():
            for other in used:
                for extra, module in needs[other].items():
                    if extra not in needs[name]:
                        needs[name][extra] = module
                        changed = True
    for name, (fn, marks) in functions.items():
        if not fn.name.startswith("test"):
            continue
        for extra, module in sorted(needs[name].items()):
            if extra not in _covered(marks | module_marks):
                problems.append(
                    f"{where}:{fn.lineno} {name} needs mlpipe[{extra}] ({module}) "
                    f"but is not marked `{extra}`"
                )
    return problems


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def test_every_test_that_imports_an_extra_is_marked() -> None:
    problems = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        problems += unmarked(path.read_text(), str(path.relative_to(REPO)))
    assert problems == []


UNMARKED = """
import pytest

@pytest.fixture
def booster():
    import xgboost
    return xgboost.Booster()

def _convert(model):
    from skl2onnx import convert_sklearn
    return convert_sklearn(model)

def test_direct():
    import torch

@pytest.mark.formats
def test_marked(booster):
    _convert(booster)

def test_through_a_fixture(booster):
    pass

@pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.nn)])
def test_through_a_helper(x):
    _convert(x)

@pytest.mark.kafka
def test_on_a_service():
    from confluent_kafka import Producer
"""


def test_the_static_check_finds_each_way_a_test_needs_an_extra() -> None:
    assert unmarked(UNMARKED, "t.py") == [
        "t.py:13 test_direct needs mlpipe[nn] (torch) but is not marked `nn`",
        "t.py:20 test_through_a_fixture needs mlpipe[formats] (xgboost) but is not marked "
        "`formats`",
        "t.py:24 test_through_a_helper needs mlpipe[formats] (skl2onnx) but is not marked "
        "`formats`",
    ]
    assert unmarked("import onnx\n", "m.py") == [
        "m.py:1 imports onnx at module level: use pytest.importorskip"
    ]
    assert (
        unmarked(
            'import pytest\npytest.importorskip("torch")\ndef test_t():\n import torch\n', "s.py"
        )
        == []
    )
