"""Redis side of step-cache de-duplication: a checkpoint head over segment chunks, saved and deleted by Lua scripts.

Keys, under the storage's namespace: the checkpoint hash gains a ``segments`` field (its references,
JSON ``[[segment id, chunk count], ...]``) and its ``body`` holds the head; ``segment:<id>`` is a
list of chunks; ``segrefs:<id>`` counts the checkpoints that reference the segment. A save checks
that every referenced segment still holds its chunks (else it writes nothing and returns 0, and the
storage saves again with one segment holding everything); a delete drops its references and deletes
a segment once nothing references it. Every referenced segment expires with the checkpoint that was
saved last over it. See ``_checkpoint_delta.py`` for the layout of heads and chunks.
"""

from __future__ import annotations

from typing import Any, cast

# KEYS[1] = checkpoint key, KEYS[2] = workflow index. ARGV: 1 checkpoint id, 2 workflow name, 3 body,
# 4 references (JSON), 5 own segment id, 6 chunk ('' = none), 7 chunks the own segment must hold,
# 8 now (ms), 9 ttl (ms, '' = none), 10 index cutoff ('(<ms>'), 11 key prefix ('<namespace>:').
SAVE_SCRIPT = """
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
  for _, ref in ipairs(cjson.decode(old)) do
    if redis.call('DECR', p .. 'segrefs:' .. ref[1]) <= 0 and not keep[ref[1]] then
      redis.call('DEL', p .. 'segrefs:' .. ref[1], p .. 'segment:' .. ref[1])
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

# KEYS[1] = checkpoint key. ARGV: 1 checkpoint id, 2 key prefix ('<namespace>:'). Returns 1 if deleted.
DELETE_SCRIPT = """
local p = ARGV[2]
local fields = redis.call('HMGET', KEYS[1], 'workflow_name', 'segments')
if fields[2] then
  for _, ref in ipairs(cjson.decode(fields[2])) do
    if redis.call('DECR', p .. 'segrefs:' .. ref[1]) <= 0 then
      redis.call('DEL', p .. 'segrefs:' .. ref[1], p .. 'segment:' .. ref[1])
    end
  end
end
local deleted = redis.call('DEL', KEYS[1])
if fields[1] then redis.call('ZREM', p .. 'workflow:' .. fields[1], ARGV[1]) end
return deleted
"""


async def read_chunks(client: Any, prefix: str, references: list[list[Any]]) -> list[list[Any]] | None:
    """The first ``count`` chunks of each referenced segment, in order; None when one lost chunks."""
    async with client.pipeline(transaction=False) as pipe:
        for segment, count in references:
            pipe.lrange(f"{prefix}segment:{segment}", 0, int(count) - 1)
        found = cast("list[list[Any]]", await pipe.execute())
    if any(len(chunks) != int(ref[1]) for chunks, ref in zip(found, references, strict=True)):
        return None
    return found
