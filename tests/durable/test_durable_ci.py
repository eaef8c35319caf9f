"""CI side: the Redis fixture fails (never skips) without redis-server; the installer is idempotent; a worker a
failed test leaves running is reaped after that test, not garbage collected during a later one."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import durable_support
import pytest
from durable_support import RedisServer, reap_workers, server_pid, spawn_worker
from script_runner import ROOT, run_command

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out


def test_redis_fixture_fails_with_install_advice_when_the_binary_is_missing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # a PATH with python but without redis-server
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bin_dir)}
    proc = run_command(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/durable/test_durable_stores.py::test_redis_rejects_an_empty_namespace",
            "-p",
            "no:cacheprovider",
            "-rA",
        ],
        stdin=None,
        timeout=300,
        env=env,
    )
    assert proc.returncode != 0, proc.stdout
    assert "redis-server is not installed" in proc.stdout
    assert "scripts/services/redis.sh" in proc.stdout
    assert "1 error" in proc.stdout and "skipped" not in proc.stdout


def test_install_redis_script_is_a_no_op_when_redis_server_is_present() -> None:
    assert shutil.which("redis-server"), "run scripts/services/redis.sh first"
    proc = run_command(
        ["bash", str(ROOT / "scripts" / "services" / "redis.sh")], stdin=None, timeout=60, cwd=None, env=os.environ
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""


def test_a_redis_server_whose_port_another_run_took_moves_and_never_talks_to_the_other(
    redis_binary: str, tmp_path: Path
) -> None:
    """Parallel test runs share 16600-16699: a start must not mistake another run's server for its own."""
    other = RedisServer(redis_binary, tmp_path / "other").start()
    try:
        ours = RedisServer(redis_binary, tmp_path / "ours")
        ours.port = other.port  # as if the other run bound the port between our free check and our start
        ours.start()
        try:
            assert ours.port != other.port and ours.process is not None
            assert server_pid(ours.port) == ours.process.pid
            assert other.process is not None and server_pid(other.port) == other.process.pid
        finally:
            ours.stop()
        pinned = RedisServer(redis_binary, tmp_path / "pinned", port=other.port)  # a restart cannot move
        with pytest.raises(RuntimeError, match=f"port {other.port}"):
            pinned.start()
        assert pinned.process is None
    finally:
        other.stop()


def test_a_worker_left_running_is_killed_and_its_pipes_closed_by_the_reaper(tmp_path: Path) -> None:
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(600)\n", encoding="utf-8")
    worker = spawn_worker("ignored", worker=sleeper)  # as a test that fails before finish() leaves it
    assert worker.poll() is None and [worker] == durable_support.SPAWNED
    reap_workers()
    assert worker.returncode is not None and worker.returncode < 0  # killed, and reaped
    assert worker.stdout is not None and worker.stdout.closed
    assert worker.stderr is not None and worker.stderr.closed
    assert durable_support.SPAWNED == []
