"""``__all__`` says exactly what each package exports (issue 31 item 5).

The rule, for every package (a directory with ``__init__.py``) under
``platform/mlpipe`` and ``cli/mlpipe_cli``:

- Its **exports** are the names without a leading underscore that importing the
  package binds in its namespace, except

  - its own submodules and subpackages (``mlpipe.config`` is bound as ``config``
    by the import system, whoever imported it): they are reached as modules;
  - names its ``__init__.py`` imports from ``__future__``, ``typing``,
    ``typing_extensions`` or ``collections.abc`` (``annotations``,
    ``TYPE_CHECKING``, ``Any``): the vocabulary of its annotations;

  plus the names a module-level ``__getattr__`` provides on first use (PEP 562),
  which the package declares for type checkers with imports under
  ``if TYPE_CHECKING:``. Without a ``__getattr__``, such imports are for
  annotations only and export nothing.
- A package with exports has ``__all__``: a list of unique strings whose set is
  its exports, each of which ``getattr`` resolves (the lazy ones too: that
  imports what they need, bentoml for ``mlpipe.serving``, once).
- A package without exports (``mlpipe``, ``mlpipe_cli``, ``mlpipe_cli.commands``:
  their API is their modules) needs no ``__all__``; if it has one, it is empty.

Anything else a package's ``__init__.py`` binds (``import json``, a helper)
takes a leading underscore or moves out. Plain modules that declare
``__all__`` are held to the first half only: each name in it is bound at the
module's top level.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = [REPO / "platform" / "mlpipe", REPO / "cli" / "mlpipe_cli"]
TYPING_MODULES = {"__future__", "typing", "typing_extensions", "collections.abc"}


def _packages(root: Path) -> list[str]:
    """Dotted names of ``root`` and its packages; links (``_bundled``'s) are not followed."""
    found = []
    for init in sorted(root.rglob("__init__.py")):
        rel = init.parent.relative_to(root.parent)
        if not any(p.is_symlink() for p in [init.parent, *init.parent.parents]):
            found.append(".".join(rel.parts))
    return found


PACKAGES = [name for root in ROOTS for name in _packages(root)]


def _type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in {
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    }


def _bound_by_import(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.asname or a.name.partition(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [a.asname or a.name for a in node.names]
    return []


def _declared(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(typing vocabulary, lazy exports) of a package's ``__init__.py``."""
    typing_names: set[str] = set()
    checked_only: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in TYPING_MODULES:
            typing_names.update(_bound_by_import(node))
        elif _type_checking(node):
            assert isinstance(node, ast.If)
            for inner in node.body:
                checked_only.update(_bound_by_import(inner))
    lazy = any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
    return typing_names, checked_only if lazy else set()


def exports(package: ModuleType) -> set[str]:
    """The names ``package`` exports, by the rule in this module's docstring."""
    assert package.__file__ is not None
    typing_names, lazy = _declared(ast.parse(Path(package.__file__).read_text()))
    bound = set()
    for name, value in vars(package).items():
        own_module = (
            isinstance(value, ModuleType) and value.__name__ == f"{package.__name__}.{name}"
        )
        if not name.startswith("_") and not own_module and name not in typing_names:
            bound.add(name)
    return bound | lazy


def all_problems(package: ModuleType) -> list[str]:
    """What is wrong with ``package.__all__``, in words; empty when it matches."""
    expected = exports(package)
    declared = getattr(package, "__all__", None)
    if declared is None:
        return [f"no __all__; it exports {sorted(expected)}"] if expected else []
    if not isinstance(declared, list) or not all(isinstance(n, str) for n in declared):
        return [f"__all__ is not a list of names: {declared!r}"]
    problems = []
    if len(set(declared)) != len(declared):
        problems.append(f"__all__ repeats {sorted({n for n in declared if declared.count(n) > 1})}")
    if missing := sorted(expected - set(declared)):
        problems.append(f"exported but not in __all__: {missing}")
    if extra := sorted(set(declared) - expected):
        problems.append(f"in __all__ but not exported: {extra}")
    if unresolved := [n for n in declared if not hasattr(package, n)]:
        problems.append(f"in __all__ but not defined: {unresolved}")
    return problems


def test_the_walk_finds_the_packages() -> None:
    assert {"mlpipe", "mlpipe.serving", "mlpipe.warehouse", "mlpipe_cli.commands"} <= set(PACKAGES)
    assert not [p for p in PACKAGES if "_bundled" in p]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_what_the_package_exports(name: str) -> None:
    assert all_problems(importlib.import_module(name)) == []


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        else:
            names.update(_bound_by_import(node))
            if isinstance(node, ast.If | ast.Try):  # bound on one branch or the other
                branches = [*node.body, *node.orelse]
                if isinstance(node, ast.Try):
                    branches += [*node.finalbody, *(s for h in node.handlers for s in h.body)]
                names |= _top_level_names(ast.Module(body=branches, type_ignores=[]))
    return names


def _declared_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                return list(ast.literal_eval(node.value))
    return None


MODULES = sorted(
    p
    for root in ROOTS
    for p in root.rglob("*.py")
    if p.name != "__init__.py" and "__all__" in p.read_text()
)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_modules_all_names_only_what_it_binds(path: Path) -> None:
    tree = ast.parse(path.read_text())
    declared = _declared_all(tree)
    if declared is None:
        return
    assert len(set(declared)) == len(declared), f"__all__ repeats a name: {declared}"
    assert sorted(set(declared) - _top_level_names(tree)) == []


# -- the checks themselves, on a package made for the purpose --


def _package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, init: str) -> ModuleType:
    root = tmp_path / "exportcheck"
    (root / "_impl").mkdir(parents=True)
    (root / "_impl" / "__init__.py").write_text("def shown(): ...\ndef hidden(): ...\n")
    (root / "lazy.py").write_text("def later(): ...\n")
    (root / "__init__.py").write_text(init)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.partition(".")[0] == "exportcheck"]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module("exportcheck")


GOOD = """
from __future__ import annotations
from typing import TYPE_CHECKING, Any
from exportcheck._impl import shown
import exportcheck.lazy as _lazy_module

if TYPE_CHECKING:
    from exportcheck.lazy import later

def __getattr__(name: str) -> Any:
    if name == "later":
        return _lazy_module.later
    raise AttributeError(name)

__all__ = ["later", "shown"]
"""


def test_a_package_by_the_rule_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = _package(tmp_path, monkeypatch, GOOD)
    assert exports(package) == {"later", "shown"}  # not lazy (a submodule), Any, annotations
    assert all_problems(package) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("import shown", "import shown, hidden"), "exported but not in __all__: ['hidden']"),
        (('"later", "shown"', '"later", "shown", "gone"'), "in __all__ but not exported: ['gone']"),
        (('"later", "shown"', '"later", "shown", "shown"'), "__all__ repeats ['shown']"),
        (('if name == "later":', 'if name == "never":'), "in __all__ but not defined: ['later']"),
        (("__all__ = ", "_all = "), "no __all__; it exports ['later', 'shown']"),
        (("from typing import", "import json\nfrom typing import"), "not in __all__: ['json']"),
    ],
)
def test_a_mismatch_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: tuple[str, str], problem: str
) -> None:
    package = _package(tmp_path, monkeypatch, GOOD.replace(*change))
    assert any(problem in p for p in all_problems(package)), all_problems(package)


def test_type_checking_imports_without_getattr_export_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_getattr = GOOD.split("def __getattr__")[0] + '__all__ = ["shown"]\n'
    package = _package(tmp_path, monkeypatch, without_getattr)
    assert exports(package) == {"shown"}  # `later` is for annotations only
    assert all_problems(package) == []
