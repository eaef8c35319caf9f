"""Redis side of step-cache de-duplication: a checkpoint head over segment chunks, saved and deleted by Lua scripts.

Keys, under the storage's namespace: the checkpoint hash gains a ``segments`` field (its references,
JSON ``[[segment id, chunk count], ...]``) and its ``body`` holds the head; ``segment:<id>`` is a
list of chunks; ``segrefs:<id>`` counts the checkpoints that reference the segment. A save checks
that every referenced segment still holds its chunks (else it writes nothing and returns 0, and the
storage saves again with one segment holding everything); a delete drops its references and deletes
a segment once nothing references it. Every referenced segment expires with the checkpoint that was
saved last over it. See ``_durable/checkpoint_delta.py`` for the layout of heads and chunks.

With a :class:`~.checkpoint_seal.CheckpointSealer`, the head is sealed under :func:`head_context`
(its checkpoint id and its exact references, so neither can change) and each chunk under
:func:`chunk_context` (its segment id and index, so chunks cannot be swapped, reordered or moved
between segments); :func:`read_chunks` opens every chunk before anything parses it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from agent_framework import WorkflowCheckpointException

if TYPE_CHECKING:
    from .checkpoint_seal import CheckpointSealer

_MAX_REFERENCES = 4096

# Lua: the segment ids of stored references (JSON); none when they are not well-formed.
_STORED_SEGMENTS = """
local function stored(json)
  local ok, refs = pcall(cjson.decode, json)
  local ids = {}
  if ok and type(refs) == 'table' then
    for _, ref in ipairs(refs) do
      if type(ref) == 'table' and type(ref[1]) == 'string' then ids[#ids + 1] = ref[1] end
    end
  end
  return ids
end
"""

# KEYS[1] = checkpoint key, KEYS[2] = workflow index. ARGV: 1 checkpoint id, 2 workflow name, 3 body,
# 4 references (JSON), 5 own segment id, 6 chunk ('' = none), 7 chunks the own segment must hold,
# 8 now (ms), 9 ttl (ms, '' = none), 10 index cutoff ('(<ms>'), 11 key prefix ('<namespace>:').
SAVE_SCRIPT = (
    _STORED_SEGMENTS
    + """
local p = ARGV[11]
local refs = cjson.decode(ARGV[4])
local keep = {}
for _, ref in ipairs(refs) do
  local have = redis.call('LLEN', p .. 'segment:' .. ref[1])
  if ref[1] == ARGV[5] then
    if have ~= tonumber(ARGV[7]) then return 0 end
  elseif have < tonumber(ref[2]) then return 0 end
  keep[ref[1]] = true
end
local old = redis.call('HGET', KEYS[1], 'segments')
if old then
  for _, id in ipairs(stored(old)) do
    if redis.call('DECR', p .. 'segrefs:' .. id) <= 0 and not keep[id] then
      redis.call('DEL', p .. 'segrefs:' .. id, p .. 'segment:' .. id)
    end
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'workflow_name', ARGV[2], 'body', ARGV[3], 'segments', ARGV[4])
if ARGV[6] ~= '' then redis.call('RPUSH', p .. 'segment:' .. ARGV[5], ARGV[6]) end
for _, ref in ipairs(refs) do
  redis.call('INCR', p .. 'segrefs:' .. ref[1])
  if ARGV[9] ~= '' then
    redis.call('PEXPIRE', p .. 'segment:' .. ref[1], ARGV[9])
    redis.call('PEXPIRE', p .. 'segrefs:' .. ref[1], ARGV[9])
  end
end
redis.call('ZADD', KEYS[2], ARGV[8], ARGV[1])
if ARGV[9] ~= '' then
  redis.call('PEXPIRE', KEYS[1], ARGV[9])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[10])
  redis.call('PEXPIRE', KEYS[2], ARGV[9])
end
return 1
"""
)

# KEYS[1] = checkpoint key. ARGV: 1 checkpoint id, 2 key prefix ('<namespace>:'). Returns 1 if deleted.
# Stored references that are not well-formed (altered in Redis) free nothing and never fail the script.
DELETE_SCRIPT = (
    _STORED_SEGMENTS
    + """
local p = ARGV[2]
local fields = redis.call('HMGET', KEYS[1], 'workflow_name', 'segments')
if fields[2] then
  for _, id in ipairs(stored(fields[2])) do
    if redis.call('DECR', p .. 'segrefs:' .. id) <= 0 then
      redis.call('DEL', p .. 'segrefs:' .. id, p .. 'segment:' .. id)
    end
  end
end
local deleted = redis.call('DEL', KEYS[1])
if fields[1] then redis.call('ZREM', p .. 'workflow:' .. fields[1], ARGV[1]) end
return deleted
"""
)


def head_context(checkpoint_id: str, references: bytes) -> bytes:
    """The sealing context of a head: its checkpoint id and its references, byte for byte."""
    return b"afs-head\x00" + checkpoint_id.encode("utf-8") + b"\x00" + references


def chunk_context(segment: str, index: int) -> bytes:
    """The sealing context of a chunk: its segment id and its index in that segment."""
    return b"afs-chunk\x00" + segment.encode("utf-8") + b"\x00" + str(index).encode("ascii")


def parse_references(checkpoint_id: str, references: bytes, backend: str = "Redis") -> list[tuple[str, int]]:
    """Read stored references ``[[segment id, chunk count], ...]``; anything else is ``WorkflowCheckpointException``.

    ``backend`` names where they were read ("Redis", "PostgreSQL") in the error.
    """
    try:
        refs = json.loads(references.decode("utf-8"))
        if not isinstance(refs, list) or len(cast("list[Any]", refs)) > _MAX_REFERENCES:
            raise ValueError("not a list of references")
        parsed: list[tuple[str, int]] = []
        for ref in cast("list[Any]", refs):
            if not isinstance(ref, list) or len(cast("list[Any]", ref)) != 2:
                raise ValueError("a reference is not [segment, count]")
            segment, count = cast("list[Any]", ref)
            if not isinstance(segment, str) or type(count) is not int or count < 0:
                raise ValueError("a reference is not [segment, count]")
            parsed.append((segment, count))
    except Exception as exc:  # UnicodeDecodeError, JSONDecodeError, RecursionError, the shape
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id} in {backend} has corrupted segment references; it was not loaded."
        ) from exc
    return parsed


async def read_chunks(
    client: Any, prefix: str, references: list[tuple[str, int]], sealer: CheckpointSealer | None
) -> list[list[str]] | None:
    """The first ``count`` chunks of each referenced segment, in order (opened when sealed); None when one lost chunks.

    Raises:
        WorkflowCheckpointException: A chunk is refused by the sealer or is not UTF-8.
    """
    async with client.pipeline(transaction=False) as pipe:
        for segment, count in references:
            pipe.lrange(f"{prefix}segment:{segment}", 0, count - 1)
        found = cast("list[list[Any]]", await pipe.execute())
    if any(len(chunks) != ref[1] for chunks, ref in zip(found, references, strict=True)):
        return None
    opened: list[list[str]] = []
    for (segment, _count), chunks in zip(references, found, strict=True):
        texts: list[str] = []
        for index, chunk in enumerate(chunks):
            raw = chunk if isinstance(chunk, bytes) else str(chunk).encode("utf-8", "surrogatepass")
            texts.append(open_chunk(segment, index, raw, sealer))
        opened.append(texts)
    return opened


def open_chunk(segment: str, index: int, raw: bytes, sealer: CheckpointSealer | None) -> str:
    """One stored chunk as text: opened first with a sealer (bound to its segment and index), then decoded."""
    if sealer is not None:
        raw = sealer.open(raw, context=chunk_context(segment, index))  # before any parsing
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkflowCheckpointException(f"A chunk of segment {segment} is not UTF-8; not loaded.") from exc
