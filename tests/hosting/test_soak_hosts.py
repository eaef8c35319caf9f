"""Smoke run of ``benchmarks/soak_hosts.py``: every host served as a subprocess, no figure checked."""

from __future__ import annotations

import json
from pathlib import Path

from script_runner import assert_ok, run_script

ROOT = Path(__file__).resolve().parents[2]


def test_soak_hosts_quick_runs_every_host_and_reclaims_the_paused_conversations() -> None:
    """Tiny sizes; only that each host answered every conversation right and released the unanswered ones."""
    done = run_script(ROOT / "benchmarks" / "soak_hosts.py", "--quick", timeout=300)
    out = assert_ok(done)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [row["host"] for row in rows] == ["responses", "agui", "devui"], out
    for row in rows:
        assert row["answered"] > 0 and row["wrong"] == 0, (row, done.stderr)  # stderr says why one went wrong
        assert row["live_last"] == 0, row  # answered conversations keep no instance
        assert row["paused_live_before_after_ttl"] == [5, 1], row  # the unanswered five went within one TTL
        assert "rss_slope_steady_kb_per_1000" in row and len(row["steady_rss_mb_by_quarter"]) == 5, row
        assert row["concurrent_rate_per_s"] <= 25, row  # --quick paces at 20 a second (--rate)
