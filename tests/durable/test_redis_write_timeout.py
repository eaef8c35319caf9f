"""A Redis client built from a URL times out a write that hangs, with redis-py's error, and drops the connection.

A peer that accepts the connection but never reads makes the write (and the handshake) hang.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest
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
