"""The Redis layout of step-cache checkpoints: each head in its chunk, a location map, an index of segments.

Keys, under the storage's namespace (``p`` = ``<namespace>:``):

* ``p segment:<id>``: the segment's chunks (a list); each chunk carries its checkpoint's head
  (``_durable/checkpoint_delta.py``) and the first one the segment's parents.
* ``p seginfo:<id>``: a small hash: ``n`` the checkpoints that reference the segment, ``w`` its
  workflow, ``r`` its references as saved first (parents, for the scripts; the sealed copy in the
  first chunk is the one a load trusts).
* ``p loc:<bucket>``: checkpoint id -> ``<segment id>:<index>:<expiry>`` (small hashes that stay
  listpack-encoded; a canonical UUID is stored as its 16 bytes, in bucket = its first byte; another
  id as ``:<id>`` in bucket ``s<crc32 % 256>``). ``expiry`` is the server's time in seconds ``ttl``
  after the save (empty without ``ttl``): a lookup treats a later time as no checkpoint, and a save
  (every eighth chunk of a segment) drops the bucket's expired entries (with their references) once
  the bucket has doubled since it last did (the field ``""`` keeps that count), so storage stays
  bounded without a key per checkpoint; the bucket itself expires ``ttl`` after its last save.
* ``p wsegs:<workflow>``: a sorted set of the workflow's segments by last save (what the listing
  reads; entries older than ``ttl`` dropped on each save).

The save script keeps ``checkpoint_delta``'s backend contract (and drops what the id stored before);
a delete removes the location (the chunk stays for the checkpoints after it). A checkpoint stored
whole keeps a ``checkpoint:<id>`` hash; the scripts read and delete both layouts.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from agent_framework import WorkflowCheckpointException

from .checkpoint_seal import is_sealed, open_chunk

if TYPE_CHECKING:
    from .checkpoint_seal import CheckpointSealer

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

Opened = str | WorkflowCheckpointException
"""A chunk as read: its text, or why it was refused."""

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
local function drop_hash(id)
  local key = p .. 'checkpoint:' .. id
  local name = redis.call('HGET', key, 'workflow_name')
  local deleted = redis.call('DEL', key)
  if name then redis.call('ZREM', p .. 'workflow:' .. name, id) end
  return deleted
end
"""

# ARGV: 3 checkpoint id, 4 location field, 5 bucket (``location_of``), 6 workflow name, 7 segment id, 8 chunk,
# 9 chunks the segment must hold, 10 references (JSON [[segment id, chunk count], ...], own last).
SAVE_SCRIPT = (
    _COMMON
    + """
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
drop_hash(ARGV[3])
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
redis.call('ZADD', segments, now, sid)
if ttl > 0 then
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  redis.call('ZREMRANGEBYSCORE', segments, '-inf', '(' .. (now - ttl))
  redis.call('PEXPIRE', segments, ttl)
else
  redis.call('PERSIST', key)
end
return 1
"""
)

# ARGV: 3 checkpoint id, 4 location field, 5 bucket. Returns 1 when something was deleted.
DELETE_SCRIPT = (
    _COMMON
    + """
local found = drop_location(now_ms(), ARGV[5], ARGV[4], {}) + drop_hash(ARGV[3])
if found > 0 then return 1 end
return 0
"""
)

# Lua: a segment's chunks and those of its parents: {own chunks, parent id, count, its chunks, ...}
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

# ARGV: 3 checkpoint id, 4 location field, 5 bucket.
# Returns {0, body} (a whole checkpoint, or nothing) or {1, segment id, index, read(segment id, index)}.
LOAD_SCRIPT = (
    _COMMON
    + _READ
    + """
local sid, index = locate(now_ms(), ARGV[5], ARGV[4])
if not sid then
  local body = redis.pcall('HGET', p .. 'checkpoint:' .. ARGV[3], 'body')
  if type(body) ~= 'string' then return {0, false} end
  return {0, body}
end
return {1, sid, index, read(sid, index)}
"""
)

# ARGV: 3 segment id. Returns read(segment id, -1): every chunk of one segment (the listing pipelines one
# call per segment of ``p wsegs:<workflow>``, so no single call blocks Redis for a whole workflow).
LIST_SCRIPT = (
    _COMMON
    + _READ
    + """
return read(ARGV[3], -1)
"""
)

# ARGV: 3.. location field and bucket of each checkpoint. Returns each one's location, or false.
LOCATE_SCRIPT = (
    _COMMON
    + """
local now = now_ms()
local out = {}
for i = 3, #ARGV, 2 do
  local sid, index = locate(now, ARGV[i + 1], ARGV[i])
  out[#out + 1] = sid and (sid .. ':' .. index) or false
end
return out
"""
)


def location_of(checkpoint_id: str) -> tuple[bytes, str]:
    """A checkpoint id's field and bucket in the location map (a canonical UUID as its 16 bytes)."""
    if _CANONICAL_UUID.fullmatch(checkpoint_id):  # what str(uuid.uuid4()) gives, so bytes -> text is exact
        raw = bytes.fromhex(checkpoint_id.replace("-", ""))
        return raw, str(raw[0])
    raw = checkpoint_id.encode("utf-8", "surrogatepass")
    return b":" + raw, f"s{zlib.crc32(raw) & 255}"


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def opened_segments(
    own_id: Any, own_count: int, found: list[Any], sealer: CheckpointSealer | None
) -> tuple[list[tuple[str, int]], list[list[Opened]]]:
    """What the scripts' ``read`` returned for segment ``own_id``: references (parents first) and opened chunks.

    Raises:
        WorkflowCheckpointException: A parent segment lost chunks (expired or deleted).
    """
    own = _text(own_id)
    refs: list[tuple[str, int]] = []
    lists: list[list[Any]] = []
    rest = found[1:]
    for at in range(0, len(rest) - 2, 3):
        refs.append((_text(rest[at]), int(rest[at + 1])))
        lists.append(cast("list[Any]", rest[at + 2]))
    refs.append((own, own_count))
    lists.append(cast("list[Any]", found[0]))
    chunks: list[list[Opened]] = []
    for (segment, count), raws in zip(refs, lists, strict=True):
        if len(raws) < count or (segment != own and len(raws) != count):
            raise WorkflowCheckpointException(f"Segment {segment} lost part of its step cache in Redis.")
        chunks.append([_opened(segment, index, raw, sealer) for index, raw in enumerate(raws)])
    return refs, chunks


def _opened(segment: str, index: int, raw: Any, sealer: CheckpointSealer | None) -> Opened:
    """One chunk opened and decoded, or why it was refused (its checkpoints then fail to load with that)."""
    data = raw if isinstance(raw, bytes) else _text(raw).encode()
    if sealer is None and is_sealed(data):
        return WorkflowCheckpointException(
            f"A chunk of segment {segment} is sealed, but this storage has no sealer: pass sealer=CheckpointSealer()"
        )
    try:
        return open_chunk(segment, index, data, sealer)
    except WorkflowCheckpointException as exc:
        return exc


def prefix_of(chunks: list[list[Opened]], count: int) -> list[list[str]]:
    """The chunks up to ``count`` of the last (own) segment, all of them opened.

    Raises:
        WorkflowCheckpointException: One of them was refused (by the sealer, sealed without one, or not UTF-8).
    """
    picked = [*chunks[:-1], chunks[-1][:count]]
    for texts in picked:
        for opened in texts:
            if isinstance(opened, WorkflowCheckpointException):
                raise opened
    return cast("list[list[str]]", picked)


@dataclass(frozen=True, slots=True)
class ListedHead:
    """A chunk's head found by the listing: the id it names, where it is, and what loads it."""

    checkpoint_id: str
    location: str
    """``<segment id>:<index>``, what the location map must hold for the checkpoint to be listed."""
    refs: list[tuple[str, int]]
    chunks: list[list[Opened]]


def listed_heads(found: list[tuple[Any, list[Any]]], sealer: CheckpointSealer | None) -> list[ListedHead]:
    """The heads in ``(segment id, what LIST_SCRIPT returned)`` pairs, in order (refused chunks left out)."""
    heads: list[ListedHead] = []
    for segment_id, read in found:
        segment = _text(segment_id)
        try:
            refs, chunks = opened_segments(segment, 0, read, sealer)
        except WorkflowCheckpointException:
            continue  # a parent lost chunks: nothing in this segment loads
        for index, chunk in enumerate(chunks[-1]):
            checkpoint_id = _head_id(chunk)
            if checkpoint_id is not None:
                own = [*refs[:-1], (segment, index + 1)]
                heads.append(ListedHead(checkpoint_id, f"{segment}:{index}", own, chunks))
    return heads


def _head_id(chunk: Opened) -> str | None:
    """The checkpoint id a chunk's head names, or None (refused, or no head: its checkpoint is not listed)."""
    if not isinstance(chunk, str):
        return None
    try:
        checkpoint_id = json.loads(chunk).get("i")
    except Exception:  # JSONDecodeError, RecursionError, not an object
        return None
    return checkpoint_id if isinstance(checkpoint_id, str) else None
