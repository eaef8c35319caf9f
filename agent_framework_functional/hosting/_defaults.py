"""What a host keeps when it is given no store: bounded in-memory sessions, with one TTL for every host call."""

from __future__ import annotations

from .._agent import FunctionalWorkflowAgent
from .._durable.session_store import InMemorySessionStore


def default_session_ttl(agent: FunctionalWorkflowAgent) -> float:
    """The TTL (seconds) of a host's default sessions and snapshots: the agent's ``continuation_ttl``.

    A paused conversation's session holds its token, so the two expire together.
    """
    return agent.continuation_ttl


def default_session_store(agent: FunctionalWorkflowAgent) -> InMemorySessionStore:
    """The bounded, process-local session store a host uses for ``agent`` without a shared one."""
    return InMemorySessionStore(ttl=default_session_ttl(agent))
