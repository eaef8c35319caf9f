"""AG-UI's approval state for a paused thread this process never saw (another worker paused it, or a restart).

AG-UI keeps each open approval in a process-local store of its ``AgentFrameworkAgent`` and refuses a resume
(``APPROVAL_RESUME_NOT_FOUND``) that finds none, so with several workers only the one that paused could take
the answer. The thread's snapshot (in the shared store) keeps each open interrupt with its ``request_info``
call; :func:`restore_open_approvals` registers those in this process's approval state exactly as AG-UI does
when it streams the request. The agent still decides: the answer resumes only with the thread's token (in the
snapshot's session state) through the continuation store. Every touch of AG-UI's private approval API is here,
pinned by ``tests/hosting/test_two_workers.py``.
"""

from __future__ import annotations

from typing import Any, cast

from agent_framework import Content
from agent_framework_ag_ui import AgentFrameworkAgent, AGUIThreadSnapshot
from agent_framework_ag_ui._approval_lifecycle import ApprovalExecutionOwner  # pyright: ignore[reportPrivateUsage]
from agent_framework_ag_ui._approval_state import approval_state_thread_id  # pyright: ignore[reportPrivateUsage]
from agent_framework_ag_ui._utils import canonical_function_arguments  # pyright: ignore[reportPrivateUsage]

from .._updates import REQUEST_INFO_FUNCTION_NAME


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
