"""Samples/multi_worker_approval.py runs end to end as a user runs it (two real worker processes)."""

from __future__ import annotations

from script_runner import ROOT, run_script


def test_multi_worker_approval_sample() -> None:
    proc = run_script(ROOT / "samples" / "multi_worker_approval.py", stdin=None, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.stdout.splitlines() == [
        "worker one: paused for approval of 'refund 40 EUR for order A-1001'; token handed out",
        "worker two: resumed a pause it never saw -> paid: refund 40 EUR for order A-1001",
        "worker one: replay of the same token rejected: ContinuationAuthorityError",
    ]
