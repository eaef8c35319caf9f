"""Smoke run of ``benchmarks/soak_hosts.py``: every host served as a subprocess, no figure checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_runner import assert_ok, env_without_openai, run_script

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

ROOT = Path(__file__).resolve().parents[2]


def test_soak_hosts_quick_runs_every_host_and_reclaims_the_paused_conversations_without_traffic() -> None:
    """Tiny sizes; only that each host answered every conversation right and released the unanswered ones
    with no request (the host's sweep task)."""
    env = {**env_without_openai(), "PYTHONPATH": str(ROOT)}  # this tree's package, whichever one is installed
    done = run_script(ROOT / "benchmarks" / "soak_hosts.py", "--quick", timeout=300, env=env)
    out = assert_ok(done)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [row["host"] for row in rows] == ["responses", "agui", "devui", "a2a", "mcp"], out
    for row in rows:
        assert row["answered"] > 0 and row["wrong"] == 0, (row, done.stderr)  # stderr says why one went wrong
        assert row["live_last"] == 0, row  # answered conversations keep no instance
        assert row["paused_live_before_after_idle"] == [5, 0], row  # the unanswered five went with no request
        assert row["reclaimed_without_traffic"] and row["store_after_idle"] == 0, row
        assert "rss_slope_second_half_kb_per_1000" in row, row
        assert "rss_slope_steady_kb_per_1000" in row and len(row["steady_rss_mb_by_quarter"]) == 5, row
        assert row["concurrent_rate_per_s"] <= 25, row  # --quick paces at 20 a second (--rate)
