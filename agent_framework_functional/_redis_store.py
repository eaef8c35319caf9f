"""RedisContinuationStore: a continuation store for several machines (``redis`` asyncio client)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from ._store import DEFAULT_RETENTION_SECONDS, DEFAULT_TTL_SECONDS, ContinuationRecord, duration_seconds

if TYPE_CHECKING:
    from redis.asyncio import Redis

# KEYS[1] = record key. ARGV = now, new status, expiry horizon. Compare-and-set on status == issued.
_TRANSITION = """
if redis.call('HGET', KEYS[1], 'status') ~= 'issued' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'expires_at')) <= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'updated_at', ARGV[1])
return 1
"""

# KEYS[1] = record key. ARGV[1] = physical TTL in ms, ARGV[2..] = field/value pairs. Insert only.
_INSERT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class RedisContinuationStore:
    """A :class:`ContinuationStore` on Redis, for workers on several machines.

    Each record is one hash under ``<namespace>:<token hash>``. Inserting, claiming and abandoning
    are each a single Lua script, which Redis runs atomically: a claim is a compare-and-set on
    ``status == "issued"`` and the expiry, so exactly one caller wins however many race. Keys carry
    a Redis TTL of ``ttl + retention``, so Redis deletes old records by itself. Expiry is judged by
    this process's clock (:meth:`now`); keep worker clocks in sync (NTP) when TTLs are short.
    Each script touches one key, so the store also works on Redis Cluster. Use a store from one
    event loop: the asyncio client's connections belong to the loop that opened them.

    Needs the ``redis`` package (``pip install "agent-framework-functional[durable]"``).

    Args:
        client: A ``redis.asyncio.Redis`` client (the caller owns and closes it), or a URL such as
            ``"redis://localhost:6379/0"`` (the store owns the client; close it with :meth:`aclose`).

    Keyword Args:
        ttl: How long a token is accepted after its pause (seconds or ``timedelta``); default 24 hours.
        retention: How long Redis keeps a record after it expires (seconds or ``timedelta``);
            default 24 hours.
        namespace: Key prefix, so several applications can share one Redis database.
        clock: Seconds since the epoch; defaults to ``time.time``.

    Raises:
        ImportError: The ``redis`` package is not installed.
        ValueError: ``ttl`` or ``retention`` is not a positive duration of at most ten years, or
            ``namespace`` is empty.
        TypeError: ``ttl`` or ``retention`` is neither a number nor a ``timedelta``.

    Examples:
        .. code-block:: python

            store = RedisContinuationStore("redis://cache:6379/0", ttl=timedelta(hours=4))
            wf = review.build(checkpoint_storage=shared_storage, continuation_store=store)
    """

    def __init__(
        self,
        client: Redis | str,
        *,
        ttl: float | timedelta = DEFAULT_TTL_SECONDS,
        retention: float | timedelta = DEFAULT_RETENTION_SECONDS,
        namespace: str = "agent_framework_functional:continuation",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ttl = duration_seconds(ttl, "ttl")
        self._retention = duration_seconds(retention, "retention")
        if not namespace:
            raise ValueError("namespace must be a non-empty key prefix, for example 'myapp:continuation'.")
        self.namespace = namespace
        self._clock = clock
        if isinstance(client, str):
            try:
                from redis.asyncio import Redis as _Redis
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise ImportError(
                    "RedisContinuationStore needs the 'redis' package: "
                    "pip install 'agent-framework-functional[durable]'."
                ) from exc
            self._client: Any = _Redis.from_url(client)  # pyright: ignore[reportUnknownMemberType]
            self._owns_client = True
        else:
            self._client = client
            self._owns_client = False
        self._transition_script: Any = self._client.register_script(_TRANSITION)
        self._insert_script: Any = self._client.register_script(_INSERT)

    @property
    def ttl_seconds(self) -> float:
        """How long an issued token is accepted, in seconds."""
        return self._ttl

    def now(self) -> float:
        """Return the store's clock, seconds since the epoch."""
        return self._clock()

    def _key(self, token_hash: str) -> str:
        return f"{self.namespace}:{token_hash}"

    async def save(self, record: ContinuationRecord) -> None:
        """Insert a freshly issued record with a Redis TTL of ``ttl + retention``.

        Args:
            record: The record; its ``token_hash`` must be new.

        Raises:
            ValueError: A record with this hash exists already.
        """
        fields = {**record.to_fields(), "updated_at": repr(record.created_at)}
        physical_ttl_ms = max(1, int((record.expires_at - self.now() + self._retention) * 1000))
        args: list[str | int] = [physical_ttl_ms]
        for name, value in fields.items():
            args.extend((name, value))
        inserted = await self._insert_script(keys=[self._key(record.token_hash)], args=args)
        if not int(inserted):
            raise ValueError("A continuation with this token hash is already recorded; issue a new token.")

    async def get(self, token_hash: str) -> ContinuationRecord | None:
        """Return the record for ``token_hash`` (any status), or None; never mutates.

        Args:
            token_hash: Hex sha256 of the token's secret.

        Returns:
            The record, or None (also once Redis has deleted it after ``ttl + retention``).
        """
        raw = cast("dict[Any, Any]", await self._client.hgetall(self._key(token_hash)))
        if not raw:
            return None
        return ContinuationRecord.from_fields(token_hash, {_text(key): value for key, value in raw.items()})

    async def claim(self, token_hash: str) -> bool:
        """Atomically move an ``issued``, unexpired record to ``claimed`` (one Lua script).

        Args:
            token_hash: Hex sha256 of the token's secret.

        Returns:
            True for the one caller that claimed it; False when it is missing, not ``issued`` or expired.
        """
        now = self.now()
        return await self._transition(token_hash, "claimed", now, now)

    async def abandon(self, token_hash: str, *, force: bool = False) -> bool:
        """Atomically move an ``issued`` record to ``abandoned`` (one Lua script).

        Args:
            token_hash: Hex sha256 of the token's secret.

        Keyword Args:
            force: Also abandon an expired record (while Redis still keeps it).

        Returns:
            True when this call abandoned it.
        """
        now = self.now()
        return await self._transition(token_hash, "abandoned", now, 0.0 if force else now)

    async def aclose(self) -> None:
        """Close the client if the store created it from a URL; a client passed in is left open."""
        if self._owns_client:
            await self._client.aclose()

    async def _transition(self, token_hash: str, status: str, now: float, horizon: float) -> bool:
        changed = await self._transition_script(keys=[self._key(token_hash)], args=[repr(now), status, repr(horizon)])
        return bool(int(changed))
