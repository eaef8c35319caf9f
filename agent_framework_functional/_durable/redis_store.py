"""RedisContinuationStore, and the Redis client the Redis stores build from a URL (a pooled client, retried once)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

from .._errors import ContinuationStoreDurabilityError
from .._store import DEFAULT_RETENTION_SECONDS, DEFAULT_TTL_SECONDS, ContinuationRecord, TimedStore, duration_seconds

if TYPE_CHECKING:
    from redis.asyncio import Redis

RedisDurability = Literal["fsync", "best_effort"]
RedisDurabilityMode = Literal["appendfsync_always", "waitaof", "best_effort"]
DEFAULT_WAITAOF_TIMEOUT_SECONDS = 5.0
DEFAULT_MAX_CONNECTIONS = 50
DEFAULT_POOL_TIMEOUT_SECONDS = 20.0

DURABILITY_ADVICE = (
    "Configure Redis to fsync every write to its append-only file (redis.conf: 'appendonly yes' and "
    "'appendfsync always', or CONFIG SET appendonly yes / CONFIG SET appendfsync always then CONFIG REWRITE, "
    "since a restart forgets what CONFIG SET alone changed), or run Redis 7.2 or "
    "newer with 'appendonly yes' so the store can confirm each write with WAITAOF. To accept that a Redis crash "
    "can lose claims (a spent token could then resume a second time), pass durability='best_effort' to "
    "RedisContinuationStore."
)

# KEYS[1] = record key. ARGV = now, new status, expiry horizon, claimer ('' for none).
# Compare-and-set on status == issued. A claim retried after a lost reply finds its own claim (same
# claimer secret) and wins again, so retrying a claim once on a connection error is safe.
_TRANSITION = """
local status = redis.call('HGET', KEYS[1], 'status')
if ARGV[4] ~= '' and status == ARGV[2] and redis.call('HGET', KEYS[1], 'claimed_by') == ARGV[4] then return 1 end
if status ~= 'issued' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'expires_at')) <= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'updated_at', ARGV[1], 'claimed_by', ARGV[4])
return 1
"""

# KEYS[1] = record key. ARGV = now, claimer. Compare-and-set on status == claimed by this claimer.
_RELEASE = """
if ARGV[2] == '' or redis.call('HGET', KEYS[1], 'status') ~= 'claimed' then return 0 end
if redis.call('HGET', KEYS[1], 'claimed_by') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'status', 'issued', 'updated_at', ARGV[1], 'claimed_by', '')
return 1
"""

# KEYS[1] = record key. ARGV = now, checkpoint id, since. 1: the restore may go on (an issued record
# was abandoned, or none concerns it); 0: a claim at or after `since` won (the restore lost).
_SUPERSEDE = """
if redis.call('HGET', KEYS[1], 'checkpoint_id') ~= ARGV[2] then return 1 end
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'issued' then
  redis.call('HSET', KEYS[1], 'status', 'abandoned', 'updated_at', ARGV[1])
  return 1
end
if status == 'claimed' and tonumber(redis.call('HGET', KEYS[1], 'updated_at')) >= tonumber(ARGV[3]) then return 0 end
return 1
"""

# KEYS[1] = record key. ARGV[1] = physical TTL in ms, ARGV[2..] = field/value pairs. Insert only.
_INSERT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""


def pooled_client(
    url: str,
    *,
    max_connections: int,
    pool_timeout: float | timedelta,
    owner: str,
    on_connect: Callable[[Any], Awaitable[None]] | None = None,
) -> Any:
    """A pooled client for ``url``; a command failing on a connection error is retried once (so must be idempotent)."""
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
    return Redis.from_pool(pool)  # pyright: ignore[reportUnknownMemberType]


def text(value: Any) -> str:
    """A Redis reply value (``bytes`` or ``str``) as text."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


async def probe_durability(execute: Callable[..., Awaitable[Any]], waitaof_timeout_ms: int) -> RedisDurabilityMode:
    """How the server behind ``execute`` (a client, or a new connection) keeps writes; raises if it could lose them."""
    from redis.exceptions import ResponseError

    try:
        config: Any = await execute("CONFIG", "GET", "append*")
    except ResponseError:  # CONFIG renamed away (unknown command) or denied by an ACL (NOPERM)
        settings: dict[str, str] | None = None
    else:
        pairs = config.items() if isinstance(config, dict) else zip(config[::2], config[1::2], strict=True)
        settings = {text(name): text(value) for name, value in pairs}
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


class RedisContinuationStore(TimedStore):
    """A :class:`ContinuationStore` on Redis, for workers on several machines.

    A record is one hash ``<namespace>:<token hash>`` expiring ``ttl + retention`` after its pause; each
    write is one Lua script on one key, so exactly one claimer wins. Expiry uses this process's clock; use
    one event loop. Needs the ``durable`` extra. See "Redis" in the docs.

    Durability: a claim Redis forgets in a crash makes a spent token resumable again, so with
    ``durability="fsync"`` each new connection and the first write check that Redis fsyncs what it
    acknowledges (``appendfsync always``, else ``WAITAOF`` per write on 7.2+); otherwise writes are refused.

    Args:
        client: A ``redis.asyncio.Redis`` (the caller closes it), or a URL (the store owns a pooled client;
            close it with :meth:`aclose`).

    Keyword Args:
        ttl: How long a token is accepted after its pause; default 24 hours.
        retention: How long Redis keeps a record after it expires; default 24 hours.
        namespace: Key prefix, so several applications can share one Redis database.
        clock: Seconds since the epoch; defaults to ``time.time``.
        durability: ``"fsync"`` (default) or ``"best_effort"`` (accept the server's persistence as is).
        max_connections: With a URL: connections in the pool (default 50).
        pool_timeout: With a URL: how long an operation waits for a connection (default 20 s).
        waitaof_timeout: How long a write waits for ``WAITAOF`` (default 5 s).

    Raises:
        ImportError: The ``redis`` package is not installed.
        ValueError: ``ttl``, ``retention``, ``pool_timeout`` or ``waitaof_timeout`` is not a positive
            duration of at most ten years, ``namespace`` is empty, ``durability`` is unknown, or
            ``max_connections`` is not a positive integer.
        TypeError: A duration is neither a number nor a ``timedelta``.
    """

    def __init__(
        self,
        client: Redis | str,
        *,
        ttl: float | timedelta = DEFAULT_TTL_SECONDS,
        retention: float | timedelta = DEFAULT_RETENTION_SECONDS,
        namespace: str = "agent_framework_functional:continuation",
        clock: Callable[[], float] = time.time,
        durability: RedisDurability = "fsync",
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool_timeout: float | timedelta = DEFAULT_POOL_TIMEOUT_SECONDS,
        waitaof_timeout: float | timedelta = DEFAULT_WAITAOF_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(ttl, retention, clock)
        if not namespace:
            raise ValueError("namespace must be a non-empty key prefix, for example 'myapp:continuation'.")
        if durability not in ("fsync", "best_effort"):
            raise ValueError(f"durability must be 'fsync' (the default) or 'best_effort', got {durability!r}.")
        self._waitaof_timeout_ms = max(1, int(duration_seconds(waitaof_timeout, "waitaof_timeout") * 1000))
        self.namespace = namespace
        self.durability: RedisDurability = durability
        self._mode: RedisDurabilityMode | None = "best_effort" if durability == "best_effort" else None
        self._check_lock = asyncio.Lock()
        on_connect = None if durability == "best_effort" else self._check_connection
        self._owns_client = isinstance(client, str)
        if isinstance(client, str):
            client = pooled_client(
                client,
                max_connections=max_connections,
                pool_timeout=pool_timeout,
                owner="RedisContinuationStore",
                on_connect=on_connect,
            )
        elif on_connect is not None:  # after the caller's own hook, on every connection its pool opens from now on
            kwargs: dict[str, Any] = client.connection_pool.connection_kwargs
            previous = kwargs.get("redis_connect_func")

            async def check(connection: Any) -> None:  # async def: redis-py awaits only a coroutine function
                await self._check_connection(connection, previous)

            kwargs["redis_connect_func"] = check
        self._client: Any = client
        self._transition_script: Any = client.register_script(_TRANSITION)
        self._insert_script: Any = client.register_script(_INSERT)
        self._release_script: Any = client.register_script(_RELEASE)
        self._supersede_script: Any = client.register_script(_SUPERSEDE)

    async def check_durability(self) -> RedisDurabilityMode:
        """Check once that Redis keeps every acknowledged write through a crash; return how.

        Every write calls it first (remembered until a new connection's check fails); call it at start-up.

        Returns:
            ``"appendfsync_always"``, ``"waitaof"`` (each write confirmed with ``WAITAOF``), or
            ``"best_effort"`` (``durability="best_effort"``: nothing was checked).

        Raises:
            ContinuationStoreDurabilityError: With ``durability="fsync"``: AOF is off, or Redis
                cannot confirm writes with ``WAITAOF`` (older than 7.2, or AOF off) while ``CONFIG``
                does not show ``appendfsync always``.
            redis.RedisError: Redis cannot be reached.
        """
        if self._mode is not None:
            return self._mode
        async with self._check_lock:
            if self._mode is None:
                self._mode = await probe_durability(self._client.execute_command, self._waitaof_timeout_ms)
            return self._mode

    async def _check_connection(self, connection: Any, previous: Any = None) -> None:
        """redis-py's ``redis_connect_func``: set a new connection up, then probe it (closed if weak)."""
        if previous is None:
            await connection.on_connect()
        else:
            outcome = previous(connection)
            if inspect.isawaitable(outcome):
                await outcome

        async def execute(*args: Any) -> Any:
            await connection.send_command(*args)
            return await connection.read_response()

        try:
            self._mode = await probe_durability(execute, self._waitaof_timeout_ms)
        except ContinuationStoreDurabilityError:
            self._mode = None  # re-checked before the next write, on whichever connection it uses
            await connection.disconnect()
            raise

    def _key(self, token_hash: str) -> str:
        return f"{self.namespace}:{token_hash}"

    async def save(self, record: ContinuationRecord) -> None:
        """Insert a freshly issued record and, same round trip, its checkpoint's index (for :meth:`supersede`).

        Raises:
            ValueError: A record with this hash exists already.
            ContinuationStoreDurabilityError: Redis cannot keep the record through a crash, or did
                not confirm it in time (see :meth:`check_durability`); no token should be handed out.
        """
        fields = {**record.to_fields(), "updated_at": repr(record.created_at)}
        physical_ttl_ms = max(1, int((record.expires_at - self.now() + self._retention) * 1000))
        args: list[str | int] = [physical_ttl_ms]
        for name, value in fields.items():
            args.extend((name, value))
        index = (self._key(f"checkpoint:{record.checkpoint_id}"), record.token_hash, physical_ttl_ms)
        inserted = await self._write(self._insert_script, self._key(record.token_hash), args, "record", index=index)
        if not int(inserted):
            raise ValueError("A continuation with this token hash is already recorded; issue a new token.")

    async def get(self, token_hash: str) -> ContinuationRecord | None:
        """Return the record for ``token_hash`` (any status), or None."""
        raw = cast("dict[Any, Any]", await self._client.hgetall(self._key(token_hash)))
        if not raw:
            return None
        return ContinuationRecord.from_fields(token_hash, {text(key): value for key, value in raw.items()})

    async def claim(self, token_hash: str, *, claimer: str | None = None) -> bool:
        """Atomically move an ``issued``, unexpired record to ``claimed`` (one Lua script).

        Raises:
            ContinuationStoreDurabilityError: Redis cannot keep the claim through a crash, or did not
                confirm it in time; the resume must not run (the token may stay spent).
        """
        now = self.now()
        return await self._transition(token_hash, "claimed", now, now, claimer or "")

    async def release(self, token_hash: str, claimer: str) -> bool:
        """Atomically hand a claim back (``claimed`` -> ``issued``) for the run that claimed it (one Lua script).

        Raises:
            ContinuationStoreDurabilityError: Redis cannot keep the change through a crash, or did not
                confirm it in time.
        """
        args = [repr(self.now()), claimer]
        return bool(int(await self._write(self._release_script, self._key(token_hash), args, "release")))

    async def supersede(self, checkpoint_id: str, *, since: float) -> bool:
        """Atomically abandon the ``issued`` record of the pause saved in ``checkpoint_id`` (for its restore).

        Raises:
            ContinuationStoreDurabilityError: Redis cannot keep the change through a crash.
        """
        token_hash = await self._client.get(self._key(f"checkpoint:{checkpoint_id}"))
        if token_hash is None:
            return True
        args = [repr(self.now()), checkpoint_id, repr(since)]
        return bool(int(await self._write(self._supersede_script, self._key(text(token_hash)), args, "supersede")))

    async def abandon(self, token_hash: str, *, force: bool = False) -> bool:
        """Atomically move an ``issued`` record to ``abandoned`` (one Lua script).

        Raises:
            ContinuationStoreDurabilityError: Redis cannot keep the change through a crash, or did not
                confirm it in time; abandon again once Redis is healthy.
        """
        now = self.now()
        return await self._transition(token_hash, "abandoned", now, 0.0 if force else now, "")

    async def aclose(self) -> None:
        """Close the client if the store created it from a URL; a client passed in is left open."""
        if self._owns_client:
            await self._client.aclose()

    async def _transition(self, token_hash: str, status: str, now: float, horizon: float, claimer: str) -> bool:
        args = [repr(now), status, repr(horizon), claimer]
        return bool(int(await self._write(self._transition_script, self._key(token_hash), args, status)))

    async def _write(
        self, script: Any, key: str, args: list[Any], what: str, *, index: tuple[str, str, int] | None = None
    ) -> Any:
        """Run one write script (and the index ``SET``, same round trip), confirmed with WAITAOF in that mode."""
        waitaof = await self.check_durability() == "waitaof"
        if not waitaof and index is None:
            return await script(keys=[key], args=args)
        from redis.exceptions import ResponseError

        async with self._client.pipeline(transaction=False) as pipe:
            await script(keys=[key], args=args, client=pipe)
            if index is not None:
                pipe.set(index[0], index[1], px=index[2])
            if not waitaof:
                return (await pipe.execute())[0]
            pipe.execute_command("WAITAOF", 1, 0, self._waitaof_timeout_ms)
            try:
                *replies, acknowledged = await pipe.execute()
            except ResponseError as exc:
                if "WAITAOF" not in str(exc).upper():
                    raise
                raise ContinuationStoreDurabilityError(
                    f"Redis refused to confirm that the {what} write reached its append-only file ({exc}); "
                    f"treat it as failed. {DURABILITY_ADVICE}"
                ) from exc
        if int(acknowledged[0]) < 1:
            raise ContinuationStoreDurabilityError(
                f"Redis did not confirm within {self._waitaof_timeout_ms} ms that the {what} write reached its "
                "append-only file, so it could be lost in a crash; the operation counts as failed. Check the "
                "Redis server's disk, or raise waitaof_timeout."
            )
        return replies[0]
