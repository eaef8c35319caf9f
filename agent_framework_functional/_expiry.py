"""Expiry: the one TTL of a pause, a finished run's checkpoint retention, and the one bounded in-memory map.

One TTL governs a pause's token, instance and checkpoint (AGENTS.md invariant 42). A finished run's
checkpoints are kept for ``checkpoint_retention`` (invariant 30): :func:`retain_checkpoints` notes them,
:func:`sweep_retained` (as runs start and finish) deletes those past it. :class:`BoundedMap` bounds every
in-memory map by deadline and count (sessions, attached instances, A2A tasks, DevUI conversations).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import heapq
import itertools
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from agent_framework import CheckpointStorage, InMemoryCheckpointStorage

from ._step_cache import implements
from ._store import DEFAULT_TTL_SECONDS, MAX_DURATION_SECONDS, BatchDelete, duration_seconds

if TYPE_CHECKING:
    from ._store import ContinuationStore

_deleting: set[asyncio.Task[Any]] = set()  # deletions started without an await, held until they finish

DEFAULT_CHECKPOINT_RETENTION = timedelta(hours=24)
"""How long a finished run's checkpoints are kept by default (``@workflow(checkpoint_retention=...)``)."""

_Retained = tuple[float, int, Callable[[], CheckpointStorage | None], tuple[str, ...]]
_retained: list[_Retained] = []  # finished runs' checkpoints: (deadline, order, storage, ids), a heap by deadline
_order = itertools.count()
_warned: list[bool] = []  # the cap below was reached once (warned once a process)
logger = logging.getLogger(__name__)

RETAINED_MAX = 10_000
"""At most this many finished chains are noted for deletion (about 0.5 KB each); then the nearest is left."""


_K = TypeVar("_K")
_V = TypeVar("_V")


class BoundedMap(Generic[_K, _V]):
    """Entries least recently put first, each with a deadline: a sweep drops the expired, a trim the surplus.

    ``deadline(key, value)`` is when an entry expires, None while it must not expire (a turn running, say); a
    sweep stops at the first entry not yet expired. What a sweep or trim drops is returned for its owner to release.
    """

    __slots__ = ("deadline", "entries", "max_entries")

    def __init__(self, deadline: Callable[[_K, _V], float | None], max_entries: int | None = None) -> None:
        self.deadline, self.max_entries = deadline, max_entries
        self.entries: OrderedDict[_K, _V] = OrderedDict()

    def __len__(self) -> int:
        return len(self.entries)

    def put(self, key: _K, value: _V) -> None:
        """Store ``value`` under ``key`` as the most recent entry."""
        self.entries.pop(key, None)
        self.entries[key] = value

    def pop(self, key: _K) -> _V | None:
        """Remove ``key``; its value, or None when absent."""
        value = self.entries.pop(key, None)
        if not self.entries:
            self.entries.clear()  # a dict keeps its peak size: memory back to the baseline
        return value

    def expired(self, now: float) -> list[tuple[_K, _V]]:
        """Drop the entries past their deadline, least recent first, up to the first one not expired."""
        doomed: list[_K] = []
        for key, value in self.entries.items():
            deadline = self.deadline(key, value)
            if deadline is not None and deadline > now:
                break
            if deadline is not None:
                doomed.append(key)
        return self._drop(doomed)

    def trim(self, limit: int | None = None, spared: Callable[[_K, _V], bool] | None = None) -> list[tuple[_K, _V]]:
        """Drop the least recent entries not ``spared`` until at most ``limit`` (default ``max_entries``) are left."""
        limit = self.max_entries if limit is None else limit
        excess = 0 if limit is None else len(self.entries) - limit
        doomed: list[_K] = []
        for key, value in self.entries.items():
            if len(doomed) >= excess:
                break
            if spared is None or not spared(key, value):
                doomed.append(key)
        return self._drop(doomed)

    def _drop(self, doomed: list[_K]) -> list[tuple[_K, _V]]:
        return [(key, value) for key in doomed if (value := self.pop(key)) is not None]


def resolve_retention(retention: float | timedelta | None) -> float | None:
    """``checkpoint_retention`` in seconds (None: kept for good; 0: deleted at the finish), checked."""
    if retention is None:
        return None
    if retention == (timedelta(0) if isinstance(retention, timedelta) else 0) and not isinstance(retention, bool):
        return 0.0
    return duration_seconds(retention, "checkpoint_retention")


def resolve_ttl(ttl: float | timedelta | None, store: ContinuationStore | None) -> float:
    """The pause TTL in seconds: the store's (``ttl`` must then agree), else ``ttl``, else 24 hours."""
    seconds = None if ttl is None else duration_seconds(ttl, "continuation_ttl")
    if store is None:
        return DEFAULT_TTL_SECONDS if seconds is None else seconds
    store_ttl = float(store.ttl_seconds)
    if seconds is not None and abs(seconds - store_ttl) > 1e-6:
        raise ValueError(
            f"continuation_ttl={seconds:g}s differs from the continuation store's ttl ({store_ttl:g}s). A pause has "
            "one TTL: with a store it is the store's, so drop continuation_ttl or set the store's ttl."
        )
    return store_ttl


async def delete_checkpoint(storage: CheckpointStorage, checkpoint_id: str) -> None:
    """Delete one checkpoint; a failure is ignored (the storage's own TTL, if any, removes it later)."""
    with contextlib.suppress(Exception):
        await storage.delete(checkpoint_id)


def delete_checkpoint_soon(storage: CheckpointStorage, checkpoint_id: str) -> None:
    """Start deleting a checkpoint from synchronous code: a task on the running loop, else right here."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        with contextlib.suppress(Exception):
            asyncio.run(delete_checkpoint(storage, checkpoint_id))
        return
    task = loop.create_task(delete_checkpoint(storage, checkpoint_id))
    _deleting.add(task)
    task.add_done_callback(_deleting.discard)


def retain_checkpoints(storage: CheckpointStorage, checkpoint_ids: Sequence[str], seconds: float) -> None:
    """Delete ``checkpoint_ids`` from ``storage`` at the first sweep ``seconds`` from now (in-memory: weakly held)."""
    if not checkpoint_ids:
        return
    # In-memory checkpoints go with their storage (never kept alive); files, keys and rows outlive it (held).
    in_memory = isinstance(storage, InMemoryCheckpointStorage)
    reference: Callable[[], CheckpointStorage | None] = weakref.ref(storage) if in_memory else lambda: storage
    deadline = time.time() + min(seconds, MAX_DURATION_SECONDS)
    entry = (deadline, next(_order), reference, tuple(checkpoint_ids))
    if len(_retained) < RETAINED_MAX:
        heapq.heappush(_retained, entry)
    else:
        heapq.heappushpop(_retained, entry)
        if not _warned:
            _warned.append(True)
            logger.warning(
                "More than %d finished chains await their checkpoint_retention: the ones nearest their deadline are "
                "left to their storage's own ttl (core's storages have none and keep them).",
                RETAINED_MAX,
            )


def forget_retained(storage: CheckpointStorage) -> None:
    """Forget the retained checkpoints of ``storage``, which its owner closed (a deletion would reopen it)."""
    kept = [entry for entry in _retained if entry[2]() is not storage]
    if len(kept) != len(_retained):
        _retained[:] = kept
        heapq.heapify(_retained)


def sweep_retained() -> None:
    """Start deleting the retained checkpoints past their retention (as tasks: without a loop, at the next call)."""
    now = time.time()
    if not _retained or _retained[0][0] > now:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    while _retained and _retained[0][0] <= now:
        _, _, reference, checkpoint_ids = heapq.heappop(_retained)
        storage = reference()
        if storage is not None:  # from an empty context: a run's end cancels the tasks started in it
            task = contextvars.Context().run(loop.create_task, delete_checkpoints(storage, checkpoint_ids))
            _deleting.add(task)
            task.add_done_callback(functools.partial(_deleted, (now, next(_order), reference, checkpoint_ids)))


def _deleted(entry: _Retained, task: asyncio.Task[Any]) -> None:
    """A deletion ended: noted again for the next sweep when its loop cancelled it first."""
    _deleting.discard(task)
    if task.cancelled():
        heapq.heappush(_retained, entry)


async def delete_checkpoints(storage: CheckpointStorage, checkpoint_ids: Sequence[str]) -> None:
    """Delete checkpoints (one call when the storage is a :class:`BatchDelete`); failures are ignored."""
    if implements(storage, BatchDelete):  # one round trip for the whole chain (PostgreSQL, Redis, SQLite)
        with contextlib.suppress(Exception):
            await cast("BatchDelete", storage).delete_many(list(checkpoint_ids))
        return
    for checkpoint_id in checkpoint_ids:
        await delete_checkpoint(storage, checkpoint_id)


async def checkpoint_deletions() -> None:
    """Wait until the checkpoint deletions started so far have finished (for tests and benchmarks)."""
    while _deleting:
        await asyncio.gather(*list(_deleting), return_exceptions=True)
