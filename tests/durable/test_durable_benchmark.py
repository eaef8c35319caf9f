"""Benchmarks/bench_durable.py runs (``--quick``); its figures are read by people, not asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

# The table beside LangGraph runs on Python 3.11 and newer only (see benchmarks/bench_peers.py).
LANGGRAPH_ROWS: tuple[str, ...] = (
    "SQLite+file vs AsyncSqliteSaver, cpu",
    "SQLite+file vs AsyncSqliteSaver, wall",
    "Postgres same worker, cpu",
    "Postgres same worker, wall",
    "Postgres other worker, cpu",
    "Postgres other worker, wall",
)
if sys.version_info < (3, 11):
    LANGGRAPH_ROWS = ()


def test_bench_durable_quick_runs_against_the_test_servers(redis_server: str, postgres_server: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_durable.py"),
            "--quick",
            "--redis-url",
            redis_server,
            "--postgres-url",
            postgres_server,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    rows = {line.rsplit(None, 1)[0].strip() for line in proc.stdout.splitlines() if line and line[-1].isdigit()}
    for label in (
        "SQLite",
        "Redis",
        "in-memory, no store, 1 process",
        "in-memory fast path + SQLite, 1 process",
        "in-memory fast path + Redis, 1 process",
        "durable SQLite, 1 process",
        "durable SQLite, 2 processes",
        "durable Redis, 1 process",
        "durable Redis, 2 processes",
        "SQLite, 64 concurrent",
        "Redis, 64 concurrent",
        "durable SQLite, same worker",
        "durable SQLite, fresh worker",
        "durable Redis, same worker",
        "durable Redis, fresh worker",
        "Postgres",
        "in-memory fast path + Postgres, 1 process",
        "durable Postgres, 1 process",
        "durable Postgres, 2 processes",
        "Postgres, 64 concurrent",
        "durable Postgres, same worker",
        "durable Postgres, fresh worker",
        *LANGGRAPH_ROWS,
    ):
        assert any(row.startswith(label) for row in rows), (label, proc.stdout)
    if sys.version_info < (3, 11):  # LangGraph's async functional API needs 3.11: the script says so
        assert "LangGraph columns skipped" in proc.stdout and "needs Python 3.11" in proc.stdout, proc.stdout
    else:
        assert "LangGraph RedisSaver: not measured" in proc.stdout  # Debian's Redis has no RedisJSON/RediSearch
