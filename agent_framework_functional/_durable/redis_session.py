"""RedisSessionStore: bounded sessions (and AG-UI thread snapshots) on Redis, for workers on several machines."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .._store import DEFAULT_TTL_SECONDS
from .redis_store import DEFAULT_MAX_CONNECTIONS, DEFAULT_POOL_TIMEOUT_SECONDS, pooled_client
from .redis_store import text as as_text
from .session_store import (
    DEFAULT_MAX_STORED_SESSIONS,
    DEFAULT_SESSION_PURGE_INTERVAL_SECONDS,
    DurableSessionStore,
    LimitedRecords,
    SessionLimits,
    group_key,
    record_key,
)

DEFAULT_SESSION_NAMESPACE = "aff:sessions"


class RedisRecords(LimitedRecords):
    """Records as Redis strings with a Redis TTL, plus a sorted set (key -> expiry) that bounds their number."""

    def __init__(self, client: Any, *, owns_client: bool, namespace: str, limits: SessionLimits) -> None:
        super().__init__(limits)
        self.client, self._owns_client, self.namespace = client, owns_client, namespace
        self._index = f"{namespace}:index"

    def _key(self, group: str, key: str) -> str:
        return f"{self.namespace}:{group_key(group)[:32]}:{record_key(group, key)}"

    async def read(self, group: str, key: str) -> str | None:
        value = await self.client.get(self._key(group, key))
        return None if value is None else as_text(value)

    async def write(self, group: str, key: str, text: str) -> None:
        now = self.now()
        stored = self._key(group, key)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.set(stored, text, px=max(1, int(self.ttl * 1000)))
            pipe.zadd(self._index, {stored: now + self.ttl})
            await pipe.execute()
        if self.purges.due(now):
            await self.purge()

    async def remove(self, group: str, key: str) -> bool:
        return await self._delete([self._key(group, key)]) == 1

    async def remove_group(self, group: str) -> int:
        prefix = re.sub(r"([\\*?\[\]^-])", r"\\\1", self.namespace)  # a key prefix, not a glob pattern
        return await self._delete(
            [key async for key in self.client.scan_iter(match=f"{prefix}:{group_key(group)[:32]}:*")]
        )

    async def _delete(self, keys: list[Any]) -> int:
        if not keys:
            return 0
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(*keys)
            pipe.zrem(self._index, *keys)
            deleted, _ = await pipe.execute()
        return int(deleted)

    async def count(self) -> int:
        """Records the index holds now (expired ones not yet purged included)."""
        return int(await self.client.zcard(self._index))

    async def purge(self) -> int:
        """Forget expired keys (Redis deleted them already) and delete the oldest past ``max_entries``."""
        now = self.now()
        self.purges.ran(now)
        dropped = int(await self.client.zremrangebyscore(self._index, "-inf", now))
        excess = int(await self.client.zcard(self._index)) - self.max_entries
        if excess > 0:
            oldest = [member for member, _ in await self.client.zpopmin(self._index, excess)]
            if oldest:
                await self.client.delete(*oldest)
            dropped += len(oldest)
        return dropped

    async def aclose(self) -> None:
        if self._owns_client:
            await self.client.aclose()


class RedisSessionStore(DurableSessionStore[RedisRecords]):
    """Core's ``SessionStore`` on Redis: sessions shared by workers on several machines, kept across restarts.

    Each session is a Redis string of JSON expiring ``ttl`` after its last write (last writer wins); a
    sorted set ``<namespace>:index`` bounds their number. A write lost in a Redis crash loses that turn,
    never grants a second resume, so Redis's default persistence is enough. Needs the ``durable`` extra.
    See "Run it in production" in the docs.

    Args:
        client: A ``redis.asyncio.Redis`` (the caller closes it), or a URL (the store owns a pooled client;
            close it with :meth:`aclose`).

    Keyword Args:
        ttl: How long a session is kept after its last write; default 24 hours. Keep it at least the token's.
        max_entries: Sessions (and snapshots) kept at most (default 1,000,000).
        namespace: Key prefix, so several applications can share one Redis database.
        purge_interval: Least time between two trims to ``max_entries`` (default 60 s); ``None``: none
            (call :meth:`purge_expired`; Redis still expires each key).
        clock: Seconds since the epoch; defaults to ``time.time``.
        max_connections: With a URL: connections in the store's pool (default 50).
        pool_timeout: With a URL: how long an operation waits for a free connection (default 20 s).

    Raises:
        ImportError: The ``redis`` package is not installed.
        ValueError: A duration is not positive (at most ten years), or ``max_entries`` /
            ``max_connections`` is not a positive integer.
        TypeError: A duration is neither a number nor a ``timedelta``.
    """

    def __init__(
        self,
        client: Any,
        *,
        ttl: float | timedelta = DEFAULT_TTL_SECONDS,
        max_entries: int = DEFAULT_MAX_STORED_SESSIONS,
        namespace: str = DEFAULT_SESSION_NAMESPACE,
        purge_interval: float | timedelta | None = DEFAULT_SESSION_PURGE_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.time,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool_timeout: float | timedelta = DEFAULT_POOL_TIMEOUT_SECONDS,
    ) -> None:
        limits = SessionLimits.checked(ttl, max_entries, purge_interval, clock)
        owns = isinstance(client, str)
        if owns:
            client = pooled_client(
                client, max_connections=max_connections, pool_timeout=pool_timeout, owner="RedisSessionStore"
            )
        super().__init__(RedisRecords(client, owns_client=owns, namespace=namespace, limits=limits))

    async def aclose(self) -> None:
        """Close the client if the store created it from a URL; a client passed in is left open."""
        await self.records.aclose()
