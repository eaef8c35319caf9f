"""AG-UI thread snapshots kept in one of the package's bounded session stores (same backend, TTL and bounds)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast

from agent_framework import SessionStore
from agent_framework_ag_ui import AGUIThreadSnapshot, AGUIThreadSnapshotStore

from .._agent import FunctionalWorkflowAgent
from .._durable.session_store import BoundedSessionStore
from ._turn import default_session_store

_STORES = "(InMemorySessionStore, SQLiteSessionStore, RedisSessionStore, PostgresSessionStore)"


def _check(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string.")
    if not value:
        raise ValueError(f"{name} must be a non-empty string.")
    return value


def _group(scope: Any) -> str:
    return "agui:" + _check(scope, "scope")


class ThreadSnapshotStore:
    """An ``AGUIThreadSnapshotStore`` kept in a bounded session store: several AG-UI workers share threads.

    One JSON record per snapshot (never pickle: it holds a paused thread's token), bounded like the session store
    ("Run it in production" in the docs).

    Args:
        sessions: One of the package's bounded session stores; the caller closes it.

    Raises:
        TypeError: ``sessions`` is not one of the package's bounded session stores.
    """

    def __init__(self, sessions: BoundedSessionStore) -> None:
        if not isinstance(sessions, BoundedSessionStore):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"ThreadSnapshotStore needs one of the package's session stores {_STORES}, "
                f"not {type(sessions).__name__}."
            )
        self.sessions = sessions

    async def save(self, *, scope: str, thread_id: str, snapshot: AGUIThreadSnapshot) -> None:
        """Save the latest snapshot of a thread (it expires the store's TTL from now)."""
        body = json.dumps(dataclasses.asdict(snapshot), ensure_ascii=True, separators=(",", ":"))
        await self.sessions.records.write(_group(scope), _check(thread_id, "thread_id"), body)

    async def get(self, *, scope: str, thread_id: str) -> AGUIThreadSnapshot | None:
        """The latest snapshot of a thread, or None (never saved, deleted or expired)."""
        text = await self.sessions.records.read(_group(scope), _check(thread_id, "thread_id"))
        return None if text is None else AGUIThreadSnapshot(**cast("dict[str, Any]", json.loads(text)))

    async def purge_expired(self) -> int:
        """Drop the session store's expired records now (snapshots and sessions; a host's sweep calls it)."""
        purge = getattr(self.sessions, "purge_expired", None)
        return await purge() if purge is not None else 0

    async def delete(self, *, scope: str, thread_id: str) -> bool:
        """Delete a thread's snapshot; True when there was one."""
        return await self.sessions.records.remove(_group(scope), _check(thread_id, "thread_id"))

    async def clear(self, *, scope: str | None = None) -> None:
        """Delete every snapshot of ``scope`` (ValueError for None: a shared store is not cleared wholesale)."""
        if scope is None:
            raise ValueError(
                "ThreadSnapshotStore.clear needs a scope: a shared store is not cleared wholesale. Clear each "
                "scope, or let the store's TTL expire the snapshots."
            )
        await self.sessions.records.remove_group(_group(scope))


def snapshot_store_for(
    store: AGUIThreadSnapshotStore | SessionStore | None, agent: FunctionalWorkflowAgent
) -> AGUIThreadSnapshotStore:
    """The AG-UI snapshot store a host uses: ``store`` as given, a session store's snapshots, or a bounded default."""
    if store is None or isinstance(store, BoundedSessionStore):
        return ThreadSnapshotStore(default_session_store(agent) if store is None else store)
    if isinstance(store, SessionStore):
        raise TypeError(
            "agui_endpoint keeps thread snapshots, not core sessions: pass one of the package's session stores "
            f"{_STORES} or an AGUIThreadSnapshotStore."
        )
    return store
