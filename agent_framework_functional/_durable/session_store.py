"""Bounded session stores: core's ``SessionStore`` with a TTL and a maximum size, sessions kept as JSON (never pickle).

Text records in groups (sessions; AG-UI thread snapshots per scope). Every backend: a record expires ``ttl``
after its last write (reads do not extend it); past ``max_entries`` the least recently written go first.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar, cast

from agent_framework import AgentSession, SessionStore

from .._expiry import BoundedMap
from .._store import DEFAULT_TTL_SECONDS, AsyncClosing, PurgeSchedule, duration_seconds

SESSION_GROUP = "session"  # the group of core sessions (AG-UI snapshots use ``agui:<scope>``)
DEFAULT_MAX_SESSIONS = 10_000  # an InMemorySessionStore's max_entries
DEFAULT_MAX_STORED_SESSIONS = 1_000_000  # a durable session store's max_entries
DEFAULT_SESSION_PURGE_INTERVAL_SECONDS = 60.0  # a durable session store's purge_interval


def record_key(group: str, key: str) -> str:
    """The stored key of ``key`` in ``group``: a sha256 hex digest (fits every backend)."""
    raw = json.dumps([group, key], ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode("ascii")).hexdigest()


def group_key(group: str) -> str:
    """The stored form of a group name (sha256 hex digest)."""
    return hashlib.sha256(group.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class SessionLimits:
    """A durable session store's bounds, checked: ``ttl`` and ``purge_interval`` in seconds (None: no purges)."""

    ttl: float
    max_entries: int
    purge_interval: float | None
    clock: Callable[[], float]

    @classmethod
    def checked(
        cls,
        ttl: float | timedelta,
        max_entries: int,
        purge_interval: float | timedelta | None,
        clock: Callable[[], float],
    ) -> SessionLimits:
        """The store options, checked in this order; the stores' ``ValueError`` and ``TypeError`` as they document."""
        seconds = duration_seconds(ttl, "ttl")
        # at most a signed 64-bit integer: what SQLite and PostgreSQL take as a row count
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or not 1 <= max_entries <= 2**63 - 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"max_entries must be a positive integer of at most 2**63 - 1, got {max_entries!r}.")
        interval = None if purge_interval is None else duration_seconds(purge_interval, "purge_interval")
        return cls(seconds, max_entries, interval, clock)


class LimitedRecords:
    """What the durable backends' records share: ``ttl``, ``max_entries``, the clock and the purge schedule."""

    def __init__(self, limits: SessionLimits) -> None:
        self.ttl, self.max_entries, self._clock = limits.ttl, limits.max_entries, limits.clock
        self.purges = PurgeSchedule(limits.purge_interval)

    def now(self) -> float:
        """The store's clock, seconds since the epoch."""
        return self._clock()


class SessionRecords(Protocol):
    """Text records with a TTL, in groups: what a bounded session store keeps."""

    async def read(self, group: str, key: str) -> str | None:
        """The text under ``key`` in ``group``, or None (absent or expired)."""

    async def write(self, group: str, key: str, text: str) -> None:
        """Store ``text`` under ``key`` in ``group``; it expires ``ttl`` from now."""

    async def remove(self, group: str, key: str) -> bool:
        """Delete ``key`` in ``group``; True when it was there."""

    async def remove_group(self, group: str) -> int:
        """Delete every record of ``group``; return how many."""


_Kept = TypeVar("_Kept", bound=SessionRecords)


class BoundedSessionStore(Generic[_Kept], AsyncClosing, SessionStore):
    """Core's ``SessionStore`` on :class:`SessionRecords` (``hosting.ThreadSnapshotStore`` keeps snapshots there).

    Attributes:
        records: The backend's records: sessions, and the AG-UI snapshots a ``ThreadSnapshotStore`` keeps here.
    """

    def __init__(self, records: _Kept) -> None:
        super().__init__()
        self.records = records

    async def aclose(self) -> None:
        """Nothing to release in memory; the durable stores release their connections."""

    async def get(self, session_id: str) -> AgentSession | None:
        """Return the stored session (a fresh object), or None when absent or expired.

        Raises:
            ValueError: ``session_id`` is empty.
        """
        SessionStore.validate_session_id(session_id)
        text = await self.records.read(SESSION_GROUP, session_id)
        return None if text is None else AgentSession.from_dict(cast("dict[str, Any]", json.loads(text)))

    async def set(self, session_id: str, session: AgentSession) -> None:
        """Store ``session`` under ``session_id`` as JSON; it expires ``ttl`` from now.

        Raises:
            ValueError: ``session_id`` is empty.
            TypeError: The session's state is not JSON-safe (or its type not in core's state registry).
        """
        SessionStore.validate_session_id(session_id)
        text = json.dumps(session.to_dict(), ensure_ascii=True, separators=(",", ":"))
        await self.records.write(SESSION_GROUP, session_id, text)

    async def delete(self, session_id: str) -> None:
        """Delete the stored session, if present.

        Raises:
            ValueError: ``session_id`` is empty.
        """
        SessionStore.validate_session_id(session_id)
        await self.records.remove(SESSION_GROUP, session_id)


class DurableRecords(SessionRecords, Protocol):
    """:class:`SessionRecords` on a shared backend, which can also count and purge what it holds."""

    async def count(self) -> int:
        """Records stored now (sessions and snapshots; expired ones not yet purged included)."""

    async def purge(self) -> int:
        """Delete the expired records and trim to ``max_entries`` now; return how many were deleted."""


_Records = TypeVar("_Records", bound=DurableRecords)


class DurableSessionStore(BoundedSessionStore[_Records]):
    """The shared part of the durable session stores (SQLite, Redis, PostgreSQL): typed records, count, purge."""

    async def count(self) -> int:
        """Records stored now (sessions and snapshots; expired ones not yet purged included)."""
        return await self.records.count()

    async def purge_expired(self) -> int:
        """Delete the expired records and trim to ``max_entries`` now; return how many were deleted."""
        return await self.records.purge()


class MemoryRecords(LimitedRecords):
    """:class:`SessionRecords` in a :class:`BoundedMap`: each write drops the expired records, then the oldest."""

    def __init__(self, *, ttl: float | timedelta, max_entries: int, clock: Callable[[], float]) -> None:
        super().__init__(SessionLimits.checked(ttl, max_entries, None, clock))
        # stored key -> (expires_at, group, text), the newest last: the order is the expiry order
        self.items: BoundedMap[str, tuple[float, str, str]] = BoundedMap(lambda _, item: item[0], self.max_entries)

    async def read(self, group: str, key: str) -> str | None:
        stored = record_key(group, key)
        item = self.items.entries.get(stored)
        if item is not None and item[0] <= self._clock():
            self.items.pop(stored)
            return None
        return None if item is None else item[2]

    async def write(self, group: str, key: str, text: str) -> None:
        now = self._clock()
        self.items.put(record_key(group, key), (now + self.ttl, group, text))
        self.evict(now)

    async def remove(self, group: str, key: str) -> bool:
        return self.items.pop(record_key(group, key)) is not None

    async def remove_group(self, group: str) -> int:
        doomed = [key for key, item in self.items.entries.items() if item[1] == group]
        for key in doomed:
            self.items.pop(key)
        return len(doomed)

    def evict(self, now: float) -> int:
        """Drop the expired records, then the oldest past ``max_entries``; return how many."""
        return len(self.items.expired(now)) + len(self.items.trim())


class InMemorySessionStore(BoundedSessionStore[MemoryRecords]):
    """A bounded, process-local session store: the hosts' default when they are given no shared store.

    Unlike core's ``SessionStore``, each write drops sessions ``ttl`` past their last write and, past
    ``max_entries``, the least recently written (a dropped session's paused conversation can no longer be
    answered through the host). For several workers or restarts use a durable store ("Run it in production" in
    the docs).

    Keyword Args:
        ttl: How long a session is kept after its last write; default 24 hours (the token TTL).
        max_entries: Sessions kept at most (default 10,000).
        clock: Seconds since the epoch; defaults to ``time.time``.

    Raises:
        ValueError: ``ttl`` is not a positive duration of at most ten years, or ``max_entries`` is not a
            positive integer.
        TypeError: A duration is neither a number nor a ``timedelta``.
    """

    def __init__(
        self,
        *,
        ttl: float | timedelta = DEFAULT_TTL_SECONDS,
        max_entries: int = DEFAULT_MAX_SESSIONS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(MemoryRecords(ttl=ttl, max_entries=max_entries, clock=clock))

    def __len__(self) -> int:
        """Records stored now (sessions, and AG-UI snapshots kept here), expired ones not yet dropped included."""
        return len(self.records.items)

    async def purge_expired(self) -> int:
        """Drop the expired records now (writes also do it); return how many."""
        return self.records.evict(self.records.now())
