"""AG-UI's approval state for a paused thread this process never saw, or whose snapshot is gone.

AG-UI keeps each open approval in a process-local store and refuses a resume that finds none, so with several
workers only the one that paused could take the answer: :func:`restore_open_approvals` registers a thread's
open interrupts from its shared snapshot as AG-UI does when it streams them (the agent still checks the token).
A thread whose snapshot was dropped took its token along: its approvals are expired, so AG-UI hands new input
to the agent; :class:`UnsavedThreads` tells that apart from a run whose snapshot is not saved yet. AG-UI's
private approval API comes through ``_core_compat``, pinned by ``tests/hosting/test_host_private_names.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from agent_framework import AgentSession, Content
from agent_framework_ag_ui import AgentFrameworkAgent, AGUIThreadSnapshot, AGUIThreadSnapshotStore

from .._agent import FunctionalWorkflowAgent
from .._core_compat import (
    agui_approval_state,
    agui_session_id_for_thread,
    register_agui_hosted_approval,
    set_agui_approval_state,
)
from .._updates import REQUEST_INFO_FUNCTION_NAME
from ._turn import Turn, Turns

ANSWERED_APPROVAL_RETENTION_SECONDS = 60.0
"""How long AG-UI keeps an answered approval of an ``agui_endpoint`` (AG-UI's default: 900 s), at most the TTL.

AG-UI refuses every new approval of a scope once it keeps 10,000 answered ones (11 a second at 900 s); a
resent answer is refused anyway here (``check_request`` finds no open interrupt).
"""


def bound_approval_state(runner: AgentFrameworkAgent, agent: FunctionalWorkflowAgent) -> None:
    """Replace ``runner``'s AG-UI approval state (AG-UI offers no option) with one that keeps pauses for one TTL."""
    ttl = agent.continuation_ttl
    set_agui_approval_state(
        runner,
        pending_retention_seconds=ttl,
        terminal_retention_seconds=min(ANSWERED_APPROVAL_RETENTION_SECONDS, ttl),
    )


def approval_purge(runner: AgentFrameworkAgent) -> Callable[[], Awaitable[int]]:
    """The purge a host's sweep runs: AG-UI expires and drops approvals past their retention on any read."""

    async def purge() -> int:
        agui_approval_state(runner).lifecycle.pending_interrupt_ids(thread_id="")
        return 0  # AG-UI does not say how many; the agent's lapse of the same pauses counts them

    return purge


def _request_call(interrupt: dict[str, Any]) -> Content | None:
    """The ``request_info`` call of a snapshot interrupt (its ``metadata.agent_framework``), or None."""
    metadata: Any = interrupt.get("metadata")
    framework: Any = cast(dict[str, Any], metadata).get("agent_framework") if isinstance(metadata, dict) else None
    call: Any = cast(dict[str, Any], framework).get("function_call") if isinstance(framework, dict) else None
    if not isinstance(call, dict) or cast(dict[str, Any], call).get("name") != REQUEST_INFO_FUNCTION_NAME:
        return None
    fields = cast(dict[str, Any], call)
    call_id = fields.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        return None
    return Content.from_function_call(
        call_id=call_id, name=REQUEST_INFO_FUNCTION_NAME, arguments=fields.get("arguments")
    )


def restore_open_approvals(
    runner: AgentFrameworkAgent, scope: str, thread_id: str, snapshot: AGUIThreadSnapshot
) -> None:
    """Register the snapshot's open ``request_info`` interrupts that this process's AG-UI state lacks."""
    for interrupt in snapshot.interrupt or []:
        interrupt_id = interrupt.get("id")
        call = _request_call(interrupt)
        if isinstance(interrupt_id, str) and call is not None:
            register_agui_hosted_approval(
                runner, scope=scope, thread_id=thread_id, interrupt_id=interrupt_id, call=call
            )


class UnsavedThreads:
    """An ``AGUIThreadSnapshotStore`` whose saves end the turns of their threads (:meth:`begin`).

    A turn runs from the run reaching the agent until AG-UI saves the thread's snapshot (the session's write
    back), or the run fails; until then a missing snapshot or token is not an orphaned pause.
    """

    def __init__(self, store: AGUIThreadSnapshotStore, agent: FunctionalWorkflowAgent) -> None:
        self.store = store
        self.turns = Turns(agent, None)  # AG-UI finds and writes the session: only the conversations are used
        self.running: dict[str, Turn] = {}  # by session id; bounded by the turns

    def begin(self, session: AgentSession) -> None:
        """A run of ``session``'s thread reached the agent.

        Raises:
            ConversationBusy: Another run of the thread has not saved its snapshot yet.
        """
        self.running[session.session_id] = self.turns.take(session.session_id, session)

    def end(self, session_id: str) -> None:
        """The turn of the thread ended (its snapshot saved, or its run failed)."""
        turn = self.running.pop(session_id, None)
        if turn is not None:
            turn.end()

    def unsaved(self, scope: str, thread_id: str) -> bool:
        """A run of the thread reached the agent and its snapshot is not saved yet."""
        return agui_session_id_for_thread(scope=scope, thread_id=thread_id) in self.running

    async def save(self, *, scope: str, thread_id: str, snapshot: AGUIThreadSnapshot) -> None:
        """Save through the store, then end the thread's turn."""
        try:
            await self.store.save(scope=scope, thread_id=thread_id, snapshot=snapshot)
        finally:
            self.end(agui_session_id_for_thread(scope=scope, thread_id=thread_id))

    async def get(self, *, scope: str, thread_id: str) -> AGUIThreadSnapshot | None:
        """The store's."""
        return await self.store.get(scope=scope, thread_id=thread_id)

    async def delete(self, *, scope: str, thread_id: str) -> bool:
        """The store's."""
        return await self.store.delete(scope=scope, thread_id=thread_id)

    async def clear(self, *, scope: str | None = None) -> None:
        """The store's."""
        await self.store.clear(scope=scope)
