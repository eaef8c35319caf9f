"""What a host keeps when it is given no store: bounded in-memory sessions, with one TTL for every host call."""

from __future__ import annotations

from typing import Any

from .._session_store import InMemorySessionStore
from .._store import DEFAULT_TTL_SECONDS


def default_session_ttl(agent: Any) -> float:
    """The TTL (seconds) of the sessions and snapshots a host keeps for ``agent`` when it is given no store.

    The continuation stores' default token TTL (24 hours): a paused conversation's session holds its token,
    so it must live at least as long as the token. Every host call takes its default from here.
    """
    return DEFAULT_TTL_SECONDS


def default_session_store(agent: Any) -> InMemorySessionStore:
    """The bounded, process-local session store a host uses for ``agent`` without a shared one."""
    return InMemorySessionStore(ttl=default_session_ttl(agent))
