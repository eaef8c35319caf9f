"""Redis clients built from a URL time their writes with ``asyncio.timeout``: same timeout, same error, no task.

redis-py wraps each write in ``asyncio.wait_for`` (a task per command, which core's task factory also
tracks inside a workflow run); ``_durable.redis_store.timed_send_class`` keeps the timeout without the task.
A peer that accepts the connection but never reads makes the write (and the handshake) hang.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable, Iterator

import pytest
from durable_support import RedisServer
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent_framework_functional._durable.redis_store import pooled_client


@pytest.fixture
def silent_peer() -> Iterator[int]:
    """A TCP listener that accepts connections and never reads or answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()


async def test_a_write_that_hangs_times_out_with_redis_error_and_closes_its_connection(silent_peer: int) -> None:
    client = pooled_client(
        f"redis://127.0.0.1:{silent_peer}/0?socket_timeout=0.3", max_connections=2, pool_timeout=1.0, owner="test"
    )
    try:
        with pytest.raises(RedisTimeoutError):
            await asyncio.wait_for(client.set("k", b"x" * (64 << 20)), timeout=30)
        connections = [*client.connection_pool._in_use_connections, *client.connection_pool._available_connections]  # pyright: ignore[reportPrivateUsage]
        assert all(not connection.is_connected for connection in connections)
    finally:
        await client.aclose()


async def test_commands_run_with_the_timed_connection_class(redis_servers: Callable[..., RedisServer]) -> None:
    server = redis_servers("--appendonly", "no", "--save", "")
    client = pooled_client(f"{server.url}?socket_timeout=5", max_connections=2, pool_timeout=1.0, owner="test")
    try:
        assert await client.set("k", b"v") and await client.get("k") == b"v"
        name = client.connection_pool.connection_class.__name__
        assert name == ("TimedSendConnection" if sys.version_info >= (3, 11) else "Connection")
    finally:
        await client.aclose()
