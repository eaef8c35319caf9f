"""Rows of ``PostgresCheckpointStorage``: a checkpoint's head and chunk in one row, and back.

The head is kept in native columns (core's timestamp as microseconds when it renders back to the same text);
an id that is not a canonical random uuid is stored under a name-based uuid of it (:func:`row_key`), its head
then a JSON line before the chunk in ``body``. Sealed, the head line and chunk are sealed together under
:func:`row_context`, so a chunk cannot be swapped, reordered or moved, and the head binds the id.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from .checkpoint_delta import DeltaSave
    from .checkpoint_seal import CheckpointSealer

_NAMESPACE = uuid.UUID("5b0c7f64-2a6e-5d3b-9c41-7e8f0a1d2c3b")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
_HEX_SEGMENT = re.compile(r"[0-9a-f]{16}")
_UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")  # version 4, RFC 4122
_SIGN = 1 << 63
_WORD = 1 << 64

Unseal = Callable[[str, bytes, bytes], bytes]
"""Opens a stored body (checkpoint id for messages, body, context); the storage's ``_unseal``."""


def row_key(checkpoint_id: str) -> str:
    """The ``uuid`` a checkpoint id is stored under: itself if a canonical random uuid (core's), else a uuid5 of it."""
    if _UUID4.fullmatch(checkpoint_id):
        return checkpoint_id
    return str(uuid.uuid5(_NAMESPACE, checkpoint_id))


def storable(text: str | None) -> bool:
    """Whether PostgreSQL text can hold ``text`` (None included): valid UTF-8 (no lone surrogate), no NUL."""
    if text is None:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def check_storable(checkpoint: WorkflowCheckpoint) -> None:
    """Raise ``WorkflowCheckpointException`` when PostgreSQL text cannot hold its id, previous id or workflow name."""
    names = (checkpoint.checkpoint_id, checkpoint.previous_checkpoint_id, checkpoint.workflow_name)
    if not all(storable(name) for name in names):
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint.checkpoint_id!r} cannot be stored in PostgreSQL: its id, previous id or "
            "workflow name holds a NUL character or is not UTF-8."
        )


PREPARED_PARAMS_MAX = 64
"""A save's statement with more parameters (several held saves, 13 each) is never prepared: each size would
keep its own plan in the server session (about 1 MB at 200 saves)."""


async def execute_save(conn: AsyncConnection[Any], checkpoint_id: str, statement: Any, params: Any) -> Any:
    """Run a save's statement; a row too large for an index entry raises ``WorkflowCheckpointException``."""
    from psycopg.errors import ProgramLimitExceeded

    prepare = None if len(params) <= PREPARED_PARAMS_MAX else False  # None: the connection's threshold (0)
    try:
        return await conn.execute(statement, params, prepare=prepare)
    except ProgramLimitExceeded as exc:  # not an outage: the same row fails every time
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id[:80]!r} cannot be stored in PostgreSQL (its id or workflow name is too "
            f"long for an index): {str(exc).splitlines()[0]}"
        ) from exc


def timestamp_micros(timestamp: object) -> int | None:
    """Core's timestamp as microseconds since the epoch, when :func:`timestamp_text` gives it back exactly."""
    if not isinstance(timestamp, str):
        return None
    try:
        moment = datetime.fromisoformat(timestamp)
        micros = (moment - _EPOCH) // _MICROSECOND
    except (ValueError, TypeError, OverflowError):  # not ISO, or naive
        return None
    return micros if timestamp_text(micros) == timestamp else None


def timestamp_text(micros: int) -> str:
    """The UTC ISO text of a timestamp stored as microseconds (``datetime.isoformat``, as core writes it)."""
    return (_EPOCH + micros * _MICROSECOND).isoformat()


def segment_number(segment: str) -> int:
    """A segment id as a signed 64-bit number: its 16 hex digits, or the first 8 bytes of its SHA-256."""
    if _HEX_SEGMENT.fullmatch(segment):
        value = int(segment, 16)
    else:
        value = int.from_bytes(hashlib.sha256(segment.encode("utf-8")).digest()[:8], "big")
    return value - _WORD if value >= _SIGN else value


def segment_name(number: int) -> str:
    """The 16-hex text of a stored segment number (what the de-duplicator is given back)."""
    return f"{number % _WORD:016x}"


def row_context(references: Sequence[tuple[int, int]], holds_chunk: bool) -> bytes:
    """The sealing context of a row: its references (own segment last, with its count) and its kind."""
    refs = json.dumps([[segment_name(segment), count] for segment, count in references], separators=(",", ":"))
    return b"afs-pg3\x00" + refs.encode("ascii") + (b"\x00chunk" if holds_chunk else b"\x00head")


def head_line(checkpoint_id: str, previous_id: str | None, timestamp: str) -> bytes:
    """The head ``[id, previous id, timestamp]`` as compact JSON."""
    return json.dumps([checkpoint_id, previous_id, timestamp], ensure_ascii=False, separators=(",", ":")).encode()


def delta_params(
    checkpoint: WorkflowCheckpoint,
    plan: DeltaSave,
    sealer: CheckpointSealer | None,
    times: tuple[float, float | None],
) -> tuple[Any, ...]:
    """The arguments of ``save_delta_checkpoint`` for a planned save (``times``: saved at, expires at)."""
    refs = [(segment_number(str(ref[0])), int(ref[1])) for ref in plan.refs]
    holds = plan.chunk is not None
    chunk = plan.chunk.encode("utf-8") if plan.chunk is not None else b""
    checkpoint_id, previous = checkpoint.checkpoint_id, checkpoint.previous_checkpoint_id
    timestamp = checkpoint.timestamp
    key = row_key(checkpoint_id)
    previous_key = None if previous is None else row_key(previous)
    micros = timestamp_micros(timestamp)
    if sealer is None and key == checkpoint_id and previous_key == previous and micros is not None:
        body = chunk
    else:
        body = head_line(checkpoint_id, previous, timestamp) + (b"\n" + chunk if holds else b"")
        if sealer is not None:
            body = sealer.seal(body, context=row_context(refs, holds))
    parents = refs[:-1]
    parent_ids = [segment for segment, _ in parents] or None
    parent_counts = [count for _, count in parents] or None
    own, count = refs[-1]
    saved_at, expires_at = times
    params = (key, checkpoint_id, previous_key, micros, checkpoint.workflow_name, saved_at, expires_at, body)
    return (*params, own, count, holds, parent_ids, parent_counts)


def _split(body: bytes) -> tuple[bytes | None, bytes]:
    """The head line (None: the columns hold it) and the chunk of an opened body."""
    if body[:1] == b"[":
        head, _, chunk = body.partition(b"\n")
        return head, chunk
    return None, body


def row_references(row: Sequence[Any]) -> list[tuple[int, int]]:
    """A loaded row's references (its segment's parents, then its own with its count); corrupt ones raise."""
    ids, counts = row[8] or (), row[9] or ()
    if len(ids) != len(counts) or any(count is None or count < 0 for count in counts) or None in ids:
        raise WorkflowCheckpointException(
            f"Checkpoint {row[3]} in PostgreSQL has corrupted segment references; it was not loaded."
        )
    return [
        *((int(segment), int(count)) for segment, count in zip(ids, counts, strict=True)),
        (int(row[0]), int(row[5])),
    ]


def row_head(row: Sequence[Any], unseal: Unseal, sealed: bool) -> tuple[str, bytes]:
    """A loaded row's checkpoint id and head line, opened and checked against the row's key (else it raises).

    ``row``: ``segment_id, saved_at, ts, checkpoint_id, previous_id, chunks, holds_chunk, body, parent_ids,
    parent_counts``.
    """
    key = str(row[3])
    body = bytes(row[7])
    if sealed or body.startswith(b"afs1:"):
        body = unseal(key, body, row_context(row_references(row), bool(row[6])))
    head, _ = _split(body)
    if head is None:
        if row[2] is None:
            raise WorkflowCheckpointException(f"Checkpoint {key} in PostgreSQL has no timestamp; it was not loaded.")
        previous = None if row[4] is None else str(row[4])
        return key, head_line(key, previous, timestamp_text(int(row[2])))
    checkpoint_id = json.loads(head)[0]
    if not isinstance(checkpoint_id, str) or row_key(checkpoint_id) != key:
        raise WorkflowCheckpointException(f"The head stored for checkpoint {key} is another checkpoint's; not loaded.")
    return checkpoint_id, head


def chunk_map(rows: list[tuple[Any, ...]]) -> dict[tuple[int, int], bytes]:
    """Chunk rows ``(segment_id, chunks, body)`` by ``(segment, chunk index)``."""
    return {(int(row[0]), int(row[1]) - 1): bytes(row[2]) for row in rows}


def gather_row_chunks(
    references: list[tuple[int, int]], found: dict[tuple[int, int], bytes], unseal: Unseal, sealed: bool
) -> list[list[str]] | None:
    """For each ``(segment, count)`` reference, its first ``count`` chunks from ``found``, opened; None if one is gone.

    A chunk the sealer refuses or that is not UTF-8 raises ``WorkflowCheckpointException``.
    """
    opened: list[list[str]] = []
    for position, (segment, count) in enumerate(references):
        texts: list[str] = []
        for index in range(count):
            raw = found.get((segment, index))
            if raw is None:
                return None
            if sealed or raw.startswith(b"afs1:"):
                context = row_context([*references[:position], (segment, index + 1)], True)
                raw = unseal(segment_name(segment), raw, context)
            try:
                texts.append(_split(raw)[1].decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise WorkflowCheckpointException(f"A chunk of segment {segment_name(segment)} is not UTF-8.") from exc
        opened.append(texts)
    return opened
