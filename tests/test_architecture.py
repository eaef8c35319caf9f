"""The package's layout: modules import each other without cycles, each has one stated job and stays small.

Module names below are dotted paths inside the package: ``_workflow``, ``_durable.redis_store``, ``hosting.agui``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "agent_framework_functional"
MAX_LINES = 600  # split at seams, not at a count: _core_compat.py keeps every private name of core and the hosts
# The deferred imports: from a workflow instance back to its chat adapter (as_agent), and the Postgres
# outage error, which subclasses psycopg's (an optional dependency), imported on the first failure.
DEFERRED_ALLOWED = {("_workflow", "_agent"), ("_durable.postgres_schema", "_durable.postgres_errors")}
# Every touch of core's private API sits here (AGENTS.md, Architecture).
CORE_PRIVATE_ALLOWED = {"_core_compat"}
# Host packages' private API, each pinned by a test that names it (AGENTS.md's module table).
HOST_PRIVATE_ALLOWED = {"hosting.agui", "hosting._agui_approvals", "hosting._devui_store"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1] or ["__init__"]
    return ".".join(parts)


def _paths() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _modules(*, hosting: bool = False) -> dict[str, ast.Module]:
    return {
        name: ast.parse(path.read_text(encoding="utf-8"))
        for name, path in _paths().items()
        if hosting or not name.startswith("hosting")
    }


def _package_of(name: str, path: Path) -> list[str]:
    """The dotted package a module's relative imports start from."""
    parts = name.split(".") if name != "__init__" else []
    return parts if path.name == "__init__.py" else parts[:-1]


def _resolve(name: str, node: ast.ImportFrom) -> str | None:
    """The package module a relative ``from`` import names (``None`` for absolute imports)."""
    if node.level == 0:
        return None
    base = _package_of(name, _paths()[name])
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    target = ".".join([*base, *(node.module.split(".") if node.module else [])])
    return target or "__init__"


def _is_type_checking_block(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _package_imports(name: str, statements: list[ast.stmt], *, top_level: bool, type_only: bool = False) -> set[str]:
    """Package modules imported by these statements (``if TYPE_CHECKING`` blocks only with ``type_only``)."""
    found: set[str] = set()
    for node in statements:
        if _is_type_checking_block(node) and not type_only:
            continue
        if isinstance(node, ast.ImportFrom) and (target := _resolve(name, node)) is not None:
            found.add(target)
        if top_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                found |= _package_imports(name, [child], top_level=top_level, type_only=type_only)
    return found


def _deferred_imports(name: str, tree: ast.Module) -> set[str]:
    everything = _package_imports(name, list(tree.body), top_level=False)
    return everything - _package_imports(name, list(tree.body), top_level=True)


def _module_graph(*, type_only: bool = False) -> dict[str, set[str]]:
    return {
        name: _package_imports(name, list(tree.body), top_level=True, type_only=type_only)
        for name, tree in _modules().items()
    }


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other, directly or not (sorted names, groups sorted)."""
    reach = {node: _reachable(graph, node) for node in graph}
    groups = {tuple(sorted(n for n in reach[node] if node in reach[n])) for node in graph if node in reach[node]}
    return sorted(list(group) for group in groups)


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own_names(tree: ast.Module) -> set[str]:
    """Every name a module defines: functions, classes, assigned names and attributes, parameters."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _private_reads(name: str, tree: ast.Module) -> set[str]:
    """The private names of other modules this module reads (package modules and core)."""
    own = _own_names(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            core = node.level == 0 and (node.module or "").split(".")[0] == "agent_framework"
            if node.level == 0 and not core:
                continue
            found |= {alias.name for alias in node.names if _is_private(alias.name)}
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _is_private(node.attr):
            on_self = isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}
            if not on_self and node.attr not in own:
                found.add(node.attr)
    return found


def test_module_level_imports_have_no_cycle() -> None:
    graph = _module_graph()
    assert {"_workflow", "_agent", "_durable.redis_store"} <= set(graph)  # the walk sees the package
    assert "_durable.redis_store" in graph["_durable.redis_checkpoint"]  # and resolves imports in a subpackage
    assert _find_cycle(graph) is None


def test_imports_have_no_cycle_counting_type_only_ones() -> None:
    # Type-only imports (``if TYPE_CHECKING``) count too; an import inside a function does not (a deferred
    # import is the one allowed way back, e.g. ``FunctionalWorkflow.as_agent``).
    graph = _module_graph(type_only=True)
    assert "_store" in graph["_authority_protocol"]  # the walk sees type-only imports
    # The one way back: ``FunctionalWorkflow.as_agent`` returns the agent (its annotation; the class is
    # imported in the method).
    assert "_agent" not in _module_graph()["_workflow"]
    graph["_workflow"].discard("_agent")
    assert _cycles(graph) == []


@pytest.mark.slow
def test_the_core_imports_no_backend() -> None:
    # A backend (``_durable/``) implements the core's protocols (``_store``, ``_step_cache``); the core asks
    # for an optional capability through them and never imports a backend, type-only or deferred imports
    # included. Only ``__init__`` re-exports the backends' public classes.
    core = {name for name in _modules() if not name.startswith("_durable") and name != "__init__"}
    found = {
        (name, target)
        for name in core
        for target in _package_imports(name, list(_modules()[name].body), top_level=False, type_only=True)
        if target.startswith("_durable")
    }
    assert found == set()
    assert any(t.startswith("_durable") for t in _module_graph()["__init__"])  # the walk sees such imports


def test_the_walker_finds_a_cycle_when_there_is_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_deferred_imports_are_only_the_documented_one() -> None:
    deferred = {(name, target) for name, tree in _modules().items() for target in _deferred_imports(name, tree)}
    assert deferred == DEFERRED_ALLOWED
    graph = _module_graph()
    # The deferred import goes back up the layers: the target does import the importer at module level.
    assert "_workflow" in graph["_agent_run"] and "_agent_run" in graph["_agent"]


def test_agent_and_chat_do_not_import_the_store_modules() -> None:
    graph = _module_graph()
    for name in ("_agent", "_agent_plan", "_agent_run", "_chat", "_workflow"):
        assert not {target for target in graph[name] if target == "_store" or target.startswith("_durable")}, name


def test_the_durable_backends_live_in_one_folder() -> None:
    flat = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert not [name for name in flat if name.startswith(("_sqlite", "_redis", "_postgres"))], flat
    assert (PACKAGE / "_durable" / "redis_store.py").is_file()


def test_every_module_states_its_job_and_stays_small() -> None:
    too_long: dict[str, int] = {}
    for name, path in _paths().items():
        text = path.read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(text))
        if name == "__init__":
            continue
        assert docstring, f"{name} has no module docstring"
        first = docstring.splitlines()[0]
        assert first.endswith("."), f"{name}: the first docstring line states its job in one sentence"
        lines = len(text.splitlines())
        if lines > MAX_LINES:
            too_long[name] = lines
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


def test_no_module_reads_another_modules_private_names() -> None:
    found: set[tuple[str, str]] = set()
    for name, tree in _modules(hosting=True).items():
        if name in CORE_PRIVATE_ALLOWED or name in HOST_PRIVATE_ALLOWED:
            continue
        found |= {(name, attr) for attr in _private_reads(name, tree)}
    assert found == set(), "read a public name, or move the touch into _core_compat.py"


def test_the_private_read_check_sees_both_forms() -> None:
    tree = ast.parse("from ._x import _y\nfrom ._store import ContinuationStore\n\ndef f(w):\n    return w._active\n")
    assert _private_reads("_workflow", tree) == {"_y", "_active"}
    own = ast.parse(
        "class A:\n    def __init__(self):\n        self._n = 1\n\n    def eq(self, o):\n        return o._n\n"
    )
    assert _private_reads("_workflow", own) == set()


# What a reader of the repository cannot open: another repository's design notes, numbered items or issues.
UNOPENABLE = re.compile(r"design(\.md| rule)|\bitems? [0-9]|\bissues? #?[0-9]", re.IGNORECASE)
DOCUMENTED = (
    "agent_framework_functional", "tests", "samples", "benchmarks", "scripts", "docs", "README.md", "AGENTS.md",
)  # fmt: skip


def test_no_reference_to_what_a_reader_cannot_open() -> None:
    root = PACKAGE.parent
    paths = [root / name for name in DOCUMENTED]
    files = [path for path in paths if path.is_file()]
    files += [
        path
        for folder in paths
        if folder.is_dir()
        for path in folder.rglob("*")
        if path.suffix in {".py", ".md", ".sh", ".js", ".toml"} and "node_modules" not in path.parts
    ]
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if UNOPENABLE.search(line)
    ]
    assert len(files) > 100 and not found, found


# A Python file the package, README, docs/ or AGENTS.md names must be one of the repository's (a core function is
# cited by name, never by the file it sits in); README, docs/ and AGENTS.md also name tests and samples.
PY_FILE = re.compile(r"[\w./-]*\w\.py\b")


def test_named_python_files_are_in_the_repository() -> None:
    root = PACKAGE.parent
    skip = {".venv", "node_modules", ".git"}
    present = {path.name for path in root.rglob("*.py") if not skip & set(path.relative_to(root).parts)}
    docs = sorted((root / "docs").rglob("*.md"))
    texts = [root / "README.md", root / "AGENTS.md", *docs, *sorted(PACKAGE.rglob("*.py"))]
    missing = sorted(
        f"{path.relative_to(root)}: {name}"
        for path in texts
        for name in set(PY_FILE.findall(path.read_text(encoding="utf-8")))
        if name.rsplit("/", 1)[-1] not in present
    )
    assert not missing, missing


_GLOBALS_PROBE = """
import importlib, sys
hosts = ["agent_framework_devui", "agent_framework_ag_ui", "agent_framework_hosting_responses", "agent_framework_a2a",
         "a2a", "mcp"]
import agent_framework, agent_framework._workflows._functional, agent_framework._workflows._checkpoint_encoding
for host in hosts:
    importlib.import_module(host)
def snapshot():
    return {name: dict(vars(module)) for name, module in list(sys.modules.items())
            if module is not None and name.split(".")[0] in {"agent_framework", *hosts}
            and not name.startswith("agent_framework_functional")}
before = snapshot()
import agent_framework_functional
for sub in ("hosting", "hosting.devui", "hosting.agui", "hosting.responses", "hosting.a2a", "hosting.mcp"):
    importlib.import_module("agent_framework_functional." + sub)
changed = sorted(f"{module}.{key}" for module, names in before.items()
                 for key, value in names.items()
                 if key in vars(sys.modules[module]) and vars(sys.modules[module])[key] is not value
                 and key not in {"__warningregistry__"})
print(len(before), changed)
"""


@pytest.mark.slow
def test_importing_the_package_changes_no_global_of_core_or_of_a_host_package() -> None:
    # Code that uses core or a host package directly in the same process must run as without the package.
    done = subprocess.run([sys.executable, "-c", _GLOBALS_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    modules, changed = done.stdout.strip().split(" ", 1)
    assert int(modules) > 50  # core and the host packages were loaded before the package
    assert changed == "[]", changed
