"""RedisCheckpointStorage: core's ``CheckpointStorage`` on Redis, for workers without a shared file system.

Keys under ``p`` = ``<namespace>:``: ``p segment:<id>`` a run's step-cache chunks, each with its checkpoint's
head (``checkpoint_delta.py``; a checkpoint saved without a run's offer: whole, alone in its segment);
``p seginfo:<id>`` its reference count ``n``, workflow ``w`` and references ``r`` (for the scripts: a load
trusts the sealed copy in the first chunk); ``p loc:<bucket>`` id (``location_of``) ->
``<segment>:<index>:<expiry>`` (expired = absent; a save prunes a bucket once it has doubled, field ``""``
keeping the count); ``p wsegs:<workflow>`` segments by last save.
A delete removes the location (the chunk stays for the checkpoints after it).
"""

from __future__ import annotations

import functools
import json
import logging
import re
import zlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._expiry import forget_retained
from .._store import duration_seconds
from .checkpoint_delta import DeltaSave
from .checkpoint_seal import CheckpointSealer, is_sealed, open_chunk
from .checkpoint_storage import DurableCheckpointStorage
from .redis_store import DEFAULT_MAX_CONNECTIONS, DEFAULT_POOL_TIMEOUT_SECONDS, pooled_client

if TYPE_CHECKING:
    from redis.asyncio import Redis


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

Opened = str | WorkflowCheckpointException  # a chunk as read: its text, or why it was refused

# ARGV[1] = key prefix, ARGV[2] = ttl in ms (0 = none).
_COMMON = """
local p = ARGV[1]
local ttl = tonumber(ARGV[2])
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function located(value, now)
  local sid, index, expiry = string.match(value, '^(.*):(%d+):(%d*)$')
  if not sid or #index > 12 or (expiry ~= '' and tonumber(expiry) * 1000 <= now) then return nil, nil end
  return sid, tonumber(index)
end
local function locate(now, bucket, field)
  local value = redis.pcall('HGET', p .. 'loc:' .. bucket, field)
  if type(value) ~= 'string' then return nil, nil end
  return located(value, now)
end
local function parents(sid)
  local raw = redis.pcall('HGET', p .. 'seginfo:' .. sid, 'r')
  local ok, refs = pcall(cjson.decode, type(raw) == 'string' and raw or '[]')
  local out = {}
  if ok and type(refs) == 'table' then
    for _, ref in ipairs(refs) do
      if type(ref) == 'table' and type(ref[1]) == 'string' and ref[1] ~= sid and type(ref[2]) == 'number'
        and ref[2] >= 0 and ref[2] < 1e12 and math.floor(ref[2]) == ref[2] then out[#out + 1] = ref end
    end
  end
  return out
end
local function release(sid, keep)
  local info = p .. 'seginfo:' .. sid
  if redis.call('HINCRBY', info, 'n', -1) <= 0 and not keep[sid] then
    local w = redis.call('HGET', info, 'w')
    redis.call('DEL', info, p .. 'segment:' .. sid)
    if w then redis.call('ZREM', p .. 'wsegs:' .. w, sid) end
  end
end
local function unmap(key, field, value, keep)
  redis.call('HDEL', key, field)
  local sid = string.match(value, '^(.*):%d+:%d*$')
  if sid then
    for _, ref in ipairs(parents(sid)) do release(ref[1], keep) end
    release(sid, keep)
  end
end
local function drop_location(now, bucket, field, keep)
  local key = p .. 'loc:' .. bucket
  local value = redis.call('HGET', key, field)
  if not value then return 0 end
  unmap(key, field, value, keep)
  if located(value, now) then return 1 end
  return 0
end
local function prune(key, now, keep)
  local size = redis.call('HLEN', key)
  if size <= 64 or size <= 2 * (tonumber(redis.call('HGET', key, '')) or 0) then return end
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if all[i] ~= '' and not located(all[i + 1], now) then unmap(key, all[i], all[i + 1], keep) end
  end
  redis.call('HSET', key, '', redis.call('HLEN', key))
end
"""

# ARGV: 3 checkpoint id, 4 location field, 5 bucket (``location_of``), 6 workflow name, 7 segment id, 8 chunk,
# 9 chunks the segment must hold, 10 references (JSON [[segment id, chunk count], ...], own last).
_SAVE = """
local sid, index = ARGV[7], tonumber(ARGV[9])
local refs = cjson.decode(ARGV[10])
local keep = {}
for _, ref in ipairs(refs) do
  local have = redis.call('LLEN', p .. 'segment:' .. ref[1])
  if ref[1] == sid then
    if have ~= index then return 0 end
  elseif have < tonumber(ref[2]) then return 0 end
  keep[ref[1]] = true
end
local now = now_ms()
drop_location(now, ARGV[5], ARGV[4], keep)
redis.call('RPUSH', p .. 'segment:' .. sid, ARGV[8])
if index == 0 then redis.call('HSET', p .. 'seginfo:' .. sid, 'w', ARGV[6], 'r', ARGV[10]) end
for _, ref in ipairs(refs) do
  redis.call('HINCRBY', p .. 'seginfo:' .. ref[1], 'n', 1)
  if ttl > 0 then
    redis.call('PEXPIRE', p .. 'segment:' .. ref[1], ttl)
    redis.call('PEXPIRE', p .. 'seginfo:' .. ref[1], ttl)
  end
end
local key = p .. 'loc:' .. ARGV[5]
local expiry = ''
if ttl > 0 then expiry = math.floor((now + ttl) / 1000) + 1 end
redis.call('HSET', key, ARGV[4], sid .. ':' .. index .. ':' .. expiry)
if index % 8 == 0 then prune(key, now, keep) end
local segments = p .. 'wsegs:' .. ARGV[6]
local last, order = redis.call('ZRANGE', segments, -1, -1, 'WITHSCORES'), now
if last[2] then order = math.max(now, tonumber(last[2]) + (last[1] == sid and 0 or 1)) end
redis.call('ZADD', segments, order, sid)  -- after every other: two saves in one millisecond list in save order
if ttl > 0 then
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  redis.call('ZREMRANGEBYSCORE', segments, '-inf', '(' .. (now - ttl))
  redis.call('PEXPIRE', segments, ttl)
else
  redis.call('PERSIST', key)
end
return 1
"""

# ARGV: 3 checkpoint id, 4 location field, 5 bucket. Returns 1 when something was deleted.
_DELETE = """
return drop_location(now_ms(), ARGV[5], ARGV[4], {})
"""

# A segment's chunks and those of its parents: {own chunks, parent id, count, its chunks, ...}
# (a key that is no list reads as no chunks, so its checkpoints fail to load rather than the script).
_READ = """
local function chunks(sid, last)
  local found = redis.pcall('LRANGE', p .. 'segment:' .. sid, 0, last)
  if found.err then return {} end
  return found
end
local function read(sid, last)
  local out = {chunks(sid, last)}
  for _, ref in ipairs(parents(sid)) do
    out[#out + 1] = ref[1]
    out[#out + 1] = ref[2]
    out[#out + 1] = ref[2] > 0 and chunks(ref[1], ref[2] - 1) or {}
  end
  return out
end
"""

# ARGV: 3 checkpoint id, 4 location field, 5 bucket. Returns {segment id, index, read(segment id, index)}, or {}.
_LOAD = """
local sid, index = locate(now_ms(), ARGV[5], ARGV[4])
if not sid then return {} end
return {sid, index, read(sid, index)}
"""

# ARGV: 3 segment id. Returns read(segment id, -1) (one call per segment: none blocks Redis for a workflow).
_LIST = """
return read(ARGV[3], -1)
"""

# ARGV: 3.. location field and bucket of each checkpoint. Returns each one's location, or false.
_LOCATE = """
local now = now_ms()
local out = {}
for i = 3, #ARGV, 2 do
  local sid, index = locate(now, ARGV[i + 1], ARGV[i])
  out[#out + 1] = sid and (sid .. ':' .. index) or false
end
return out
"""


DEFAULT_CHECKPOINT_TTL = timedelta(days=7)


def location_of(checkpoint_id: str) -> tuple[bytes, str]:
    """A checkpoint id's field and bucket in the location map (a canonical UUID as its 16 bytes)."""
    if _CANONICAL_UUID.fullmatch(checkpoint_id):  # what str(uuid.uuid4()) gives, so bytes -> text is exact
        raw = bytes.fromhex(checkpoint_id.replace("-", ""))
        return raw, str(raw[0])
    raw = checkpoint_id.encode("utf-8", "surrogatepass")
    return b":" + raw, f"s{zlib.crc32(raw) & 255}"


def _text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def _opened_segments(
    own: str, own_count: int, found: list[Any], sealer: CheckpointSealer | None
) -> tuple[list[tuple[str, int]], list[list[Opened]]]:
    """What ``read`` returned for segment ``own``: references (parents first), opened chunks; raises if one is short."""
    rest = found[1:]
    refs = [(_text(rest[at]), int(rest[at + 1])) for at in range(0, len(rest) - 2, 3)]
    lists = [*rest[2::3], found[0]]
    refs.append((own, own_count))
    chunks: list[list[Opened]] = []
    for (segment, count), raws in zip(refs, lists, strict=True):
        if len(raws) < count or (segment != own and len(raws) != count):
            raise WorkflowCheckpointException(f"Segment {segment} lost part of its step cache in Redis.")
        chunks.append([_opened(segment, index, raw, sealer) for index, raw in enumerate(raws)])
    return refs, chunks


def _opened(segment: str, index: int, raw: bytes, sealer: CheckpointSealer | None) -> Opened:
    """One chunk opened and decoded, or why it was refused (its checkpoints then fail to load with that)."""
    if sealer is None and is_sealed(raw):
        return WorkflowCheckpointException(
            f"A chunk of segment {segment} is sealed, but this storage has no sealer: pass sealer=CheckpointSealer()"
        )
    try:
        return open_chunk(segment, index, raw, sealer)
    except WorkflowCheckpointException as exc:
        return exc


def _head_id(chunk: Opened) -> str | None:
    """The checkpoint id a chunk's head names, or None (refused, or no head: its checkpoint is not listed)."""
    if not isinstance(chunk, str):
        return None
    try:
        head = json.loads(chunk)
        checkpoint_id = head.get("i", head.get("checkpoint_id"))  # a whole checkpoint: core's field
    except Exception:  # JSONDecodeError, RecursionError, not an object
        return None
    return checkpoint_id if isinstance(checkpoint_id, str) else None


class RedisCheckpointStorage(DurableCheckpointStorage):
    """Core's ``CheckpointStorage`` protocol on Redis, so workers on several machines share checkpoints.

    A drop-in for ``FileCheckpointStorage``; share Redis and namespace with a :class:`RedisContinuationStore`.
    Bodies decode under core's allow-list plus ``allowed_checkpoint_types``: :meth:`save` refuses one that
    would not, :meth:`load` raises and :meth:`list_checkpoints` skips a stored one that does not. Keys expire
    ``ttl`` after the last save that wrote them: keep it at least the continuation store's ``ttl + retention``.
    See "Redis" in the docs.

    Security: core decodes with ``pickle``; without a ``sealer`` whoever can write these keys can run code
    in your workers (logged once). Protect the Redis like the continuation store (ACLs, TLS, persistence).

    Args:
        client: A ``redis.asyncio.Redis`` (the caller closes it), or a URL (the storage owns a pooled client;
            close it with :meth:`aclose`).

    Keyword Args:
        namespace: Key prefix, so several applications can share one Redis database.
        allowed_checkpoint_types: Extra ``"module:QualName"`` types checkpoints may contain.
        ttl: How long a checkpoint is kept after its save, default 7 days; ``None`` until :meth:`delete`.
            Give every storage on a namespace the same ``ttl`` (a run's keys are shared).
        max_connections: With a URL: connections in the pool (default 50).
        pool_timeout: With a URL: how long an operation waits for a connection (default 20 s).
        sealer: Seals every body saved and opens every body loaded (SECURITY.md "Checkpoint keys").

    Raises:
        ImportError: The ``redis`` package is not installed.
        ValueError: A client with ``decode_responses=True``, an empty ``namespace``, ``ttl`` or
            ``pool_timeout`` not a positive duration of at most ten years, or ``max_connections`` not
            a positive integer.
        TypeError: A duration is neither a number nor a ``timedelta``, or ``allowed_checkpoint_types``
            is not a list of strings.
    """

    logger = logging.getLogger(__name__)
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
        self._configure("RedisCheckpointStorage", sealer, allowed_checkpoint_types)
        self.namespace = namespace
        self._prefix = f"{namespace}:"
        self._ttl_ms = None if ttl is None else max(1, int(duration_seconds(ttl, "ttl") * 1000))
        self._owns_client = isinstance(client, str)
        if isinstance(client, str):
            client = pooled_client(
                client, max_connections=max_connections, pool_timeout=pool_timeout, owner="RedisCheckpointStorage"
            )
        elif client.connection_pool.connection_kwargs.get("decode_responses"):
            raise ValueError("RedisCheckpointStorage needs a client with decode_responses=False (bodies are bytes)")
        self._client: Any = client
        self._save_delta: Any = client.register_script(_COMMON + _SAVE)
        self._delete: Any = client.register_script(_COMMON + _DELETE)
        self._load: Any = client.register_script(_COMMON + _READ + _LOAD)
        self._list: Any = client.register_script(_COMMON + _READ + _LIST)
        self._locate: Any = client.register_script(_COMMON + _LOCATE)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """Load a checkpoint by id.

        Raises:
            WorkflowCheckpointException: No checkpoint has this id (never saved, deleted or expired),
                or it cannot be read (refused by the sealer, not a checkpoint, a type outside the
                allow-list, or another id's).
        """
        found = cast("list[Any]", await self._load(args=self._args(checkpoint_id)))
        if not found:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        refs, chunks = _opened_segments(_text(found[0]), int(found[1]) + 1, found[2], self.sealer)
        return self._inline(checkpoint_id, refs, chunks)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Return the workflow's checkpoints that exist and decode (others skipped), segments by their last save."""
        from redis.exceptions import ResponseError

        try:
            segments = cast("list[bytes]", await self._client.zrange(f"{self._prefix}wsegs:{workflow_name}", 0, -1))
        except ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
            return []  # the workflow's index holds another type: no segment to list
        return self._listed(workflow_name, await self._segment_loads(segments))

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete a checkpoint by id; True if this call deleted it, False if no checkpoint had this id."""
        return bool(int(await self._delete(args=self._args(checkpoint_id))))

    async def delete_many(self, checkpoint_ids: list[str]) -> int:
        """Delete several checkpoints in one round trip (pipelined scripts); return how many this call deleted."""
        async with self._client.pipeline(transaction=False) as pipe:
            for checkpoint_id in dict.fromkeys(checkpoint_ids):
                await self._delete(args=self._args(checkpoint_id), client=pipe)  # queued
            deleted = cast("list[Any]", await pipe.execute())
        return sum(int(result) for result in deleted)

    async def aclose(self) -> None:
        """Close the client if the storage created it from a URL; a client passed in is left open."""
        forget_retained(self)
        if self._owns_client:
            await self._client.aclose()

    def _args(self, checkpoint_id: str) -> list[Any]:
        """The scripts' arguments for one checkpoint: prefix, ttl, id, its location field and bucket."""
        return [self._prefix, self._ttl_ms or 0, checkpoint_id, *location_of(checkpoint_id)]

    async def _segment_loads(self, segments: list[bytes]) -> list[tuple[str, Any]]:
        """A loader for each live checkpoint in ``segments`` (an id that maps to its chunk), in order."""
        async with self._client.pipeline(transaction=False) as pipe:
            for segment_id in segments:
                await self._list(args=[self._prefix, self._ttl_ms or 0, segment_id], client=pipe)  # queued
            reads = cast("list[Any]", await pipe.execute())
        heads: list[tuple[str, bytes, Any]] = []  # (id, where the location map must point, its loader)
        for segment_id, read in zip(segments, reads, strict=True):
            segment = _text(segment_id)
            try:
                refs, chunks = _opened_segments(segment, 0, read, self.sealer)
            except WorkflowCheckpointException:
                continue  # a parent lost chunks: nothing in this segment loads
            for index, chunk in enumerate(chunks[-1]):
                checkpoint_id = _head_id(chunk)
                if checkpoint_id is not None:
                    load = functools.partial(self._inline, checkpoint_id, [*refs[:-1], (segment, index + 1)], chunks)
                    heads.append((checkpoint_id, f"{segment}:{index}".encode("utf-8", "surrogateescape"), load))
        if not heads:
            return []
        args: list[Any] = [self._prefix, self._ttl_ms or 0]
        for checkpoint_id, _, _ in heads:
            args += location_of(checkpoint_id)
        where = cast("list[Any]", await self._locate(args=args))
        return [(cid, load) for (cid, at, load), found in zip(heads, where, strict=True) if found == at]

    def _inline(
        self, checkpoint_id: str, refs: list[tuple[str, int]], chunks: list[list[Opened]]
    ) -> WorkflowCheckpoint:
        """The checkpoint whose head is the last of ``refs``'s chunks, every one of them opened (else raised)."""
        picked = [*chunks[:-1], chunks[-1][: refs[-1][1]]]
        for texts in picked:
            for opened in texts:
                if isinstance(opened, WorkflowCheckpointException):
                    raise opened
        texts = cast("list[list[str]]", picked)
        return self._decoded(checkpoint_id, lambda: self._deduper.assemble_inline(checkpoint_id, refs, texts))

    async def _write_delta(self, checkpoint: WorkflowCheckpoint, plan: DeltaSave) -> bool:
        """Run the save script once; False (nothing written) when a referenced segment lost chunks."""
        args = [*self._args(checkpoint.checkpoint_id), checkpoint.workflow_name, plan.segment, self._sealed_chunk(plan)]
        args += [plan.chunk_index, json.dumps(plan.refs)]
        return bool(int(await self._save_delta(args=args)))
