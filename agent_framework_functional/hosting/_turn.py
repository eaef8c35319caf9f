"""One turn of a host's conversation: the conversation taken, its session found or made, written back once.

Every host that keeps sessions in a ``SessionStore`` (``responses_app``, ``a2a_app``) runs each request as a
:class:`Turn` of :class:`Turns`: one turn at a time per conversation (in this process), the session read from
the store or created under its key, and written back once, shielded from the caller's cancellation, before the
host reports the turn's terminal event. The conversation is free again when the turn ends (or, if its write is
still in flight then, when the write ends). A host's own converters (request -> run, run -> protocol) sit
around a turn; per-conversation state is never kept on the agent object. :class:`RunningTurns` counts the
turns of hosts whose framework keeps the session (DevUI's conversations, AG-UI's snapshots), so a conversation
with a turn running is never taken for an idle or dropped one.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable

from agent_framework import AgentSession, SessionStore

from .._agent import FunctionalWorkflowAgent
from .._durable.session_store import InMemorySessionStore


def default_session_store(agent: FunctionalWorkflowAgent) -> InMemorySessionStore:
    """The bounded, process-local store a host keeps sessions (and AG-UI snapshots) in without a shared one.

    Its TTL is the agent's ``continuation_ttl``: a paused conversation's session holds its token, so the two
    expire together.
    """
    return InMemorySessionStore(ttl=agent.continuation_ttl)


class ConversationBusy(Exception):
    """Another turn of this conversation runs in this process (the host refuses in its protocol's way)."""


class Turns:
    """A host's conversations: their sessions in one store, one turn at a time each.

    Args:
        agent: The agent every conversation shares.
        session_store: Where sessions live (None: :func:`default_session_store`).
    """

    def __init__(self, agent: FunctionalWorkflowAgent, session_store: SessionStore | None) -> None:
        self.agent = agent
        self.session_store = session_store if session_store is not None else default_session_store(agent)
        self.busy: set[str] = set()  # conversations with a turn running; bounded by those turns

    async def begin(self, key: str, *, lock: str | None = None, session: AgentSession | None = None) -> Turn:
        """Take the conversation ``lock`` (default ``key``), then its session.

        The session is ``session``, the one stored at ``key``, or a new one whose id is ``key``.

        Raises:
            ConversationBusy: A turn of the conversation runs.
        """
        lock = key if lock is None else lock
        if lock in self.busy:
            raise ConversationBusy(lock)
        self.busy.add(lock)
        try:
            if session is None:
                session = await self.session_store.get(key) or self.agent.create_session(session_id=key)
        except BaseException:
            self.busy.remove(lock)
            raise
        return Turn(self, key, lock, session)


class Turn:
    """One turn: its session, written back once to ``key``; :meth:`end` frees the conversation."""

    def __init__(self, turns: Turns, key: str, lock: str, session: AgentSession) -> None:
        self.turns, self.key, self.lock, self.session = turns, key, lock, session
        self.write: asyncio.Future[None] | None = None
        self.ended = False

    def save(self) -> Awaitable[None]:
        """Write the session (once: a task of its own, shielded from the caller's cancellation)."""
        if self.write is None:
            self.write = asyncio.ensure_future(self.turns.session_store.set(self.key, self.session))
        return asyncio.shield(self.write)

    def end(self) -> None:
        """Free the conversation: now, or when the write in flight ends (idempotent)."""
        if self.ended:
            return
        self.ended = True
        if self.write is None or self.write.done():
            self.turns.busy.discard(self.lock)
        else:
            self.write.add_done_callback(lambda _: self.turns.busy.discard(self.lock))


class RunningTurns:
    """How many turns of each conversation began and have not ended; past ``most`` conversations the oldest go.

    Args:
        most: Conversations noted at most (turns whose end never came are forgotten first); None: no bound.
    """

    def __init__(self, most: int | None = None) -> None:
        self.most = most
        self.counts: OrderedDict[str, int] = OrderedDict()  # least recently begun or ended first

    def __contains__(self, key: object) -> bool:
        return key in self.counts

    def begin(self, key: str) -> None:
        """A turn of ``key`` began."""
        self.counts[key] = self.counts.pop(key, 0) + 1
        while self.most is not None and len(self.counts) > self.most:
            self.counts.popitem(last=False)

    def end(self, key: str) -> None:
        """A turn of ``key`` ended."""
        left = self.counts.pop(key, 0) - 1
        if left > 0:
            self.counts[key] = left
