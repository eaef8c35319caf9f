"""Redis step-cache checkpoints of the earlier layout (a hash per checkpoint), and the sealing contexts.

Checkpoints saved before ``_durable/redis_segments.py``'s layout keep, under the storage's namespace,
a hash ``checkpoint:<id>`` whose ``body`` holds the head and whose ``segments`` field its references
(JSON ``[[segment id, chunk count], ...]``); ``segment:<id>`` lists their chunks and ``segrefs:<id>``
counts the checkpoints that reference a segment. They still load (:func:`parse_references`,
:func:`read_chunks`) and delete (the new scripts free their references too); nothing writes them
any more. See ``_durable/checkpoint_delta.py`` for heads and chunks.

With a :class:`~.checkpoint_seal.CheckpointSealer`, a head of that layout is sealed under
:func:`head_context` (its checkpoint id and its exact references, so neither can change) and every
chunk (both layouts; PostgreSQL's too) under :func:`chunk_context` (its segment id and index, so
chunks cannot be swapped, reordered or moved between segments); :func:`open_chunk` opens a chunk
before anything parses it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from agent_framework import WorkflowCheckpointException

if TYPE_CHECKING:
    from .checkpoint_seal import CheckpointSealer

_MAX_REFERENCES = 4096

# Lua: the segment ids of stored references (JSON); none when they are not well-formed.
STORED_SEGMENTS = """
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
        found = cast("list[Any]", await pipe.execute(raise_on_error=False))  # a key of another type: lost
    if any(
        not isinstance(chunks, list) or len(cast("list[Any]", chunks)) != ref[1]
        for chunks, ref in zip(found, references, strict=True)
    ):
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
