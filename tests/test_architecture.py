"""The package's layout: modules import each other without cycles, each has one stated job and stays small."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agent_framework_functional"
MAX_LINES = 500  # "near 400": the longest modules carry long docstrings (run(), verify_*)
# The one deferred import: from a workflow instance back to its chat adapter (as_agent).
DEFERRED_ALLOWED = {("_workflow", "_agent")}


def _modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(PACKAGE.glob("*.py"))}


def _is_type_checking_block(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _package_imports(statements: list[ast.stmt], *, top_level: bool) -> set[str]:
    """Package modules imported by these statements (at run time; ``if TYPE_CHECKING`` blocks excluded)."""
    found: set[str] = set()
    for node in statements:
        if _is_type_checking_block(node):
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module)
        if top_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                found |= _package_imports([child], top_level=top_level)
    return found


def _deferred_imports(tree: ast.Module) -> set[str]:
    everything = _package_imports(list(tree.body), top_level=False)
    return everything - _package_imports(list(tree.body), top_level=True)


def _module_graph() -> dict[str, set[str]]:
    return {name: _package_imports(list(tree.body), top_level=True) for name, tree in _modules().items()}


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


def test_module_level_imports_have_no_cycle() -> None:
    graph = _module_graph()
    assert "_workflow" in graph and "_agent" in graph  # the walk sees the package
    assert _find_cycle(graph) is None


def test_the_walker_finds_a_cycle_when_there_is_one() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_deferred_imports_are_only_the_documented_one() -> None:
    deferred = {(name, target) for name, tree in _modules().items() for target in _deferred_imports(tree)}
    assert deferred == DEFERRED_ALLOWED
    graph = _module_graph()
    # The deferred import goes back up the layers: the target does import the importer at module level.
    assert "_workflow" in graph["_agent_run"] and "_agent_run" in graph["_agent"]


def test_agent_and_chat_do_not_import_the_store_modules() -> None:
    graph = _module_graph()
    stores = {"_store", "_sqlite_store", "_redis_store", "_postgres_store", "_postgres_checkpoint", "_postgres_schema"}
    for name in ("_agent", "_agent_plan", "_agent_run", "_chat", "_workflow"):
        assert not graph[name] & stores, name


def test_every_module_states_its_job_and_stays_small() -> None:
    for name, tree in _modules().items():
        if name == "__init__":
            continue
        docstring = ast.get_docstring(tree)
        assert docstring, f"{name} has no module docstring"
        first = docstring.splitlines()[0]
        assert first.endswith("."), f"{name}: the first docstring line states its job in one sentence"
        lines = len((PACKAGE / f"{name}.py").read_text(encoding="utf-8").splitlines())
        assert lines <= MAX_LINES, f"{name}.py has {lines} lines"


def test_hosting_modules_state_their_job_and_stay_small() -> None:
    modules = sorted((PACKAGE / "hosting").glob("*.py"))
    assert any(path.stem == "responses" for path in modules)
    for path in modules:
        text = path.read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(text))
        assert docstring, f"hosting/{path.name} has no module docstring"
        assert docstring.splitlines()[0].endswith("."), f"hosting/{path.name}: state its job in one sentence"
        assert len(text.splitlines()) <= MAX_LINES, f"hosting/{path.name} is too long"
