"""Per-conversation state of the agent, kept with the session: the token, the answers so far, the attached instance.

Token and answers are JSON-safe values in ``AgentSession.state`` (a caller with only the session can resume);
a paused conversation's instance is attached by session id, never serialized.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import typing
import weakref
from collections.abc import Generator, Mapping
from typing import Any

from agent_framework import AgentSession
from pydantic_core import to_jsonable_python

from ._continuation import presented_secret
from ._expiry import BoundedMap
from ._workflow import FunctionalWorkflow

SESSION_STATE_KEY = "agent_framework_functional"
"""Key of this package's entry in ``AgentSession.state``: ``{agent_id: {"continuation_token": ..., "answers": ...}}``.

Hosts that merge client state into ``session.state`` (AG-UI) must protect it; a malformed value counts as none."""


def session_token(session: AgentSession | None, agent_id: str) -> Mapping[str, Any] | None:
    """The continuation token this agent stored in ``session``, if any (a malformed value counts as none)."""
    entry = _agent_entry(session, agent_id)
    token = entry.get("continuation_token") if entry is not None else None
    if presented_secret(token) is None:
        return None  # not a token of this package (client state merged over it): ignored, never trusted
    return typing.cast(Mapping[str, Any], token)


def lost_its_token(session: AgentSession | None, options: Mapping[str, Any]) -> bool:
    """True when ``session`` lacks the :data:`SESSION_STATE_KEY` entry (kept once spent) and ``options`` a token."""
    return session is not None and SESSION_STATE_KEY not in session.state and options.get("continuation_token") is None


def store_session_token(
    session: AgentSession, agent_id: str, token: Mapping[str, Any], answers: Mapping[str, Any] | None = None
) -> None:
    """Store ``token`` and the answers so far (JSON-safe) under ``agent_id``."""
    entry = session.state.get(SESSION_STATE_KEY)
    entries: dict[str, Any] = dict(typing.cast(Mapping[str, Any], entry)) if isinstance(entry, Mapping) else {}
    agent_entry: dict[str, Any] = {"continuation_token": dict(token)}
    if answers:
        agent_entry["answers"] = to_jsonable_python(dict(answers), fallback=str)
    entries[agent_id] = agent_entry
    session.state[SESSION_STATE_KEY] = entries


def clear_session_token(session: AgentSession, agent_id: str) -> None:
    """Remove this agent's token from ``session.state``; the package's entry stays."""
    entry = session.state.get(SESSION_STATE_KEY)
    if isinstance(entry, Mapping) and agent_id in entry:
        entries = typing.cast(Mapping[str, Any], entry)
        session.state[SESSION_STATE_KEY] = {key: value for key, value in entries.items() if key != agent_id}


def resolve_token(
    continuation_token: Mapping[str, Any] | None,
    options: Mapping[str, Any] | None,
    session: AgentSession | None,
    agent_id: str,
) -> Any:
    """The token for a resume: the argument, then ``options["continuation_token"]``, then the session's."""
    if continuation_token is not None:
        return continuation_token
    if options is not None and options.get("continuation_token") is not None:
        return options["continuation_token"]
    return session_token(session, agent_id)


def _agent_entry(session: AgentSession | None, agent_id: str) -> Mapping[str, Any] | None:
    entry = session.state.get(SESSION_STATE_KEY) if session is not None else None
    if not isinstance(entry, Mapping):
        return None
    agent_entry = typing.cast(Mapping[str, Any], entry).get(agent_id)
    return typing.cast(Mapping[str, Any], agent_entry) if isinstance(agent_entry, Mapping) else None


def _pause_deadline(session_id: str, workflow: FunctionalWorkflow) -> float | None:
    """When an attached instance's pause expires; None while it runs or has none (a sweep leaves it)."""
    return None if workflow.is_running else workflow.pause_expires_at()


def _lapse_expired(attached: BoundedMap[str, FunctionalWorkflow], now: float | None = None) -> int:
    """Lapse the expired pauses of ``attached`` (in pause order: a sweep stops at the first unexpired one)."""
    now = time.time() if now is None else now
    lapsed = attached.expired(now)
    for _, workflow in lapsed:
        workflow.lapse_pause(now)
    return len(lapsed)


# Each template's attached instances by session id, in pause order (hosts rebuild session objects; a resume still
# needs the token).
_ATTACHED: weakref.WeakKeyDictionary[FunctionalWorkflow, BoundedMap[str, FunctionalWorkflow]] = (
    weakref.WeakKeyDictionary()
)


def sweep_expired(template: FunctionalWorkflow, now: float | None = None) -> int:
    """Lapse the expired pauses of ``template``'s conversations now (a host's sweep task); returns how many."""
    attached = _ATTACHED.get(template)
    lapsed = _lapse_expired(attached, now) if attached is not None else 0
    if not template.is_running and template.lapse_pause(now):
        lapsed += 1  # the session-less conversation's pause
    return lapsed


def attached_instances(template: FunctionalWorkflow) -> int:
    """How many conversations on ``template`` have an attached instance (for tests and benchmarks)."""
    attached = _ATTACHED.get(template)
    return len(attached) if attached is not None else 0


class Conversations:
    """One agent's conversations: ``template`` without a session, else an instance per session while pending."""

    def __init__(self, template: FunctionalWorkflow, agent_id: str, max_conversations: int | None) -> None:
        if max_conversations is not None and (
            type(max_conversations) is not int or max_conversations < 1  # pyright: ignore[reportUnnecessaryComparison]
        ):
            raise ValueError("'max_conversations' must be a positive int (or None for no limit but the pause TTL).")
        # The first agent made on ``template`` sets the bound of its conversations.
        self.attached = _ATTACHED.setdefault(template, BoundedMap(_pause_deadline, max_conversations))
        self.template = template
        self.agent_id = agent_id
        # The session-less conversation's answers so far, valid only with the token they paused with.
        self.answers_so_far: dict[str, Any] = {}
        self.answers_token: dict[str, Any] | None = None

    def workflow_for(self, session: AgentSession | None, *, create: bool = True) -> FunctionalWorkflow | None:
        """The conversation's instance: ``template`` without a session, else the session's (made when asked)."""
        if session is None:
            return self.template
        workflow = self.attached.entries.get(session.session_id)
        if workflow is None and create:
            template = self.template
            workflow = template.definition.build(
                checkpoint_storage=template.checkpoint_storage,
                continuation_store=template.continuation_store,
                continuation_ttl=template.continuation_ttl,
            )
            workflow.bind_conversation(hashlib.sha256(session.session_id.encode("utf-8", "surrogatepass")).hexdigest())
            _lapse_expired(self.attached)
            self.attached.put(session.session_id, workflow)
        return workflow

    def existing_instance(self, session: AgentSession) -> FunctionalWorkflow | None:
        """The session's attached instance (None once its pause expired)."""
        workflow = self.attached.entries.get(session.session_id)
        if workflow is not None and not workflow.is_running and workflow.lapse_pause():
            self.attached.pop(session.session_id)
            return None
        return workflow

    def detach_idle(self, session: AgentSession | None, workflow: FunctionalWorkflow) -> None:
        """Detach a conversation's instance once it has nothing paused or running."""
        if (
            session is None
            or workflow is self.template
            or self.attached.entries.get(session.session_id) is not workflow
        ):
            return
        if not workflow.has_pending_continuation and not workflow.is_running:
            self.attached.pop(session.session_id)
            return
        self.attached.put(session.session_id, workflow)  # paused (or still running): last in the sweep order
        kept = session.session_id  # past the count, the oldest other pauses are evicted (never a running one)
        for _, evicted in self.attached.trim(
            spared=lambda key, other: key == kept or _pause_deadline(key, other) is None
        ):
            evicted.evict_pause()

    def remember_answers(self, answers: dict[str, Any], token: Mapping[str, Any] | None) -> None:
        """Keep the session-less conversation's answers for its new pause (``token``); None forgets them."""
        self.answers_so_far, self.answers_token = (answers, dict(token)) if token is not None else ({}, None)

    def answers_for(self, session: AgentSession | None, secret: bytes) -> dict[str, Any]:
        """The answers so far in the run chain whose pause has the token ``secret``."""
        if session is not None:
            entry = _agent_entry(session, self.agent_id)
            if entry is None or presented_secret(entry.get("continuation_token")) != secret:
                return {}
            answers = entry.get("answers")
            return dict(typing.cast(Mapping[str, Any], answers)) if isinstance(answers, Mapping) else {}
        return dict(self.answers_so_far) if presented_secret(self.answers_token) == secret else {}

    @contextlib.contextmanager
    def abandoning(
        self, token: Mapping[str, Any] | None, force: bool, session: AgentSession | None
    ) -> Generator[tuple[FunctionalWorkflow, Mapping[str, Any] | None], None, None]:
        """One abandonment: the conversation's instance and the token to present."""
        workflow = self.workflow_for(session)
        assert workflow is not None
        try:
            yield workflow, session_token(session, self.agent_id) if token is None and not force else token
        finally:
            self.detach_idle(session, workflow)
        if session is None:
            self.remember_answers({}, None)
        else:
            clear_session_token(session, self.agent_id)
