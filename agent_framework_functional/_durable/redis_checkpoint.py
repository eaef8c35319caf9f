"""RedisCheckpointStorage: core's ``CheckpointStorage`` on Redis, for workers without a shared file system.

Core's private API touched here (on purpose): ``encode_checkpoint_value`` and
``decode_checkpoint_value`` from ``agent_framework._workflows._checkpoint_encoding``, the helpers
core's own ``FileCheckpointStorage`` uses, so a checkpoint is encoded exactly as core encodes it and
decoded under core's allow-list, through ``checkpoint_pickles.py`` (each pickle checked before it is
decoded). They are imported when first used, so a core upgrade that moves them breaks only the
storages; ``tests/durable/test_redis_checkpoint.py`` imports them directly and compares the stored
body with what ``FileCheckpointStorage`` writes, so such an upgrade fails loudly.
"""

from __future__ import annotations

import functools
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._expiry import forget_retained
from .._store import duration_seconds
from .checkpoint_delta import DeltaSave, StepCacheDeduper
from .checkpoint_seal import CheckpointSealer
from .checkpoint_storage import DurableCheckpointStorage, check_allowed_types, check_sealer, encode_body
from .redis_client import DEFAULT_MAX_CONNECTIONS, DEFAULT_POOL_TIMEOUT_SECONDS, pooled_client, sorted_members
from .redis_segments import (
    DELETE_SCRIPT,
    LIST_SCRIPT,
    LOAD_SCRIPT,
    LOCATE_SCRIPT,
    SAVE_SCRIPT,
    Opened,
    listed_heads,
    location_of,
    opened_segments,
    prefix_of,
)

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from .._step_cache import StepCacheOffer

logger = logging.getLogger(__name__)

# KEYS[1] = workflow index, KEYS[2] = checkpoint key, ARGV[1] = checkpoint id.
_DROP_STALE = """
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""

DEFAULT_CHECKPOINT_TTL = timedelta(days=7)
"""How long a :class:`RedisCheckpointStorage` keeps a checkpoint after saving it, by default."""


class RedisCheckpointStorage(DurableCheckpointStorage):
    """Core's ``CheckpointStorage`` protocol on Redis, so workers on several machines share checkpoints.

    A drop-in for ``FileCheckpointStorage`` when the workers share no file system: give every worker
    the same Redis (and namespace), with a :class:`RedisContinuationStore`, and any of them can
    resume a pause another one saved. Checkpoints are encoded with core's own checkpoint encoding
    (JSON, with pickled values for non-JSON types) and decoded under core's allow-list: the
    built-in safe types, Agent Framework's and OpenAI's types, types registered with
    ``agent_framework.register_checkpoint_type``, and ``allowed_checkpoint_types``. A checkpoint
    that would not decode under that list is refused at :meth:`save`, as ``FileCheckpointStorage``
    does.

    Keys: a checkpoint stored whole is ``<namespace>:checkpoint:<id>`` (a hash: ``workflow_name``,
    ``body``), indexed in ``<namespace>:workflow:<name>`` (a sorted set by save time). Checkpoints of
    runs this package drives store each step result once and keep no key of their own: each is one
    chunk (the entries its step added, and its head) in a ``<namespace>:segment:<id>`` list shared by
    the run's checkpoints, and a location in a small shared hash (``_durable/redis_segments.py``).
    ``load`` returns the same checkpoint either way. Every key expires ``ttl`` after the last save that
    wrote it, and each save drops index entries and locations older than ``ttl``, so storage stays
    bounded. Keep ``ttl`` at least as long as the continuation store's ``ttl + retention``, so a
    pause's checkpoint outlives its token and its recovery window.

    Security: core decodes checkpoints with ``pickle`` (restricted by the allow-list, which is a
    mitigation, not a boundary), so without a ``sealer`` whoever can write these keys can run code
    in your workers (the storage logs a warning once). With a :class:`CheckpointSealer` every stored
    piece is authenticated with the host's key (and optionally encrypted): a whole body under its
    id, a head under its id and references, each step-cache chunk under its segment and position;
    a piece that fails the check is refused before anything decodes it. Either way, protect the Redis like the
    continuation store (AUTH/ACLs on the namespace, TLS). A body that cannot be read (refused by
    the sealer, not UTF-8, not JSON, too deeply nested, a type outside the allow-list) makes
    :meth:`load` raise ``WorkflowCheckpointException`` and is skipped by :meth:`list_checkpoints`.
    Losing a checkpoint in a Redis crash loses its pause (a resume then fails, it never runs
    twice); use the same persistence as for the continuation store.

    Args:
        client: A ``redis.asyncio.Redis`` client (the caller owns and closes it), or a URL such as
            ``"redis://localhost:6379/0"`` (the storage owns the client, with a blocking connection
            pool; close it with :meth:`aclose`).

    Keyword Args:
        namespace: Key prefix, so several applications can share one Redis database.
        allowed_checkpoint_types: Extra ``"module:QualName"`` types that checkpoints may contain
            (user dataclasses or pydantic models in request data or state), as for
            ``FileCheckpointStorage``.
        ttl: How long a checkpoint is kept after it is saved (seconds or ``timedelta``), default 7
            days; ``None`` keeps checkpoints until :meth:`delete` (storage then grows without bound).
            Give every storage on a namespace the same ``ttl``: a run's keys are shared by its checkpoints.
        max_connections: With a URL: connections in the pool (default 50); more operations wait.
        pool_timeout: With a URL: how long an operation waits for a free connection (default 20 s).
        sealer: Seals every body it saves and opens every body it loads (README "Durable
            continuations", SECURITY.md "Checkpoint keys"); None stores bodies unauthenticated.

    Raises:
        ImportError: The ``redis`` package is not installed.
        ValueError: A client with ``decode_responses=True``, ``namespace`` is empty, ``ttl`` or
            ``pool_timeout`` is not a positive duration of at most ten years, or
            ``max_connections`` is not a positive integer.
        TypeError: A duration is neither a number nor a ``timedelta``, or ``allowed_checkpoint_types``
            is not a list of strings.

    Examples:
        .. code-block:: python

            url = "redis://cache:6379/0"
            wf = review.build(
                checkpoint_storage=RedisCheckpointStorage(url, allowed_checkpoint_types=["my_app.models:Verdict"]),
                continuation_store=RedisContinuationStore(url),
            )
    """

    logger = logger
    backend = "Redis"
    unreadable = "Checkpoint {checkpoint_id} in Redis cannot be decoded ({error}); it was not loaded."

    def __init__(
        self,
        client: Redis | str,
        *,
        namespace: str = "agent_framework_functional",
        allowed_checkpoint_types: list[str] | None = None,
        ttl: float | timedelta | None = DEFAULT_CHECKPOINT_TTL,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool_timeout: float | timedelta = DEFAULT_POOL_TIMEOUT_SECONDS,
        sealer: CheckpointSealer | None = None,
    ) -> None:
        if not namespace:
            raise ValueError("namespace must be a non-empty key prefix, for example 'myapp'.")
        self._allowed_types = check_allowed_types(allowed_checkpoint_types)
        self.sealer = check_sealer("RedisCheckpointStorage", sealer)
        self.namespace = namespace
        self._ttl_ms = None if ttl is None else max(1, int(duration_seconds(ttl, "ttl") * 1000))
        if isinstance(client, str):
            self._client: Any = pooled_client(
                client, max_connections=max_connections, pool_timeout=pool_timeout, owner="RedisCheckpointStorage"
            )
            self._owns_client = True
        else:
            if client.connection_pool.connection_kwargs.get("decode_responses"):
                raise ValueError("RedisCheckpointStorage needs a client with decode_responses=False (bodies are bytes)")
            self._client = client
            self._owns_client = False
        self._drop_stale: Any = self._client.register_script(_DROP_STALE)
        self._save_delta: Any = self._client.register_script(SAVE_SCRIPT)
        self._delete: Any = self._client.register_script(DELETE_SCRIPT)
        self._load: Any = self._client.register_script(LOAD_SCRIPT)
        self._list: Any = self._client.register_script(LIST_SCRIPT)
        self._locate: Any = self._client.register_script(LOCATE_SCRIPT)
        self._deduper = StepCacheDeduper(self._allowed_types, inline_heads=True)

    def _checkpoint_key(self, checkpoint_id: str) -> str:
        return f"{self.namespace}:checkpoint:{checkpoint_id}"

    def _index_key(self, workflow_name: str) -> str:
        return f"{self.namespace}:workflow:{workflow_name}"

    async def save_with_offer(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """:meth:`save` (its errors), each new step result stored once when ``offer`` fits ``checkpoint``."""
        plan = self._deduper.prepare(checkpoint, offer)  # before any await: core's dicts may change later
        if plan is not None:
            await self._store_delta(checkpoint, plan)
            return checkpoint.checkpoint_id
        body = encode_body(checkpoint, self._allowed_types)
        if self.sealer is not None:
            body = self.sealer.seal(body, context=checkpoint.checkpoint_id.encode("utf-8"))
        key = self._checkpoint_key(checkpoint.checkpoint_id)
        index = self._index_key(checkpoint.workflow_name)
        now_ms = time.time() * 1000
        async with self._client.pipeline(transaction=True) as pipe:
            await self._delete(args=self._args(checkpoint.checkpoint_id), client=pipe)  # queued: what the id held
            pipe.hset(key, mapping={"workflow_name": checkpoint.workflow_name, "body": body})
            pipe.zadd(index, {checkpoint.checkpoint_id: now_ms})
            if self._ttl_ms is not None:
                pipe.pexpire(key, self._ttl_ms)
                pipe.zremrangebyscore(index, "-inf", f"({now_ms - self._ttl_ms}")
                pipe.pexpire(index, self._ttl_ms)
            await pipe.execute()
        return checkpoint.checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """Load a checkpoint by id.

        Args:
            checkpoint_id: The id :meth:`save` returned.

        Returns:
            A new ``WorkflowCheckpoint`` decoded from Redis.

        Raises:
            WorkflowCheckpointException: No checkpoint has this id (never saved, deleted or expired),
                or its body cannot be read: refused by the sealer (or sealed while this storage has
                none), not UTF-8 JSON, nested too deeply, a type outside the allow-list, or a
                checkpoint of another id.
        """
        found = cast("list[Any]", await self._load(args=self._args(checkpoint_id)))
        if int(found[0]) == 1:
            refs, chunks = opened_segments(found[1], int(found[2]) + 1, found[3], self.sealer)
            return self._inline(checkpoint_id, refs, chunks)
        if found[1] is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        return self._whole(checkpoint_id, _as_bytes(found[1]))

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Return the workflow's checkpoints that still exist and decode, oldest save first.

        Checkpoints stored whole come first, then those of the step-cache segments, each segment's
        in save order, the segments by their last save. A checkpoint that fails to decode (for
        example a type outside the allow-list) is skipped with a warning, as ``FileCheckpointStorage`` does.

        Keyword Args:
            workflow_name: The workflow's name.

        Returns:
            The decoded checkpoints.
        """
        bodies = await self._bodies(workflow_name)
        loads = [(cid, functools.partial(self._load_whole, cid, raw)) for cid, raw in bodies]
        return await self._listed(workflow_name, [*loads, *await self._segment_loads(workflow_name)])

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete a checkpoint by id.

        Args:
            checkpoint_id: The checkpoint's id.

        Returns:
            True if this call deleted it; False if no checkpoint had this id.
        """
        return bool(int(await self._delete(args=self._args(checkpoint_id))))

    async def delete_many(self, checkpoint_ids: list[str]) -> int:
        """Delete several checkpoints in one round trip (a run chain's spent checkpoints; pipelined scripts).

        Args:
            checkpoint_ids: The checkpoints' ids.

        Returns:
            How many of them this call deleted.
        """
        ids = list(dict.fromkeys(checkpoint_ids))
        if not ids:
            return 0
        async with self._client.pipeline(transaction=False) as pipe:
            for checkpoint_id in ids:
                await self._delete(args=self._args(checkpoint_id), client=pipe)  # queued
            deleted = cast("list[Any]", await pipe.execute())
        return sum(int(result) for result in deleted)

    async def aclose(self) -> None:
        """Close the client if the storage created it from a URL; a client passed in is left open."""
        forget_retained(self)
        if self._owns_client:
            await self._client.aclose()

    async def _bodies(self, workflow_name: str) -> list[tuple[str, Any]]:
        """Return ``(id, body)`` of the workflow's indexed checkpoints; drop entries whose key is gone."""
        index = self._index_key(workflow_name)
        ids = await sorted_members(self._client, index, as_text=True)  # another member was never an id saved here
        if not ids:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for checkpoint_id in ids:
                pipe.hget(self._checkpoint_key(checkpoint_id), "body")
            bodies = cast("list[Any]", await pipe.execute(raise_on_error=False))
        found: list[tuple[str, Any]] = []
        for checkpoint_id, raw in zip(ids, bodies, strict=True):
            if raw is None or isinstance(raw, Exception):  # gone (or another type): unless saved again, unindex it
                await self._drop_stale(keys=[index, self._checkpoint_key(checkpoint_id)], args=[checkpoint_id])
            else:
                found.append((checkpoint_id, raw))
        return found

    @property
    def _prefix(self) -> str:
        return f"{self.namespace}:"

    def _args(self, checkpoint_id: str) -> list[Any]:
        """The scripts' arguments for one checkpoint: prefix, ttl, id, its location field and bucket."""
        return [self._prefix, self._ttl_ms or 0, checkpoint_id, *location_of(checkpoint_id)]

    async def _segment_loads(self, workflow_name: str) -> list[tuple[str, Any]]:
        """A loader for each live checkpoint in the workflow's segments (an id that maps to its chunk), in order."""
        segments = await sorted_members(self._client, f"{self._prefix}wsegs:{workflow_name}")
        async with self._client.pipeline(transaction=False) as pipe:
            for segment in segments:
                await self._list(args=[self._prefix, self._ttl_ms or 0, segment], client=pipe)  # queued
            reads = cast("list[Any]", await pipe.execute())
        candidates = listed_heads(list(zip(segments, reads, strict=True)), self.sealer)
        if not candidates:
            return []
        args: list[Any] = [self._prefix, self._ttl_ms or 0]
        for head in candidates:
            args += location_of(head.checkpoint_id)
        where = cast("list[Any]", await self._locate(args=args))
        return [
            (head.checkpoint_id, functools.partial(self._load_inline, head.checkpoint_id, head.refs, head.chunks))
            for head, at in zip(candidates, where, strict=True)
            if at is not None and _as_bytes(at) == head.location.encode("utf-8", "surrogateescape")
        ]

    async def _load_inline(
        self, checkpoint_id: str, refs: list[tuple[str, int]], chunks: list[list[Opened]]
    ) -> WorkflowCheckpoint:
        return self._inline(checkpoint_id, refs, chunks)

    def _inline(
        self, checkpoint_id: str, refs: list[tuple[str, int]], chunks: list[list[Opened]]
    ) -> WorkflowCheckpoint:
        """The checkpoint whose head is the last of ``chunks`` (opened); every failure is core's exception."""
        return self._assembled_inline(checkpoint_id, refs, prefix_of(chunks, refs[-1][1]))

    async def _write_delta(
        self, checkpoint: WorkflowCheckpoint, plan: DeltaSave, head: bytes, chunk: bytes | None
    ) -> bool:
        """Run ``redis_segments.SAVE_SCRIPT`` once; False (nothing written) when a referenced segment lost chunks."""
        args = [*self._args(checkpoint.checkpoint_id), checkpoint.workflow_name, plan.segment, chunk or b""]
        args += [plan.chunk_index, plan.references]
        return bool(int(await self._save_delta(args=args)))

    async def _load_whole(self, checkpoint_id: str, raw: Any) -> WorkflowCheckpoint:
        return self._whole(checkpoint_id, _as_bytes(raw))


def _as_bytes(raw: Any) -> bytes:
    return raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "surrogatepass")
