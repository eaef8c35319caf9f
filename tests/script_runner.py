"""Run the project's scripts (samples, benchmarks, installers, pytest itself) in a subprocess, as a user would.

Shared by the test modules of ``tests/`` and its sub-folders: ``tests/conftest.py`` is loaded for every
test under ``tests/``, and pytest's default ``prepend`` import mode puts its folder on ``sys.path``,
so ``from script_runner import ...`` works from any of them (no ``__init__.py`` needed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository root (scripts run with it as their working directory unless told otherwise)."""


def env_without_openai(env: Mapping[str, str] | None = None, *, prefix: str | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) without ``OPENAI_API_KEY``, or without every key
    starting with ``prefix``: the scripts then use their deterministic local agents, and no network."""
    source = os.environ if env is None else env
    if prefix is not None:
        return {key: value for key, value in source.items() if not key.startswith(prefix)}
    return {key: value for key, value in source.items() if key != "OPENAI_API_KEY"}


def run_command(
    argv: Sequence[str],
    *,
    stdin: str | None = "",
    timeout: float = 60,
    cwd: Path | None = ROOT,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end with text output captured (never raising on a non-zero exit).

    ``stdin`` is the text fed to it (``None``: the test's own stdin); ``env`` defaults to this process's
    environment without ``OPENAI_API_KEY``.
    """
    return subprocess.run(
        list(argv),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=dict(env) if env is not None else env_without_openai(),
        check=False,
    )


def run_script(
    path: Path,
    *args: str,
    stdin: str | None = "",
    timeout: float = 60,
    cwd: Path | None = ROOT,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the Python script ``path`` with ``sys.executable`` (see :func:`run_command`)."""
    return run_command([sys.executable, str(path), *args], stdin=stdin, timeout=timeout, cwd=cwd, env=env)


def assert_ok(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert that ``proc`` exited 0 (showing both streams when not) and return its stdout."""
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout
