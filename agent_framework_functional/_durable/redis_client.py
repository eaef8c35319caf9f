"""Redis connections for the stores: a pooled client retried once, and the persistence probe."""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Literal, cast

from .._errors import ContinuationStoreDurabilityError
from .._store import duration_seconds

RedisDurabilityMode = Literal["appendfsync_always", "waitaof", "best_effort"]
"""How a :class:`RedisContinuationStore` keeps its writes: what its ``check_durability()`` found."""

DEFAULT_MAX_CONNECTIONS = 50
"""Connections in the pool of a store created from a URL; further operations wait for a free one."""

DEFAULT_POOL_TIMEOUT_SECONDS = 20.0
"""How long an operation of a store created from a URL waits for a free connection before failing."""

DURABILITY_ADVICE = (
    "Configure Redis to fsync every write to its append-only file (redis.conf: 'appendonly yes' and "
    "'appendfsync always', or CONFIG SET appendonly yes / CONFIG SET appendfsync always then CONFIG REWRITE, "
    "since a restart forgets what CONFIG SET alone changed), or run Redis 7.2 or "
    "newer with 'appendonly yes' so the store can confirm each write with WAITAOF. To accept that a Redis crash "
    "can lose claims (a spent token could then resume a second time), pass durability='best_effort' to "
    "RedisContinuationStore."
)


def pooled_client(
    url: str,
    *,
    max_connections: int,
    pool_timeout: float | timedelta,
    owner: str,
    on_connect: Callable[[Any], Awaitable[None]] | None = None,
) -> Any:
    """Return a ``redis.asyncio.Redis`` client for ``url`` that owns a ``BlockingConnectionPool``.

    Past ``max_connections`` commands wait up to ``pool_timeout`` for a connection. A command failing
    with a connection error (say, after a server restart) is retried once on a fresh connection, so
    every command sent must be safe to run again. ``on_connect`` is redis-py's ``redis_connect_func``
    (it must ``await connection.on_connect()`` first); ``owner`` names the class in errors.

    Raises:
        ImportError: The ``redis`` package is not installed.
        ValueError: ``max_connections`` is not a positive integer, or ``pool_timeout`` is not a
            positive duration of at most ten years.
        TypeError: ``pool_timeout`` is neither a number nor a ``timedelta``.
    """
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"max_connections must be a positive integer, got {max_connections!r}.")
    wait = duration_seconds(pool_timeout, "pool_timeout")
    try:
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"{owner} needs the 'redis' package: pip install 'agent-framework-functional[durable]'."
        ) from exc
    options: dict[str, Any] = {"retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))}
    if on_connect is not None:
        options["redis_connect_func"] = on_connect
    pool = BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=wait, **options)  # pyright: ignore[reportUnknownMemberType]
    pool.connection_class = timed_send_class(pool.connection_class)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return Redis.from_pool(pool)  # pyright: ignore[reportUnknownMemberType]


_TIMED_SEND: dict[type, type] = {}


def timed_send_class(connection_class: type) -> type:
    """``connection_class`` whose writes time out under ``asyncio.timeout`` instead of ``asyncio.wait_for``.

    redis-py's ``wait_for`` wraps each write in a new task, which core's task factory tracks inside
    a run: a large share of a step's CPU with ``RedisCheckpointStorage`` (``benchmarks/README.md``).
    Unchanged before Python 3.11 (no ``asyncio.timeout``).
    """
    if sys.version_info < (3, 11):
        return connection_class
    found = _TIMED_SEND.get(connection_class)
    if found is None:
        found = _TIMED_SEND[connection_class] = type(
            f"TimedSend{connection_class.__name__}", (_TimedSendMixin, connection_class), {}
        )
    return found


class _TimedSendMixin:
    """See :func:`timed_send_class` (internal)."""

    socket_timeout: float | None

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        timeout = self.socket_timeout
        if not timeout:
            return await super().send_packed_command(command, check_health)  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
        from redis.exceptions import TimeoutError as RedisTimeoutError

        try:
            async with asyncio.timeout(timeout):  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
                self.socket_timeout = None  # redis-py then writes directly (it disconnects on any error)
                try:
                    await super().send_packed_command(command, check_health)  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
                finally:
                    self.socket_timeout = timeout
        except TimeoutError:
            raise RedisTimeoutError("Timeout writing to socket") from None


def text(value: Any) -> str:
    """Return a Redis reply value (``bytes`` or ``str``) as text."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


async def sorted_members(client: Any, key: str, *, as_text: bool = False) -> list[Any]:
    """Every member of the sorted set ``key``, oldest first; none when the key holds another type.

    ``as_text``: the members as text, leaving out those that are not UTF-8.
    """
    from redis.exceptions import ResponseError

    try:
        members = cast("list[Any]", await client.zrange(key, 0, -1))
    except ResponseError as exc:
        if str(exc).startswith("WRONGTYPE"):
            return []
        raise
    if not as_text:
        return members
    out: list[str] = []
    for member in members:
        try:
            out.append(text(member))
        except UnicodeDecodeError:
            continue
    return out


async def probe_durability(execute: Callable[..., Awaitable[Any]], waitaof_timeout_ms: int) -> RedisDurabilityMode:
    """How the server behind ``execute`` (a client, or one new connection) keeps writes through a crash.

    Raises:
        ContinuationStoreDurabilityError: It could lose acknowledged writes (see ``RedisContinuationStore``).
    """
    from redis.exceptions import ResponseError

    try:
        config: Any = await execute("CONFIG", "GET", "append*")
    except ResponseError:  # CONFIG renamed away (unknown command) or denied by an ACL (NOPERM)
        settings: dict[str, str] | None = None
    else:
        flat: list[Any] = (
            list(itertools.chain(*cast("dict[Any, Any]", config).items())) if isinstance(config, dict) else config
        )
        settings = {text(name): text(value) for name, value in zip(flat[::2], flat[1::2], strict=True)}
    if settings is not None:
        appendonly, appendfsync = settings.get("appendonly"), settings.get("appendfsync")
        if appendonly == "yes" and appendfsync == "always":
            return "appendfsync_always"
        if appendonly != "yes":
            raise ContinuationStoreDurabilityError(
                f"Redis runs with appendonly={appendonly!r}, so it persists writes at best in periodic "
                "snapshots: a crash or restart loses every claim since the last one, and a spent token could "
                "resume twice. "
                f"{DURABILITY_ADVICE}"
            )
    found = "CONFIG is not available to this client" if settings is None else "appendfsync is not 'always'"
    try:
        reply = await execute("WAITAOF", 1, 0, waitaof_timeout_ms)
    except ResponseError as exc:
        raise ContinuationStoreDurabilityError(
            f"Cannot tell whether Redis keeps writes through a crash ({found}), and WAITAOF failed: {exc}. "
            f"{DURABILITY_ADVICE}"
        ) from exc
    if int(reply[0]) < 1:
        raise ContinuationStoreDurabilityError(
            f"Redis did not confirm a local fsync with WAITAOF within {waitaof_timeout_ms} ms ({found}). "
            f"{DURABILITY_ADVICE}"
        )
    return "waitaof"
