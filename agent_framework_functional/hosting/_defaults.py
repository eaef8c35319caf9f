"""What a host keeps when it is given no store: bounded in-memory sessions, with one TTL for every host call."""

from __future__ import annotations

from .._agent import FunctionalWorkflowAgent
from .._durable.session_store import InMemorySessionStore


def default_session_ttl(agent: FunctionalWorkflowAgent) -> float:
    """The TTL (seconds) of the sessions and snapshots a host keeps for ``agent`` when it is given no store.

    The agent's ``continuation_ttl`` (its continuation store's ``ttl``, else the build option; 24 hours by
    default): a paused conversation's session holds its token, so the two expire together. Every host call
    takes its default from here.
    """
    return agent.continuation_ttl


def default_session_store(agent: FunctionalWorkflowAgent) -> InMemorySessionStore:
    """The bounded, process-local session store a host uses for ``agent`` without a shared one."""
    return InMemorySessionStore(ttl=default_session_ttl(agent))
