"""Every Python code block of README.md and docs/ runs, as written, with pytest-examples.

A block runs as a module named ``docs_example`` (so an ``if __name__ == "__main__":`` line that would start a
server is skipped), in a temporary working folder, with ``REDIS_URL`` / ``POSTGRES_URL`` set to this test
session's real servers when the block reads them. The host pages (docs/hosts/) are run, and then driven over
HTTP, by tests/hosting/test_docs_hosts.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pytest_examples import CodeExample, EvalExample, find_examples

ROOT = Path(__file__).resolve().parent.parent
HOST_PAGES = ROOT / "docs" / "hosts"
EXAMPLES = [
    example for example in find_examples(ROOT / "README.md", ROOT / "docs") if HOST_PAGES not in example.path.parents
]


def run_example(example: CodeExample, eval_example: EvalExample) -> dict[str, object]:
    """Run one block as the module ``docs_example`` and return its globals (pytest-examples replaces ``__main__``)."""
    main = sys.modules["__main__"]
    try:
        return eval_example.run(example, module_globals={"__name__": "docs_example"})
    finally:
        sys.modules["__main__"] = main


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example_runs(
    example: CodeExample,
    eval_example: EvalExample,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    if "REDIS_URL" in example.source:
        monkeypatch.setenv("REDIS_URL", request.getfixturevalue("redis_server"))
    if "POSTGRES_URL" in example.source:
        monkeypatch.setenv("POSTGRES_URL", request.getfixturevalue("postgres_server"))
    module_globals = run_example(example, eval_example)
    assert module_globals, f"{example} defined nothing"


def test_every_python_block_is_found() -> None:
    # A block fenced as ```py, ```python or ```python3 is an example; other fences (bash, text, js) are not.
    readme_blocks = [example for example in EXAMPLES if example.path.name == "README.md"]
    assert readme_blocks, "README.md has no Python example"
