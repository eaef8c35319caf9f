"""AG-UI's approval state for a paused thread this process never saw, or whose snapshot is gone.

AG-UI keeps each open approval in a process-local store of its ``AgentFrameworkAgent`` and refuses a resume
(``APPROVAL_RESUME_NOT_FOUND``) that finds none, so with several workers only the one that paused could take
the answer. The thread's snapshot (in the shared store) keeps each open interrupt with its ``request_info``
call; :func:`restore_open_approvals` registers those in this process's approval state exactly as AG-UI does
when it streams the request. The agent still decides: the answer resumes only with the thread's token (in the
snapshot's session state) through the continuation store. Conversely, a thread whose snapshot the store dropped
(evicted, expired) took its token along: :func:`expire_open_approvals` retires its approvals, so AG-UI hands
new input to the agent instead of demanding an answer nobody can give; :class:`UnsavedThreads` tells that
apart from a run whose snapshot is not saved yet; :func:`approval_purge` lets a host's sweep drop what expired.
AG-UI's private approval API is used through ``_core_compat``,
pinned by ``tests/hosting/test_two_workers.py``, ``test_host_sessions.py``,
``test_sweep.py`` and ``test_host_private_names.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from agent_framework import Content
from agent_framework_ag_ui import AgentFrameworkAgent, AGUIThreadSnapshot, AGUIThreadSnapshotStore

from .._agent import FunctionalWorkflowAgent
from .._core_compat import (
    agui_approval_state,
    agui_session_id_for_thread,
    expire_agui_open_approvals,
    register_agui_hosted_approval,
    set_agui_approval_state,
)
from .._updates import REQUEST_INFO_FUNCTION_NAME
from ._turn import RunningTurns

ANSWERED_APPROVAL_RETENTION_SECONDS = 60.0
"""How long AG-UI keeps an answered approval of an ``agui_endpoint`` (AG-UI's default: 900 s), at most the TTL.

AG-UI keeps each answered approval (about 8 KB) to refuse a resent answer, and refuses every new approval of
a scope once it keeps 10,000 (one scope for ``single_user``): at its 900 s default, past about 11 answered
approvals a second. Here a resent answer is refused anyway: ``check_request`` finds no open interrupt, and the
pause's token is spent.
"""


def bound_approval_state(runner: AgentFrameworkAgent, agent: FunctionalWorkflowAgent) -> None:
    """Give ``runner`` an AG-UI approval state that keeps what the agent keeps: pauses for one TTL.

    An unanswered approval expires with the agent's ``continuation_ttl`` (AG-UI's default: 24 h, whatever the
    TTL); answered and expired ones are dropped :data:`ANSWERED_APPROVAL_RETENTION_SECONDS` (or the TTL, if
    shorter) later, on AG-UI's next touch of its approval state.
    ``AgentFrameworkAgent`` builds its store with AG-UI's defaults and offers no option, so it is replaced.
    """
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


def expire_open_approvals(runner: AgentFrameworkAgent, scope: str, thread_id: str) -> None:
    """Expire the thread's pending approvals in ``runner``'s AG-UI state (its pause was orphaned)."""
    expire_agui_open_approvals(runner, scope=scope, thread_id=thread_id)


class UnsavedThreads:
    """An ``AGUIThreadSnapshotStore`` that knows which threads have a run whose snapshot is not saved yet.

    A run is noted when it reaches the agent (``runs.begin``, by session id) and forgotten when AG-UI saves its
    thread's snapshot; until then a missing snapshot or token is not an orphaned pause. Bounded: past
    ``max_threads`` (runs whose save never came) the oldest notes go.

    Args:
        store: The snapshot store AG-UI uses.
        max_threads: Notes kept at most.
    """

    def __init__(self, store: AGUIThreadSnapshotStore, max_threads: int) -> None:
        self.store = store
        self.runs = RunningTurns(max_threads)  # by session id: begun when a run reaches the agent

    def unsaved(self, scope: str, thread_id: str) -> bool:
        """A run of the thread reached the agent and its snapshot is not saved yet."""
        return agui_session_id_for_thread(scope=scope, thread_id=thread_id) in self.runs

    async def save(self, *, scope: str, thread_id: str, snapshot: AGUIThreadSnapshot) -> None:
        """Save through the store, then forget one run of the thread."""
        await self.store.save(scope=scope, thread_id=thread_id, snapshot=snapshot)
        self.runs.end(agui_session_id_for_thread(scope=scope, thread_id=thread_id))

    async def get(self, *, scope: str, thread_id: str) -> AGUIThreadSnapshot | None:
        """The store's."""
        return await self.store.get(scope=scope, thread_id=thread_id)

    async def delete(self, *, scope: str, thread_id: str) -> bool:
        """The store's."""
        return await self.store.delete(scope=scope, thread_id=thread_id)

    async def clear(self, *, scope: str | None = None) -> None:
        """The store's."""
        await self.store.clear(scope=scope)
