"""Session-stored continuation tokens: the pending token of each agent kept in ``AgentSession.state``.

A caller that only has the session, such as an orchestration's ``AgentExecutor`` or a host that
serialises sessions between turns, can then resume. Tokens are stored as plain JSON-safe dicts.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from agent_framework import AgentSession

SESSION_STATE_KEY = "agent_framework_functional"
"""Key of this package's entry in ``AgentSession.state``: ``{agent_id: {"continuation_token": token}}``."""


def session_token(session: AgentSession | None, agent_id: str) -> Mapping[str, Any] | None:
    """The continuation token this agent stored in ``session``, if any."""
    if session is None:
        return None
    entry = session.state.get(SESSION_STATE_KEY)
    if not isinstance(entry, Mapping):
        return None
    agent_entry = typing.cast(Mapping[str, Any], entry).get(agent_id)
    if not isinstance(agent_entry, Mapping):
        return None
    token = typing.cast(Mapping[str, Any], agent_entry).get("continuation_token")
    return typing.cast(Mapping[str, Any], token) if isinstance(token, Mapping) else None


def store_session_token(session: AgentSession, agent_id: str, token: Mapping[str, Any]) -> None:
    """Store ``token`` (as a plain JSON-safe dict) under this agent's entry of ``session.state``."""
    entry = session.state.get(SESSION_STATE_KEY)
    entries: dict[str, Any] = dict(typing.cast(Mapping[str, Any], entry)) if isinstance(entry, Mapping) else {}
    entries[agent_id] = {"continuation_token": dict(token)}
    session.state[SESSION_STATE_KEY] = entries


def clear_session_token(session: AgentSession, agent_id: str) -> None:
    """Remove this agent's token from ``session.state`` (and the package entry once it is empty)."""
    entry = session.state.get(SESSION_STATE_KEY)
    if not isinstance(entry, Mapping):
        return
    entries = dict(typing.cast(Mapping[str, Any], entry))
    if entries.pop(agent_id, None) is None:
        return
    if entries:
        session.state[SESSION_STATE_KEY] = entries
    else:
        del session.state[SESSION_STATE_KEY]


def resolve_token(
    continuation_token: Mapping[str, Any] | None,
    options: Mapping[str, Any] | None,
    session: AgentSession | None,
    agent_id: str,
) -> Any:
    """Pick the token for a resume; first match wins.

    Order: the ``continuation_token`` argument; ``options["continuation_token"]`` (core's convention
    for resumable agents); the token this agent stored in ``session`` when a run with that session
    paused.

    Returns:
        The token, or None when no source has one (the resume then fails authority).
    """
    if continuation_token is not None:
        return continuation_token
    if options is not None and options.get("continuation_token") is not None:
        return options["continuation_token"]
    return session_token(session, agent_id)
