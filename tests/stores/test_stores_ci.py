"""The Postgres side of CI: the fixture fails (never skips) without PostgreSQL; the installer is idempotent."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import postgres_server
import pytest
from script_runner import ROOT, run_command

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out


def test_postgres_advice_names_the_installer_when_the_binaries_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_server, "postgres_bin_dir", lambda: None)
    advice = postgres_server.missing_postgres_advice()
    assert advice is not None and "scripts/services/postgres.sh" in advice


def test_install_postgres_script_is_a_no_op_when_postgresql_is_present() -> None:
    assert postgres_server.postgres_bin_dir() is not None, "run scripts/services/postgres.sh first"
    proc = run_command(
        ["bash", str(ROOT / "scripts" / "services" / "postgres.sh")], stdin=None, timeout=60, cwd=None, env=os.environ
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""


def test_a_custom_store_factory_runs_the_conformance_suite(tmp_path: Path) -> None:
    """The docs' recipe: name your factory in AFF_STORE_FACTORY and run tests/stores with ``-k custom``."""
    (tmp_path / "my_store_factory.py").write_text(
        "from agent_framework_functional import SQLiteContinuationStore\n"
        "def open_store(workdir):\n"
        "    return lambda **options: SQLiteContinuationStore(workdir / 'mine.db', **options)\n",
        encoding="utf-8",
    )
    env = {**os.environ, "AFF_STORE_FACTORY": "my_store_factory:open_store", "PYTHONPATH": str(tmp_path)}
    proc = run_command(
        [
            sys.executable, "-m", "pytest", "tests/stores/test_continuation_store_contract.py",
            "-k", "custom and (claim or supersede)", "-q", "-p", "no:cacheprovider",
        ],
        stdin=None, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout and "failed" not in proc.stdout and "skipped" not in proc.stdout
