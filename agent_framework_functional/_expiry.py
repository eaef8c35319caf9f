"""Pause expiry: the one TTL of a pause, and deleting the checkpoint of a discarded pause.

One TTL governs a pause (README "Durable continuations", AGENTS.md invariant 42): its token, the
conversation's attached workflow instance and the pause's checkpoint. With a continuation store it is the
store's ``ttl_seconds``; without one it is ``build(..., continuation_ttl=...)`` (default 24 hours).
A discarded pause (expired, evicted, abandoned or found stale) deletes its checkpoint here.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_framework import CheckpointStorage

from ._store import DEFAULT_TTL_SECONDS, duration_seconds

if TYPE_CHECKING:
    from ._store import ContinuationStore

_deleting: set[asyncio.Task[Any]] = set()
"""Checkpoint deletions started without an ``await`` (strong references until they finish)."""


def resolve_ttl(ttl: float | timedelta | None, store: ContinuationStore | None) -> float:
    """The pause TTL in seconds: the store's, else ``ttl``, else 24 hours.

    Raises:
        ValueError: ``ttl`` differs from the store's ``ttl_seconds``, or is not a positive duration.
        TypeError: ``ttl`` is neither a number nor a ``timedelta``.
    """
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


async def checkpoint_deletions() -> None:
    """Wait until the checkpoint deletions started so far have finished (for tests and benchmarks)."""
    while _deleting:
        await asyncio.gather(*list(_deleting), return_exceptions=True)
