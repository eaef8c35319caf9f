"""Every Python code block of README.md and docs/ runs, as written, with pytest-examples.

A block runs as a module named ``docs_example`` (so an ``if __name__ == "__main__":`` line that would start a
server is skipped), in a temporary working folder, with ``REDIS_URL`` / ``POSTGRES_URL`` set to this test
session's real servers when the block reads them. The host pages (docs/hosts/) are run, and then driven over
HTTP, by tests/hosting/test_docs_hosts.py. The lines under ``if __name__ == "__main__":`` run too, with the
calls that would serve or drive a client replaced by recorders, so a typo there fails.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import secrets
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from pytest_examples import CodeExample, EvalExample, find_examples

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
HOST_PAGES = ROOT / "docs" / "hosts"
EXAMPLES = [example for example in find_examples(*DOCS) if HOST_PAGES not in example.path.parents]
# A fence pytest-examples collects: ``` then py/python (any case, optionally {.py ...}); other fences are not run.
PYTHON_FENCE = re.compile(r"^ *(`{3,}|~{3,}) *\{?\.?py", re.IGNORECASE | re.MULTILINE)
# The calls a block may make only under ``if __name__ == "__main__":`` (each serves or drives until stopped).
SERVING_CALLS = ("uvicorn.run", "agent_framework_functional.hosting.devui.serve_devui", "asyncio.run")


class ServedOutsideMain(Exception):
    """A block started a server at import time: put that line under ``if __name__ == "__main__":``."""


@contextlib.contextmanager
def serving_calls(record: list[tuple[str, tuple[Any, ...]]] | None) -> Iterator[None]:
    """Replace the serving calls: each raises ``ServedOutsideMain`` (record is None) or is recorded."""

    def stand_in(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            for arg in args:
                if asyncio.iscoroutine(arg):
                    arg.close()
            if record is None:
                raise ServedOutsideMain(f"{name}(...) ran outside `if __name__ == '__main__':`")
            record.append((name, args))

        return call

    with contextlib.ExitStack() as stack:
        for name in SERVING_CALLS if record is not None else SERVING_CALLS[:2]:  # asyncio.run runs the examples
            stack.enter_context(mock.patch(name, stand_in(name)))
        yield


def run_example(example: CodeExample, eval_example: EvalExample) -> dict[str, Any]:
    """Run one block as the module ``docs_example`` and return its globals; a failure names the block."""
    return _run(example, eval_example, "docs_example", None)


def guarded_lines_run(example: CodeExample, eval_example: EvalExample) -> list[tuple[str, tuple[Any, ...]]]:
    """Run a block as ``__main__`` with its serving calls recorded; return what it would have served or run."""
    record: list[tuple[str, tuple[Any, ...]]] = []
    namespace = _run(example, eval_example, "__main__", record)
    if "app" in namespace:
        served = [args[0] for name, args in record if name == "uvicorn.run"]
        assert served and all(app is namespace["app"] for app in served), f"{example} serves no `app` it built"
    return record


def _run(
    example: CodeExample, eval_example: EvalExample, name: str, record: list[tuple[str, tuple[Any, ...]]] | None
) -> dict[str, Any]:
    # pytest-examples replaces sys.modules["__main__"] (put back here) and rebuilds the traceback, which pytest
    # cannot always format (INTERNALERROR, ending the session): a failure is one line naming the block instead.
    main = sys.modules["__main__"]
    failure = ""
    if name != "__main__":  # the block's classes name their module: pickle and core's decoder import it
        sys.modules[name] = _ModuleOfTheBlock(name)
    try:
        with serving_calls(record):
            return eval_example.run(example, module_globals={"__name__": name})
    except Exception as error:
        tb, line = error.__traceback__, 0
        while tb is not None:
            line, tb = tb.tb_lineno, tb.tb_next
        failure = f"{example} (line {line} of the block): {type(error).__name__}: {error}"
    finally:
        sys.modules["__main__"] = main
        sys.modules.pop("docs_example", None)
    pytest.fail(failure, pytrace=False)


class _ModuleOfTheBlock(types.ModuleType):
    """``docs_example`` while a block runs: its names are those of the module pytest-examples runs as ``__main__``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.modules["__main__"], name)


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
    monkeypatch.setenv("CHECKPOINT_KEY", base64.b64encode(secrets.token_bytes(32)).decode())  # a host's secret
    module_globals = run_example(example, eval_example)
    assert module_globals, f"{example} defined nothing"


GUARDED = [example for example in find_examples(*DOCS) if 'if __name__ == "__main__":' in example.source]


@pytest.mark.parametrize("example", GUARDED, ids=str)
def test_the_lines_under_main_run(
    example: CodeExample, eval_example: EvalExample, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # never connected to: the serving calls are recorded
    monkeypatch.setenv("CHECKPOINT_KEY", base64.b64encode(secrets.token_bytes(32)).decode())
    assert guarded_lines_run(example, eval_example), f"{example}: nothing runs under `if __name__ == '__main__':`"


def test_every_python_block_is_collected_and_only_docs_have_them() -> None:
    # A fence pytest-examples would not collect (``~~~python``, four backticks) would publish an untested block.
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        assert len(PYTHON_FENCE.findall(text)) == len(list(find_examples(path))), path
    for name in ("AGENTS.md", "CHANGELOG.md", "SECURITY.md", "benchmarks/README.md"):
        assert not PYTHON_FENCE.search((ROOT / name).read_text(encoding="utf-8")), f"{name}: move the example to docs/"
    assert any(example.path.name == "README.md" for example in EXAMPLES)
