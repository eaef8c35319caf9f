"""Step-cache de-duplication for checkpoint storages: each step result stored once, each checkpoint a small head.

Core's every checkpoint holds the whole step cache (N(N+1)/2 entries for N steps). A save with a ``StepCacheOffer``
is a **chunk** appended to its run's **segment** (new cache entries, keys front-coded; input and other fields
when changed), a **head** (id, previous id, timestamp) and **references** ``[[segment id, chunk count], ...]``;
any other save is core's whole encoding (head inside), the one chunk of a new segment. The backend, for a
:class:`DeltaSave`, atomically and only if ``plan.segment`` holds exactly ``plan.chunk_index`` chunks and each
other referenced segment at least its count: appends ``plan.chunk``, stores the head, counts a reference per
segment; then :meth:`StepCacheDeduper.saved`, or on a failed check ``prepare(..., fresh=True)``.
With ``inline_heads`` a chunk carries its head: ``"i"`` id, ``"p"`` previous id (if not the prior chunk's),
``"t"`` microseconds after the prior chunk's time when that gives core's exact text back, else the text.
"""

from __future__ import annotations

import json
import os
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast
from weakref import WeakKeyDictionary

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._core_compat import core_encode_checkpoint_value
from .._step_cache import ORIGINAL_MESSAGE, STEP_CACHE, STEP_COUNTS, StepCacheLog, StepCacheOffer
from .checkpoint_pickles import PICKLED, decode_value, unsavable

_HEAD = ("checkpoint_id", "previous_checkpoint_id", "timestamp")
_PICKLE_KEY = json.dumps(PICKLED)  # how a pickle envelope's key appears in a chunk's JSON text
_KNOWN_HEADS = 256  # references of recently saved or loaded checkpoints, to continue a restore's segments
_MICROSECOND = timedelta(microseconds=1)
_PROGRESS = ("chunks", "cache_done", "counts_done", "last_key", "message", "rest", "last_id", "last_time")


class _Segment:
    """What one run stored in its segment so far."""

    def __init__(self, parents: list[list[Any]], done: tuple[int, int]) -> None:
        self.id = secrets.token_hex(8)
        self.parents = parents
        self.cache_done, self.counts_done = done
        self.marks: list[tuple[int, int]] = []  # (cache_done, counts_done) after each chunk
        self.chunks, self.last_key, self.rest, self.message = 0, "", "", cast("Any", None)
        self.last_id: str | None = None  # the head of the segment's last chunk (inline heads)
        self.last_time: datetime | None = None


@dataclass(slots=True)
class DeltaSave:
    """One planned save: append ``chunk`` (None: nothing changed) to ``segment`` holding ``chunk_index`` chunks."""

    segment: str
    chunk: str | None
    chunk_index: int
    refs: list[list[Any]]
    sizes: tuple[int, int]
    offer: StepCacheOffer | None
    log: StepCacheLog | None  # None: a whole checkpoint, alone in its segment
    state: _Segment
    after: tuple[int, int, int, str, Any, str, str | None, datetime | None]  # the _PROGRESS fields, in order


class StepCacheDeduper:
    """Splits checkpoints of runs this package drives into heads and chunks, and joins them back (no I/O).

    ``allowed_types``: the storage's extra types; ``inline_heads``: each head in its chunk (:meth:`assemble_inline`).
    """

    def __init__(self, allowed_types: frozenset[str], *, inline_heads: bool = False) -> None:
        self._allowed_types = allowed_types
        self._inline = inline_heads
        self._separators = (",", ":") if inline_heads else None
        self._segments: WeakKeyDictionary[StepCacheLog, _Segment] = WeakKeyDictionary()
        self._known: OrderedDict[str, tuple[list[list[Any]], tuple[int, int]]] = OrderedDict()

    def prepare(
        self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None, *, fresh: bool = False
    ) -> DeltaSave:
        """Plan the save of ``checkpoint``: a chunk of its run's segment, or (no offer, or not its offer) alone.

        Call before a save's first ``await`` (core's dicts may change later). ``fresh``: a new segment with
        every entry (after the backend refused a plan).

        Raises:
            WorkflowCheckpointException: A part cannot be encoded, or would not decode under the allowed types.
        """
        ours = offer if offer is not None and offer.take(checkpoint.state) else None
        try:
            return (self._plan(checkpoint, ours, fresh) if ours is not None else None) or self._whole(checkpoint)
        except WorkflowCheckpointException:
            raise
        except Exception as exc:
            raise unsavable(checkpoint.checkpoint_id) from exc

    def _whole(self, checkpoint: WorkflowCheckpoint) -> DeltaSave:
        """A one-chunk segment holding core's whole encoding of ``checkpoint`` (its head inside)."""
        encoded = core_encode_checkpoint_value(checkpoint.to_dict())
        decode_value(encoded, self._allowed_types)  # refused now when a load would refuse it later
        seg = _Segment([], (0, 0))
        text = json.dumps(encoded, ensure_ascii=False)
        after = (1, 0, 0, "", None, "", None, None)
        return DeltaSave(seg.id, text, 0, [[seg.id, 1]], (0, 0), None, None, seg, after)

    def _plan(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer, fresh: bool) -> DeltaSave | None:
        log = offer.log
        seg = None if fresh else self._segments.get(log)
        if seg is None:
            seg = self._start(log, checkpoint.previous_checkpoint_id, fresh)
        rest = checkpoint.to_dict()
        head = [rest.pop(name) for name in _HEAD]
        rest["state"] = {**checkpoint.state, STEP_CACHE: {}, STEP_COUNTS: {}, ORIGINAL_MESSAGE: None}
        encoded_rest = core_encode_checkpoint_value(rest)
        encoded_state = encoded_rest.get("state")
        if not isinstance(encoded_state, dict) or STEP_CACHE not in encoded_state:
            return None  # core pickled the whole state (a reserved key in it): the checkpoint is saved whole
        rest_json = json.dumps(encoded_rest, ensure_ascii=False)
        chunk: dict[str, Any] = {}
        cache_keys = log.cache_keys[seg.cache_done : offer.cache_len]
        count_keys = log.count_keys[seg.counts_done : offer.counts_len]
        last = seg.last_key
        if cache_keys:
            values = core_encode_checkpoint_value([log.cache[key] for key in cache_keys])
            chunk["c"], last = _front_coded(cache_keys, values, last)
        if count_keys:
            counts = [log.counts[key] for key in count_keys]
            chunk["n"] = counts if count_keys == cache_keys else dict(zip(count_keys, counts, strict=True))
        message = checkpoint.state.get(ORIGINAL_MESSAGE)
        if seg.chunks == 0 or message is not seg.message:
            chunk["m"] = core_encode_checkpoint_value(message)
        if seg.chunks == 0 or rest_json != seg.rest:
            chunk["h"] = encoded_rest
        time = self._add_head(chunk, head, seg) if self._inline else seg.last_time
        text = json.dumps(chunk, ensure_ascii=False, separators=self._separators) if chunk else None
        if text is not None and _PICKLE_KEY in text:  # refused now when a load would refuse it later
            decode_value(chunk, self._allowed_types)
        chunks = seg.chunks + (1 if text is not None else 0)
        return DeltaSave(
            segment=seg.id,
            chunk=text,
            chunk_index=seg.chunks,
            refs=[*seg.parents, [seg.id, chunks]],
            sizes=(len(cast("dict[str, Any]", checkpoint.state[STEP_CACHE])), len(log.counts)),
            offer=offer,
            log=log,
            state=seg,
            after=(chunks, offer.cache_len, offer.counts_len, last, message, rest_json, head[0], time),
        )

    @staticmethod
    def _add_head(chunk: dict[str, Any], head: list[Any], seg: _Segment) -> datetime | None:
        """Put the head (and, in a segment's first chunk, its parents) in the chunk; return its timestamp."""
        fields, time = head_fields(head, seg.chunks == 0, seg.last_id, seg.last_time)
        chunk.update(fields)
        if seg.chunks == 0:
            chunk["r"] = seg.parents
        return time

    def _start(self, log: StepCacheLog, previous_id: str | None, fresh: bool) -> _Segment:
        """A new segment for ``log``, continuing the segments of the pause or checkpoint its run starts from."""
        if not fresh and log.parent is not None:
            parent_log, cache_len, counts_len = log.parent
            parent = self._segments.get(parent_log)
            if parent is not None and (cache_len, counts_len) in parent.marks:
                index = len(parent.marks) - parent.marks[::-1].index((cache_len, counts_len))
                return _Segment([*parent.parents, [parent.id, index]], (cache_len, counts_len))
        elif not fresh and previous_id is not None and log.base != (0, 0):
            known = self._known.get(previous_id)
            if known is not None and known[1] == log.base:
                return _Segment(list(known[0]), log.base)
        return _Segment([], (0, 0))

    def saved(self, plan: DeltaSave, checkpoint_id: str) -> None:
        """Record that the backend stored ``plan`` under ``checkpoint_id`` (the run's next save appends after it)."""
        if plan.log is None:
            return
        seg = plan.state
        for name, value in zip(_PROGRESS, plan.after, strict=True):
            setattr(seg, name, value)
        if plan.chunk is not None:
            seg.marks.append((seg.cache_done, seg.counts_done))
        self._segments[plan.log] = seg
        self._remember(checkpoint_id, plan.refs, plan.sizes)

    def snapshot(self, log: StepCacheLog) -> tuple[_Segment, list[Any], int] | None:
        """What the run of ``log`` has stored so far, for :meth:`rewind` (None: nothing yet)."""
        seg = self._segments.get(log)
        return None if seg is None else (seg, [getattr(seg, name) for name in _PROGRESS], len(seg.marks))

    def rewind(self, log: StepCacheLog, snapshot: tuple[_Segment, list[Any], int] | None) -> None:
        """Forget the saves of ``log``'s run since :meth:`snapshot` (they were never written)."""
        self._segments.pop(log, None)
        if snapshot is not None:
            seg, progress, marks = snapshot
            for name, value in zip(_PROGRESS, progress, strict=True):
                setattr(seg, name, value)
            del seg.marks[marks:]
            self._segments[log] = seg

    def forget(self, plan: DeltaSave) -> None:
        """The backend refused ``plan`` (a segment is gone): the run's next save starts a new segment."""
        if plan.log is not None:
            self._segments.pop(plan.log, None)

    def _remember(self, checkpoint_id: str, refs: list[list[Any]], sizes: tuple[int, int]) -> None:
        self._known[checkpoint_id] = (refs, sizes)
        self._known.move_to_end(checkpoint_id)
        while len(self._known) > _KNOWN_HEADS:
            self._known.popitem(last=False)

    def assemble(
        self, checkpoint_id: str, head: bytes, refs: list[list[Any]], chunks: list[list[str]]
    ) -> WorkflowCheckpoint:
        """A checkpoint from its head line, references and each reference's first chunks.

        Raises WorkflowCheckpointException when they form no checkpoint or hold a type outside the allow-list.
        """
        try:
            encoded, sizes = _joined([[json.loads(text) for text in texts] for texts in chunks], json.loads(head))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise _incomplete(checkpoint_id) from exc
        checkpoint = WorkflowCheckpoint.from_dict(decode_value(encoded, self._allowed_types))
        self._remember(checkpoint_id, refs, sizes)
        return checkpoint

    def assemble_inline(
        self, checkpoint_id: str, refs: list[tuple[str, int]], chunks: list[list[str]]
    ) -> WorkflowCheckpoint:
        """A checkpoint saved with ``inline_heads`` from the opened chunks of ``refs`` (its own segment's last).

        Raises WorkflowCheckpointException when they form no such checkpoint or hold a type outside the allow-list.
        """
        try:
            parsed = [[json.loads(text) for text in texts] for texts in chunks]
            own = parsed[-1]
            head = None
            if not _whole(parsed):
                if own[0]["r"] != [list(ref) for ref in refs[:-1]] or len(own) != refs[-1][1]:
                    raise ValueError("the chunks are not those of this checkpoint's segments")
                head = read_heads(own)[-1]
                if head[0] != checkpoint_id:
                    raise ValueError("the chunk holds another checkpoint's head")
            encoded, sizes = _joined(parsed, head)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
            raise _incomplete(checkpoint_id) from exc
        checkpoint = WorkflowCheckpoint.from_dict(decode_value(encoded, self._allowed_types))
        self._remember(checkpoint_id, [list(ref) for ref in refs], sizes)
        return checkpoint


def _incomplete(checkpoint_id: str) -> WorkflowCheckpointException:
    return WorkflowCheckpointException(
        f"Checkpoint {checkpoint_id} is incomplete or corrupted in storage and cannot be loaded."
    )


def _whole(chunks: list[list[Any]]) -> bool:
    """Whether parsed chunks are one segment of one chunk holding core's whole encoding of a checkpoint."""
    return (
        len(chunks) == 1 and len(chunks[0]) == 1 and isinstance(chunks[0][0], dict) and "checkpoint_id" in chunks[0][0]
    )


def _joined(chunks: list[list[Any]], head: list[Any] | None) -> tuple[dict[str, Any], tuple[int, int]]:
    """The encoded checkpoint that parsed chunks (per segment, in order) and a head make; and its cache sizes."""
    if _whole(chunks):
        return chunks[0][0], (0, 0)
    cache: dict[str, Any] = {}
    counts: dict[str, Any] = {}
    message: Any = None
    rest: dict[str, Any] | None = None
    for segment in chunks:
        last = ""  # front coding starts again in each segment
        for chunk in segment:
            keys: list[str] = []
            for shared, suffix, value in chunk.get("c", ()):
                last = last[:shared] + suffix
                cache[last] = value
                keys.append(last)
            numbers = chunk.get("n")
            if isinstance(numbers, list):
                counts.update(zip(keys, cast("list[Any]", numbers), strict=True))
            elif numbers:
                counts.update(cast("dict[str, Any]", numbers))
            message = chunk.get("m", message)
            rest = chunk.get("h", rest)
    if rest is None or head is None:
        raise ValueError("no checkpoint fields in its chunks")
    encoded = {**rest, **dict(zip(_HEAD, head, strict=True))}
    encoded["state"] = {**rest["state"], STEP_CACHE: cache, STEP_COUNTS: counts, ORIGINAL_MESSAGE: message}
    return encoded, (len(cache), len(counts))


def _front_coded(keys: list[str], values: list[Any], last: str) -> tuple[list[list[Any]], str]:
    """Cache entries as ``[shared prefix length, key suffix, value]`` after ``last``; and the new last key."""
    entries: list[list[Any]] = []
    for key, value in zip(keys, values, strict=True):
        shared = len(os.path.commonprefix([last, key]))  # noqa: RUF071 - a character prefix is meant
        entries.append([shared, key[shared:], value])
        last = key
    return entries, last


def _parsed(timestamp: Any) -> datetime | None:
    """``timestamp`` as an aware datetime (a delta's base: writer and reader parse the same text alike), or None."""
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
    """The chunk fields of a head ``[id, previous id, timestamp]``, and its time (None: no delta base)."""
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
    """The heads ``[id, previous id, timestamp]`` of a segment's chunks; ValueError if one has no well-formed head."""
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
