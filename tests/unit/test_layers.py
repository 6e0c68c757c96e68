"""Dependencies inside ``mlpipe`` run one way, and packages keep their private modules.

Every ``import mlpipe.X`` / ``from mlpipe.X import`` anywhere in a module counts
(module level, inside a function, under ``TYPE_CHECKING``): a lazy import still
is a dependency. A package may import its own layer or lower ones, and the
packages of one layer may not import each other in a cycle.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "platform" / "mlpipe"

LAYERS: list[set[str]] = [
    {"config", "errors"},
    {"routing", "windows", "engines", "tasks"},
    {"registry", "features", "predlog", "warehouse", "security"},
    {"monitoring"},
    {"deployments"},
    {"serving", "demo", "stack", "export"},
]
LAYER = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted module) for every mlpipe import in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "mlpipe":
                names = [f"mlpipe.{alias.name}" for alias in node.names]
            else:
                names += [f"{node.module}.{alias.name}" for alias in node.names]
            yield from ((node.lineno, n) for n in names if n.startswith("mlpipe"))
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("mlpipe"))


def _edges(root: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """(importer package, imported package) -> where, for imports across packages."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel == Path("__init__.py"):
            continue
        source = rel.parts[0].removesuffix(".py")
        for line, module in _imports(path):
            parts = module.split(".")
            if len(parts) > 1 and parts[1] in LAYER and parts[1] != source:
                places = edges.setdefault((source, parts[1]), [])
                if f"{rel}:{line}" not in places:
                    places.append(f"{rel}:{line}")
    return edges


def upward_imports(root: Path = PACKAGE) -> list[str]:
    """Every import of a higher layer, as 'file:line source -> target'."""
    return [
        f"{where} {source} -> {target}"
        for (source, target), places in _edges(root).items()
        if LAYER[target] > LAYER.get(source, len(LAYERS))
        for where in places
    ]


def test_every_package_has_a_layer() -> None:
    packages = {
        p.name.removesuffix(".py")
        for p in PACKAGE.iterdir()
        if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").exists())
    }
    assert packages - set(LAYER) == set(), "add the new package to LAYERS"


def test_no_upward_import() -> None:
    assert upward_imports() == []


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for source, target in _edges():
        graph.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted(p for p in graph if reaches(p, p, {p}))
    assert cycles == []


def _private_imports(root: Path) -> list[str]:
    """Imports of another package's private module (``mlpipe.pkg._mod``) under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        own = path.relative_to(PACKAGE).parts[0] if path.is_relative_to(PACKAGE) else None
        for line, module in _imports(path):
            parts = module.split(".")
            if any(part.startswith("_") for part in parts[2:]) and parts[1] != own:
                found.append(f"{path.relative_to(REPO)}:{line} {module}")
    return found


@pytest.mark.parametrize("root", ["platform/mlpipe", "cli", "bentos", "bench"])
def test_no_import_of_another_package_private_module(root: str) -> None:
    assert _private_imports(REPO / root) == []


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    """The check itself: a new registry module importing deployments is reported."""
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "_read.py").write_text(
        "def f():\n    from mlpipe.deployments import Deployment\n"
    )
    assert upward_imports(tmp_path) == ["registry/_read.py:2 registry -> deployments"]


SERVING = PACKAGE / "serving"
_GLOBAL_RUNTIME = frozenset({"current", "set_current", "_current"})


def _runtime_global_uses(node: ast.AST) -> list[str]:
    """The names of the process-wide runtime ``node`` uses: ``_runtime.current``, an
    import of ``current`` from serving, a ``global _current``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return [node.attr] if node.value.id == "_runtime" and node.attr in _GLOBAL_RUNTIME else []
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mlpipe.serving"):
        return [a.name for a in node.names if a.name in _GLOBAL_RUNTIME]
    if isinstance(node, ast.Global):
        return [name for name in node.names if name in _GLOBAL_RUNTIME]
    return []


def global_runtime_reads(root: Path = SERVING) -> list[str]:
    """Every use of a process-wide runtime (``current()``, ``_runtime._current``) under ``root``.

    The request layers are given the runtime's slot when they are built
    (:class:`~mlpipe.serving.RuntimeSlot`); a request that fetched it from a
    module global instead would depend on whichever runtime the process
    published last, and its tests on publishing one.
    """
    found = [
        (str(path.relative_to(root)), node.lineno, name)
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        for name in _runtime_global_uses(node)
    ]
    return [f"{where}:{line} {name}" for where, line, name in sorted(found)]


def test_no_request_reads_a_process_wide_runtime() -> None:
    assert global_runtime_reads() == []


def test_a_request_time_read_of_the_global_runtime_is_caught(tmp_path: Path) -> None:
    """The check itself: a layer that fetches the runtime per request is reported."""
    (tmp_path / "_gate.py").write_text(
        "from mlpipe.serving import _runtime\n"
        "from mlpipe.serving._runtime import current\n\n"
        "async def gate(scope):\n"
        "    global _current\n"
        "    rt = _runtime.current()\n"
        "    return _runtime._current\n"
    )
    assert global_runtime_reads(tmp_path) == [
        "_gate.py:2 current",
        "_gate.py:5 _current",
        "_gate.py:6 current",
        "_gate.py:7 _current",
    ]


# -- no module changes a third-party module or class for everyone --

# None is left (issue 31, item 1): the last, uvicorn.Config (for the head guard), went when
# mlpipe's own worker started uvicorn with the guard as its protocol (decision 039).


def _third_party_names(tree: ast.Module) -> dict[str, str]:
    """The names a module binds to what it imports from outside mlpipe: name -> dotted path."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if not _ours(a.name):
                    bound = a.asname or a.name.split(".")[0]
                    names[bound] = a.name if a.asname else bound
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not _ours(node.module):
            names |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
    return names


def _resolve(dotted: str) -> object:
    """The object a dotted path names (a module, or an attribute of one); raises if none."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr)
        return found
    raise ImportError(dotted)


def _shared(target: ast.Attribute, imported: dict[str, str]) -> bool:
    """Whether ``target``'s owner is a third-party module or class (what every caller sees).

    An instance the library hands out for its users to fill (BentoML's ``server_context``,
    which a worker fills) is not; an owner that cannot be resolved counts as shared."""
    root = _root(target)
    if root not in imported:
        return False
    owner = ast.unparse(target.value)
    try:
        found = _resolve(imported[root] + owner[len(root) :])
    except (ImportError, AttributeError):
        return True
    return isinstance(found, ModuleType | type)


def _ours(module: str | None) -> bool:
    return module is not None and (module == "mlpipe" or module.startswith("mlpipe."))


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _assigned_attributes(node: ast.AST) -> Iterator[ast.expr]:
    """The ``x.y`` targets ``node`` assigns to (``=``, ``+=``, annotated, ``setattr(x, ...)``)."""
    if isinstance(node, ast.Assign):
        yield from (t for t in node.targets if isinstance(t, ast.Attribute))
    elif isinstance(node, ast.AugAssign | ast.AnnAssign) and isinstance(node.target, ast.Attribute):
        yield node.target
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "setattr"
        and node.args
    ):
        yield ast.Attribute(value=node.args[0], attr="<setattr>", ctx=ast.Store())


def third_party_replacements(root: Path = PACKAGE) -> set[str]:
    """``path name.attr`` for every assignment to an attribute of an imported third-party
    module or class under ``root``: a global patch that changes it for every caller."""
    found: set[str] = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        imported = _third_party_names(tree)
        for node in ast.walk(tree):
            for target in _assigned_attributes(node):
                if _shared(target, imported):
                    found.add(f"{path.relative_to(root)} {ast.unparse(target)}")
    return found


def test_no_module_replaces_a_third_party_name() -> None:
    assert third_party_replacements() == set()


def test_a_global_patch_is_caught(tmp_path: Path) -> None:
    """The check itself: assigning to an imported module's or class's attribute is reported
    (one it cannot resolve too); an attribute of one's own object, or of an instance a
    library hands out to be filled, is not."""
    (tmp_path / "_patch.py").write_text(
        "import bentoml\n"
        "import uvicorn.config\n"
        "from uvicorn import Config as C\n"
        "from bentoml import server_context\n"
        "from mlpipe.serving import _runtime\n\n"
        "class Mine:\n"
        "    pass\n\n"
        "def install(f):\n"
        "    bentoml.Service.to_asgi = f\n"
        "    setattr(C, 'http', 'h11')\n"
        "    Mine.x = 1\n"
        "    _runtime.slot = None\n"
        "    uvicorn.config.HTTP_PROTOCOLS = {}\n"
        "    bentoml.no_such_name.x = 1\n"
        "    server_context.worker_index = 1\n"
    )
    assert third_party_replacements(tmp_path) == {
        "_patch.py bentoml.Service.to_asgi",
        "_patch.py C.<setattr>",
        "_patch.py uvicorn.config.HTTP_PROTOCOLS",
        "_patch.py bentoml.no_such_name.x",
    }
