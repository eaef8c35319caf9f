"""Fixtures of the durable-continuation tests: a real redis-server, both stores, shared checkpoints.

The ``redis_server`` fixture starts Debian's ``redis-server`` binary on a free loopback port for the
whole session and stops it afterwards. It fails (never skips) when the binary is missing: run
``scripts/services/redis.sh`` or ``apt-get install -y redis-server``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import durable_workflows
import pytest
from agent_framework import FileCheckpointStorage
from durable_support import FakeClock, StoreSpec, close_store

from agent_framework_functional import ContinuationStore


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """A real redis-server on 127.0.0.1 for this test session; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "redis-server is not installed, and the durable tests need a real one. Install it with "
            "`bash scripts/services/redis.sh` (or `apt-get install -y redis-server`) and run the tests again.",
            pytrace=False,
        )
    port = _free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not _ping(port):
            if process.poll() is not None or time.monotonic() > deadline:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                pytest.fail(f"redis-server did not start on port {port}: {err}", pytrace=False)
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


@pytest.fixture(autouse=True)
def _reset_workflow_effects() -> Iterator[None]:
    durable_workflows.EFFECTS.clear()
    durable_workflows.HOOKS.clear()
    yield
    durable_workflows.EFFECTS.clear()
    durable_workflows.HOOKS.clear()


@pytest.fixture(params=["sqlite", "redis"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    """How to open the store under test (each test runs once per store)."""
    if request.param == "sqlite":
        return StoreSpec("sqlite", str(tmp_path / "continuations.db"))
    url = request.getfixturevalue("redis_server")
    return StoreSpec("redis", url, namespace=f"aff-test:{uuid.uuid4().hex}")


@pytest.fixture
async def make_store(store_spec: StoreSpec) -> AsyncIterator[Callable[..., ContinuationStore]]:
    """Open (more) store objects on the same database; all are closed after the test."""
    opened: list[ContinuationStore] = []

    def make(**options: Any) -> ContinuationStore:
        store = store_spec.open(**options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await close_store(store)


@pytest.fixture
def store(make_store: Callable[..., ContinuationStore]) -> ContinuationStore:
    return make_store()


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints"


@pytest.fixture
def storage(checkpoint_dir: Path) -> FileCheckpointStorage:
    """A real FileCheckpointStorage in tmp_path, shared by every "process" of a test."""
    return FileCheckpointStorage(checkpoint_dir)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
