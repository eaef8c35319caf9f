"""One turn of a host's conversation: taken (one at a time per conversation), its session found, written back once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agent_framework import AgentSession, ResponseStream, SessionStore

from .._agent import FunctionalWorkflowAgent
from .._durable.session_store import InMemorySessionStore


def default_session_store(agent: FunctionalWorkflowAgent) -> InMemorySessionStore:
    """The bounded, process-local session store of a host without a shared one (TTL: the pause's, as its token)."""
    return InMemorySessionStore(ttl=agent.continuation_ttl)


class ConversationBusy(Exception):
    """Another turn of this conversation runs in this process (the host refuses in its protocol's way)."""


class Turns:
    """A host's conversations: their sessions in one store (None: :func:`default_session_store`), one turn each."""

    def __init__(self, agent: FunctionalWorkflowAgent, session_store: SessionStore | None) -> None:
        self.agent = agent
        self.session_store = session_store if session_store is not None else default_session_store(agent)
        self.busy: set[str] = set()  # conversations with a turn running; bounded by those turns

    async def begin(self, key: str, *, lock: str | None = None, session: AgentSession | None = None) -> Turn:
        """Take the conversation ``lock`` (default ``key``; ConversationBusy if taken), then its session."""
        lock = key if lock is None else lock
        self.hold(lock)
        try:
            if session is None:
                session = await self.session_store.get(key) or self.agent.create_session(session_id=key)
        except BaseException:
            self.busy.remove(lock)
            raise
        return Turn(self, key, lock, session)

    def take(self, key: str, session: AgentSession) -> Turn:
        """Take the conversation ``key`` for ``session``, found by the host's framework (ConversationBusy if taken)."""
        self.hold(key)
        return Turn(self, key, key, session)

    def hold(self, lock: str) -> None:
        """Mark ``lock`` busy, or raise :class:`ConversationBusy`."""
        if lock in self.busy:
            raise ConversationBusy(f"Another turn of conversation {lock!r} is still running; retry after it ends.")
        self.busy.add(lock)


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

    def stream(
        self, stream: ResponseStream[Any, Any], *, save: bool, failed: Callable[[], object] | None = None
    ) -> ResponseStream[Any, Any]:
        """``stream`` as this turn, which ends however the stream ends (``save``: write first; ``failed``: unfinished).

        A generator: a stream's cleanup hooks stop at a second cancellation, a dropped generator's ``finally`` runs.
        """
        final: list[Any] = []

        async def updates() -> AsyncIterator[Any]:
            try:
                async for update in stream:
                    yield update
                final.append(await stream.get_final_response())
            finally:
                try:
                    if not final and failed is not None:
                        failed()
                    if save:
                        await self.save()
                finally:
                    self.end()

        return ResponseStream(updates(), finalizer=lambda _: final[0])
