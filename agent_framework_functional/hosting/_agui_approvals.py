"""AG-UI's approval state for a paused thread this process never saw, or whose snapshot is gone.

AG-UI refuses a resume with no open approval in its process-local store: :func:`restore_open_approvals` registers
them from the shared snapshot (the agent still checks the token).
"""

from __future__ import annotations

from typing import Any, cast

from agent_framework import AgentSession, Content
from agent_framework_ag_ui import AgentFrameworkAgent, AGUIThreadSnapshot, AGUIThreadSnapshotStore

from .._agent import FunctionalWorkflowAgent
from .._core_compat import agui_session_id_for_thread, register_agui_hosted_approval, set_agui_approval_state
from .._updates import REQUEST_INFO_FUNCTION_NAME
from ._turn import Turn, Turns

ANSWERED_APPROVAL_RETENTION_SECONDS = 60.0
"""How long AG-UI keeps an answered approval (its default, 900 s, caps a scope at 11 new approvals a second)."""


def bound_approval_state(runner: AgentFrameworkAgent, agent: FunctionalWorkflowAgent) -> None:
    """Replace ``runner``'s AG-UI approval state (AG-UI offers no option) with one that keeps pauses for one TTL."""
    ttl = agent.continuation_ttl
    set_agui_approval_state(
        runner,
        pending_retention_seconds=ttl,
        terminal_retention_seconds=min(ANSWERED_APPROVAL_RETENTION_SECONDS, ttl),
    )


def _request_call(interrupt: dict[str, Any]) -> Content | None:
    """The ``request_info`` call of a snapshot interrupt (its ``metadata.agent_framework``), or None."""
    call: Any = interrupt
    for key in ("metadata", "agent_framework", "function_call"):
        call = cast(dict[str, Any], call).get(key) if isinstance(call, dict) else None
    if not isinstance(call, dict) or cast(dict[str, Any], call).get("name") != REQUEST_INFO_FUNCTION_NAME:
        return None
    call_id, arguments = cast(dict[str, Any], call).get("call_id"), cast(dict[str, Any], call).get("arguments")
    if not isinstance(call_id, str) or not call_id:
        return None
    return Content.from_function_call(call_id=call_id, name=REQUEST_INFO_FUNCTION_NAME, arguments=arguments)


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
    """An ``AGUIThreadSnapshotStore`` counting each thread's runs whose snapshot is not saved yet.

    Until then a missing snapshot or token is not an orphaned pause (whose approvals ``check_request`` expires).
    """

    def __init__(self, store: AGUIThreadSnapshotStore, agent: FunctionalWorkflowAgent) -> None:
        self.store = store
        self.turns = Turns(agent, None)  # AG-UI finds and writes the session: only the conversations are used
        self.running: dict[str, int] = {}  # session id -> runs not saved yet; bounded by the runs in flight

    def begin(self, session: AgentSession) -> Turn:
        """A run of ``session``'s thread reached the agent: its turn (ConversationBusy while another streams)."""
        turn = self.turns.take(session.session_id, session)
        self.running[session.session_id] = self.running.get(session.session_id, 0) + 1
        return turn

    def end(self, session_id: str) -> None:
        """A run of the thread is saved or failed."""
        left = self.running.pop(session_id, 0) - 1
        if left > 0:
            self.running[session_id] = left

    def unsaved(self, scope: str, thread_id: str) -> bool:
        """A run of the thread reached the agent and its snapshot is not saved yet."""
        return agui_session_id_for_thread(scope=scope, thread_id=thread_id) in self.running

    async def save(self, *, scope: str, thread_id: str, snapshot: AGUIThreadSnapshot) -> None:
        """Save through the store, then count the thread's run as saved."""
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
