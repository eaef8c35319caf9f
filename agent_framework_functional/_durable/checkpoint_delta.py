"""Step-cache de-duplication for checkpoint storages: each step result stored once, each checkpoint a small head.

Core saves a checkpoint after every ``@step`` call, and each one holds the whole step cache, so a
run of N steps would store N(N+1)/2 entries. For runs this package drives, core's save comes with a
:class:`~._step_cache.StepCacheOffer` (the run's cache in insertion order); a storage that holds a
:class:`StepCacheDeduper` stores a checkpoint as:

* **chunks**, appended to a **segment** (one per run and storage): the entries added since the
  run's previous save (keys front-coded against the previous key of the segment), the workflow
  input when it changed, and the checkpoint's other fields (with the step cache left out) when they
  changed. Encoded with core's checkpoint encoding, so values decode under the same allow-list.
* a **head**: the checkpoint id, previous id and timestamp, plus its **references**
  ``[[segment id, chunk count], ...]`` (the segments of the pauses and restores it continues,
  oldest first; a few at most).

Loading reads the referenced chunks in order, rebuilds core's encoding of the saved checkpoint and decodes
it with core's decoder. A checkpoint saved without an offer (core used directly) is stored whole.

A backend (``_durable/redis_checkpoint.py`` does this with one Lua script) must, for a :class:`DeltaSave`:
store atomically, and only when ``plan.segment`` holds exactly ``plan.chunk_index`` chunks and every
other referenced segment holds at least its count: append ``plan.chunk`` (if any) to
``plan.segment``, store ``plan.body`` and ``plan.references`` under the checkpoint id, and count one
reference per referenced segment. When a check fails it calls :meth:`StepCacheDeduper.prepare`
again with ``fresh=True`` (one segment holding everything). After a write it calls
:meth:`StepCacheDeduper.saved`. Deleting a checkpoint drops its references and deletes a segment
nothing references any more. With ``inline_heads`` (Redis) every save appends a chunk that carries
the head (``_durable/checkpoint_heads.py``; a segment's first chunk also its parents) and ``body`` is
empty: the backend maps the id to ``(segment, chunk_index)`` and loads with
:meth:`StepCacheDeduper.assemble_inline`.
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast
from weakref import WeakKeyDictionary

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._step_cache import ORIGINAL_MESSAGE, STEP_CACHE, STEP_COUNTS, StepCacheLog, StepCacheOffer
from .checkpoint_heads import head_fields, read_heads
from .checkpoint_pickles import PICKLED, decode_value, encode_value, unsavable

_HEAD = ("checkpoint_id", "previous_checkpoint_id", "timestamp")
_PICKLE_KEY = json.dumps(PICKLED)  # how a pickle envelope's key appears in a chunk's JSON text
_KNOWN_HEADS = 256  # references of recently saved or loaded checkpoints, to continue a restore's segments


class _Segment:
    """What one run stored in its segment so far (internal)."""

    __slots__ = (
        "cache_done",
        "chunks",
        "counts_done",
        "id",
        "last_id",
        "last_key",
        "last_time",
        "marks",
        "message",
        "parents",
        "rest",
    )

    def __init__(self, parents: list[list[Any]], done: tuple[int, int]) -> None:
        self.id = secrets.token_hex(8)
        self.parents = parents
        self.cache_done, self.counts_done = done
        self.marks: list[tuple[int, int]] = []  # (cache_done, counts_done) after each chunk
        self.chunks, self.last_key, self.rest, self.message = 0, "", "", cast("Any", None)
        self.last_id: str | None = None  # the head of the segment's last chunk (inline heads)
        self.last_time: datetime | None = None


_PROGRESS = ("chunks", "cache_done", "counts_done", "last_key", "message", "rest", "last_id", "last_time")


@dataclass(slots=True)
class DeltaSave:
    """One checkpoint saved as a head over chunks: what the backend writes (see the module docstring).

    Attributes:
        head: ``[checkpoint_id, previous_checkpoint_id, timestamp]``.
        segment: This run's segment id.
        chunk: The JSON chunk to append to ``segment``, or None when nothing changed.
        chunk_index: How many chunks ``segment`` must hold before the append.
        refs: ``[[segment id, chunk count], ...]``, oldest first.
    """

    head: list[Any]
    inline: bool
    segment: str
    chunk: str | None
    chunk_index: int
    refs: list[list[Any]]
    sizes: tuple[int, int]
    offer: StepCacheOffer
    log: StepCacheLog
    state: _Segment
    after: tuple[int, int, int, str, Any, str, str | None, datetime | None]  # the _PROGRESS fields, in order

    @property
    def body(self) -> str:
        """The head as JSON (empty with inline heads: the chunk carries it)."""
        return "" if self.inline else json.dumps(self.head, ensure_ascii=False)

    @property
    def references(self) -> str:
        """``refs`` as JSON (what a sealed head is bound to)."""
        return json.dumps(self.refs)


class StepCacheDeduper:
    """Splits checkpoints of runs this package drives into heads and chunks, and joins them back.

    One per storage object; holds no I/O. See the module docstring for the backend's part.

    Args:
        allowed_types: Extra ``"module:QualName"`` types the storage decodes (as its load does).

    Keyword Args:
        inline_heads: Carry each head in its own chunk (``_durable/checkpoint_heads.py``; every save
            appends one, compact JSON, ``DeltaSave.body`` empty), for a backend that keeps no record
            per checkpoint; load with :meth:`assemble_inline`.
    """

    def __init__(self, allowed_types: frozenset[str], *, inline_heads: bool = False) -> None:
        self._allowed_types = allowed_types
        self._inline = inline_heads
        self._separators = (",", ":") if inline_heads else None
        self._segments: WeakKeyDictionary[StepCacheLog, _Segment] = WeakKeyDictionary()
        self._known: OrderedDict[str, tuple[list[list[Any]], tuple[int, int]]] = OrderedDict()

    def prepare(
        self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None, *, fresh: bool = False
    ) -> DeltaSave | None:
        """Plan the save of ``checkpoint``; None when it must be stored whole (no offer, or not its offer).

        Call before the first ``await`` of the storage's ``save_with_offer``: later steps may change core's dicts.

        Args:
            checkpoint: The checkpoint core hands to ``save``.
            offer: The offer that came with it (``save_with_offer``).

        Keyword Args:
            fresh: Start a new segment holding every entry (after the backend refused a plan).

        Returns:
            What to write, or None to store the checkpoint whole.

        Raises:
            WorkflowCheckpointException: A part cannot be encoded, or would not decode under the
                storage's allowed types.
        """
        if offer is None or not offer.take(checkpoint.state):
            return None
        try:
            return self._plan(checkpoint, offer, fresh)
        except WorkflowCheckpointException:
            raise
        except Exception as exc:
            raise unsavable(checkpoint.checkpoint_id) from exc

    def _plan(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer, fresh: bool) -> DeltaSave | None:
        log = offer.log
        seg = None if fresh else self._segments.get(log)
        if seg is None:
            seg = self._start(log, checkpoint.previous_checkpoint_id, fresh)
        rest = checkpoint.to_dict()
        head = [rest.pop(name) for name in _HEAD]
        rest["state"] = {**checkpoint.state, STEP_CACHE: {}, STEP_COUNTS: {}, ORIGINAL_MESSAGE: None}
        encoded_rest = encode_value(rest)
        encoded_state = encoded_rest.get("state")
        if not isinstance(encoded_state, dict) or STEP_CACHE not in encoded_state:
            return None  # core pickled the whole state (a reserved key in it): store the checkpoint whole
        rest_json = json.dumps(encoded_rest, ensure_ascii=False)
        chunk: dict[str, Any] = {}
        cache_keys = log.cache_keys[seg.cache_done : offer.cache_len]
        count_keys = log.count_keys[seg.counts_done : offer.counts_len]
        last = seg.last_key
        if cache_keys:
            chunk["c"], last = _front_coded(cache_keys, encode_value([log.cache[key] for key in cache_keys]), last)
        if count_keys:
            counts = [log.counts[key] for key in count_keys]
            chunk["n"] = counts if count_keys == cache_keys else dict(zip(count_keys, counts, strict=True))
        message = checkpoint.state.get(ORIGINAL_MESSAGE)
        if seg.chunks == 0 or message is not seg.message:
            chunk["m"] = encode_value(message)
        if seg.chunks == 0 or rest_json != seg.rest:
            chunk["h"] = encoded_rest
        time = self._add_head(chunk, head, seg) if self._inline else seg.last_time
        text = self._chunk_text(chunk) if chunk else None
        chunks = seg.chunks + (1 if text is not None else 0)
        refs = [*seg.parents, [seg.id, chunks]]
        sizes = (len(cast("dict[str, Any]", checkpoint.state[STEP_CACHE])), len(log.counts))
        return DeltaSave(
            head=head,
            inline=self._inline,
            segment=seg.id,
            chunk=text,
            chunk_index=seg.chunks,
            refs=refs,
            sizes=sizes,
            offer=offer,
            log=log,
            state=seg,
            after=(chunks, offer.cache_len, offer.counts_len, last, message, rest_json, head[0], time),
        )

    def _chunk_text(self, chunk: dict[str, Any]) -> str:
        """A chunk's JSON, refused now when load() would refuse it later (only a pickle envelope can fail to decode)."""
        text = json.dumps(chunk, ensure_ascii=False, separators=self._separators)
        if _PICKLE_KEY in text:
            decode_value(chunk, self._allowed_types)
        return text

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
        self._segments.pop(plan.log, None)

    def _remember(self, checkpoint_id: str, refs: list[list[Any]], sizes: tuple[int, int]) -> None:
        self._known[checkpoint_id] = (refs, sizes)
        self._known.move_to_end(checkpoint_id)
        while len(self._known) > _KNOWN_HEADS:
            self._known.popitem(last=False)

    def assemble(self, checkpoint_id: str, body: str, references: str, chunks: list[list[str]]) -> WorkflowCheckpoint:
        """Rebuild a checkpoint from its head and the chunks of its references (in reference order).

        Args:
            checkpoint_id: The checkpoint's id (for errors, and to continue its segments on a restore).
            body: The stored head.
            references: The stored references.
            chunks: For each reference, its first ``count`` chunks, in order.

        Returns:
            The checkpoint core saved.

        Raises:
            WorkflowCheckpointException: The stored parts do not form a checkpoint, or a value
                decodes to a type outside the allow-list.
        """
        try:
            refs = json.loads(references)
            head = json.loads(body)
            encoded, sizes = _joined([[json.loads(text) for text in texts] for texts in chunks], head)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise _incomplete(checkpoint_id) from exc
        checkpoint = WorkflowCheckpoint.from_dict(decode_value(encoded, self._allowed_types))
        self._remember(checkpoint_id, refs, sizes)
        return checkpoint

    def assemble_inline(
        self, checkpoint_id: str, refs: list[tuple[str, int]], chunks: list[list[str]]
    ) -> WorkflowCheckpoint:
        """Rebuild a checkpoint saved with ``inline_heads``: its head is the last chunk of its own segment.

        Args:
            checkpoint_id: The id asked for: the head must name it.
            refs: ``(segment id, chunk count)`` of the parent segments, then of its own segment (up to
                and including its chunk); the parents must be those its segment's first chunk names.
            chunks: For each of ``refs``, its first ``count`` chunks (opened), in order.

        Returns:
            The checkpoint core saved.

        Raises:
            WorkflowCheckpointException: The chunks do not form this checkpoint, or a value decodes
                to a type outside the allow-list.
        """
        try:
            parsed = [[json.loads(text) for text in texts] for texts in chunks]
            own = parsed[-1]
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


def _joined(chunks: list[list[Any]], head: list[Any]) -> tuple[dict[str, Any], tuple[int, int]]:
    """The encoded checkpoint that parsed chunks (per segment, in order) and a head make; and its cache sizes."""
    cache: dict[str, Any] = {}
    counts: dict[str, Any] = {}
    message: Any = None
    rest: dict[str, Any] | None = None
    for segment in chunks:
        last = ""
        for chunk in segment:
            last = _replay_entries(chunk, last, cache, counts)
            if "m" in chunk:
                message = chunk["m"]
            if "h" in chunk:
                rest = chunk["h"]
    if rest is None:
        raise ValueError("no checkpoint fields in its chunks")
    encoded = {**rest, **dict(zip(_HEAD, head, strict=True))}
    encoded["state"] = {**rest["state"], STEP_CACHE: cache, STEP_COUNTS: counts, ORIGINAL_MESSAGE: message}
    return encoded, (len(cache), len(counts))


def _front_coded(keys: list[str], values: list[Any], last: str) -> tuple[list[list[Any]], str]:
    """Cache entries as ``[shared prefix length, key suffix, value]`` after ``last``; and the new last key."""
    entries: list[list[Any]] = []
    for key, value in zip(keys, values, strict=True):
        shared = _shared_prefix(last, key)
        entries.append([shared, key[shared:], value])
        last = key
    return entries, last


def _replay_entries(chunk: dict[str, Any], last: str, cache: dict[str, Any], counts: dict[str, Any]) -> str:
    """Add one chunk's cache entries and request counts; return the last key (front coding goes on from it)."""
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
    return last


def _shared_prefix(previous: str, key: str) -> int:
    """Length of the common prefix of two keys (front coding)."""
    limit = min(len(previous), len(key))
    index = 0
    while index < limit and previous[index] == key[index]:
        index += 1
    return index
