"""AG-UI's approval state for a paused thread this process never saw (another worker paused it, or a restart).

AG-UI keeps each open approval in a process-local store of its ``AgentFrameworkAgent`` and refuses a resume
(``APPROVAL_RESUME_NOT_FOUND``) that finds none, so with several workers only the one that paused could take
the answer. The thread's snapshot (in the shared store) keeps each open interrupt with its ``request_info``
call; :func:`restore_open_approvals` registers those in this process's approval state exactly as AG-UI does
when it streams the request. The agent still decides: the answer resumes only with the thread's token (in the
snapshot's session state) through the continuation store. :func:`bound_approval_state` keeps the approval state to
the agent's TTL, and :func:`approval_purge` lets a host's sweep drop what expired. Every touch of AG-UI's private
approval API is here, pinned by ``tests/hosting/test_two_workers.py`` and ``tests/hosting/test_sweep.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from agent_framework import Content
from agent_framework_ag_ui import AgentFrameworkAgent, AGUIThreadSnapshot
from agent_framework_ag_ui._approval_lifecycle import ApprovalExecutionOwner  # pyright: ignore[reportPrivateUsage]
from agent_framework_ag_ui._approval_state import (  # pyright: ignore[reportPrivateUsage]
    InMemoryAGUIApprovalStateStore,
    approval_state_thread_id,
)
from agent_framework_ag_ui._utils import canonical_function_arguments  # pyright: ignore[reportPrivateUsage]

from .._agent import FunctionalWorkflowAgent
from .._updates import REQUEST_INFO_FUNCTION_NAME

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
    runner._approval_state_store = InMemoryAGUIApprovalStateStore(  # pyright: ignore[reportPrivateUsage]
        pending_retention_seconds=ttl,
        terminal_retention_seconds=min(ANSWERED_APPROVAL_RETENTION_SECONDS, ttl),
    )


def approval_purge(runner: AgentFrameworkAgent) -> Callable[[], Awaitable[int]]:
    """The purge a host's sweep runs: AG-UI expires and drops approvals past their retention on any read."""

    async def purge() -> int:
        runner._approval_state_store.lifecycle.pending_interrupt_ids(thread_id="")  # pyright: ignore[reportPrivateUsage]
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
    store = runner._approval_state_store  # pyright: ignore[reportPrivateUsage]
    approval_thread = approval_state_thread_id(scope=scope, thread_id=thread_id)
    for interrupt in snapshot.interrupt or []:
        interrupt_id = interrupt.get("id")
        call = _request_call(interrupt)
        if not isinstance(interrupt_id, str) or call is None:
            continue
        if store.lifecycle.occurrence_for_alias(thread_id=approval_thread, interrupt_id=interrupt_id) is not None:
            continue
        store.register(
            owner=ApprovalExecutionOwner.HOSTED,  # what AG-UI records for the agent's request_info calls
            scope=scope,
            thread_ids=[approval_thread],
            name=REQUEST_INFO_FUNCTION_NAME,
            arguments=canonical_function_arguments(call) or "{}",
            request_id=interrupt_id,
            interrupt_id=interrupt_id,
            call_id=call.call_id,
            function_call_id=call.call_id,
        )
