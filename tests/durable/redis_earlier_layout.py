"""A ``RedisCheckpointStorage`` that writes step-cache checkpoints in the earlier layout (a hash per checkpoint).

Versions before the segment layout (``_durable/redis_segments.py``) stored each checkpoint of a run
this package drives as a hash ``checkpoint:<id>`` (``workflow_name``, ``body`` = the head,
``segments`` = its references), an entry in the ``workflow:<name>`` sorted set, and its chunks in
``segment:<id>`` lists counted by ``segrefs:<id>``. This writer keeps that save script, so tests can
show that what a deployed version stored still loads, lists, deletes and stays sealed.
"""

from __future__ import annotations

import time
from typing import Any

from agent_framework import WorkflowCheckpoint

from agent_framework_functional import RedisCheckpointStorage
from agent_framework_functional._durable.checkpoint_delta import DeltaSave, StepCacheDeduper
from agent_framework_functional._durable.redis_delta import STORED_SEGMENTS

# The earlier save script, as it was released. KEYS[1] = checkpoint key, KEYS[2] = workflow index.
# ARGV: 1 checkpoint id, 2 workflow name, 3 body, 4 references (JSON), 5 own segment id, 6 chunk ('' = none),
# 7 chunks the own segment must hold, 8 now (ms), 9 ttl (ms, '' = none), 10 index cutoff, 11 key prefix.
EARLIER_SAVE_SCRIPT = (
    STORED_SEGMENTS
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


class EarlierLayoutStorage(RedisCheckpointStorage):
    """Saves step-cache checkpoints as the earlier version did; reads, lists and deletes as today's storage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deduper = StepCacheDeduper(self.allowed_checkpoint_types)  # heads apart from the chunks
        self._earlier_save: Any = self._client.register_script(EARLIER_SAVE_SCRIPT)

    async def _write_delta(
        self, checkpoint: WorkflowCheckpoint, plan: DeltaSave, head: bytes, chunk: bytes | None
    ) -> bool:
        now_ms = time.time() * 1000
        ttl = "" if self._ttl_ms is None else str(self._ttl_ms)
        cutoff = "" if self._ttl_ms is None else f"({now_ms - self._ttl_ms}"
        keys = [self._checkpoint_key(checkpoint.checkpoint_id), self._index_key(checkpoint.workflow_name)]
        args = [checkpoint.checkpoint_id, checkpoint.workflow_name, head, plan.references, plan.segment]
        args += [chunk or b"", plan.chunk_index, now_ms, ttl, cutoff, self._prefix]
        return bool(int(await self._earlier_save(keys=keys, args=args)))
