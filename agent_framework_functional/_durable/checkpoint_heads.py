"""Checkpoint heads carried inside step-cache chunks: id, previous id and timestamp in a few bytes.

A storage that keeps no record per checkpoint (``_durable/redis_checkpoint.py``) stores each
checkpoint's head in the chunk its save appends (:class:`~.checkpoint_delta.StepCacheDeduper` with
``inline_heads``): ``"i"`` the checkpoint id; ``"p"`` the previous id, only when it is not the id of
the segment's previous chunk (None for a segment's first chunk); ``"t"`` the timestamp, as the
microseconds since the previous chunk's timestamp when that gives back the exact text core wrote,
else the text itself (always in a segment's first chunk).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

_MICROSECOND = timedelta(microseconds=1)


def _parsed(timestamp: Any) -> datetime | None:
    """``timestamp`` as an aware datetime (the base of the next delta), or None.

    Writer and reader parse the same text the same way, and a delta is stored only when adding it to
    this base gives back the exact text, so the base itself need not print as ``timestamp``.
    """
    if not isinstance(timestamp, str):
        return None
    try:
        parsed = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def head_fields(
    head: list[Any], first: bool, last_id: str | None, last_time: datetime | None
) -> tuple[dict[str, Any], datetime | None]:
    """The chunk fields of a head ``[id, previous id, timestamp]`` after the segment's previous chunk.

    Returns:
        The fields, and this head's timestamp as a datetime (None when it is not stored as a delta base).
    """
    checkpoint_id, previous_id, timestamp = head
    fields: dict[str, Any] = {"i": checkpoint_id}
    if previous_id != (None if first else last_id):
        fields["p"] = previous_id
    time = _parsed(timestamp)
    if time is not None and last_time is not None and not first:
        delta = (time - last_time) // _MICROSECOND
        if (last_time + timedelta(microseconds=delta)).isoformat() == timestamp:
            fields["t"] = delta
            return fields, time
    fields["t"] = timestamp
    return fields, time


def read_heads(chunks: list[dict[str, Any]]) -> list[list[Any]]:
    """The heads ``[id, previous id, timestamp]`` of a segment's chunks, from its first chunk on.

    Raises:
        ValueError: A chunk holds no well-formed head.
    """
    heads: list[list[Any]] = []
    last_id: str | None = None
    last_time: datetime | None = None
    for chunk in chunks:
        checkpoint_id, stamp = chunk["i"], chunk["t"]
        previous = chunk.get("p", last_id)
        if not isinstance(checkpoint_id, str) or not isinstance(previous, (str, type(None))):
            raise ValueError("a chunk's head is not [id, previous id, timestamp]")
        if type(stamp) is int and last_time is not None:
            last_time = last_time + timedelta(microseconds=stamp)
            stamp = last_time.isoformat()
        elif isinstance(stamp, str):
            last_time = _parsed(stamp)
        else:
            raise ValueError("a chunk's timestamp is neither text nor a delta after one")
        heads.append([checkpoint_id, previous, stamp])
        last_id = checkpoint_id
    return heads
