"""Item 7: samples/multi_worker_approval.py runs end to end as a user runs it (two real worker processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_multi_worker_approval_sample() -> None:
    env = {key: value for key, value in os.environ.items() if key != "OPENAI_API_KEY"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "samples" / "multi_worker_approval.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.stdout.splitlines() == [
        "worker one: paused for approval of 'refund 40 EUR for order A-1001'; token handed out",
        "worker two: resumed a pause it never saw -> paid: refund 40 EUR for order A-1001",
        "worker one: replay of the same token rejected: ContinuationAuthorityError",
    ]
