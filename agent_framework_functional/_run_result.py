"""The run result: core's ``WorkflowRunResult`` plus the token, built from either run mode.

Streaming runs build it from the events they yielded (:func:`finalize_events`, as core's finalizer
does); non-streaming runs take core's own result and merge live updates in (:func:`merge_live`).
:func:`failure_surface` is the failed event and status core omits when saving a pause fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agent_framework import (
    WorkflowErrorDetails,
    WorkflowEvent,
    WorkflowEventSource,
    WorkflowRunResult,
    WorkflowRunState,
)
from agent_framework.observability import OBSERVABILITY_SETTINGS

from ._continuation import FunctionalWorkflowContinuationToken

if TYPE_CHECKING:
    from ._live import LiveCollector
    from ._run import WorkflowRun


class FunctionalWorkflowRunResult(WorkflowRunResult):
    """Core's ``WorkflowRunResult`` plus the continuation token of a paused run.

    Args:
        events: Data-plane events of the run, as core collects them.
        status_events: Status events of the run (core's status timeline).

    Keyword Args:
        continuation_token: The token that authorises a response-only resume, or None when the
            run did not end paused (finished, or failed).
    """

    def __init__(
        self,
        events: list[WorkflowEvent[Any]],
        status_events: list[WorkflowEvent[Any]] | None = None,
        *,
        continuation_token: FunctionalWorkflowContinuationToken | None = None,
    ) -> None:
        super().__init__(events, status_events)
        self.continuation_token: FunctionalWorkflowContinuationToken | None = continuation_token


def merge_live(
    result: WorkflowRunResult, collector: LiveCollector, include_status_events: bool
) -> list[WorkflowEvent[Any]]:
    """Core's result events with the live updates of a non-streaming run merged in production order.

    Every live entry carries the events core collected before it (they go first, and are skipped
    when core's result has them again), so the entries go right after what core yielded before user
    code (its first status, when status events are included), followed by core's remaining events.
    """
    head = 1 if include_status_events and result and result[0].type == "status" else 0
    events: list[WorkflowEvent[Any]] = list(result[:head])
    events.extend(collector.drain())
    events.extend(event for event in result[head:] if collector.is_new(event))
    return events


def failure_surface(exc: Exception) -> list[WorkflowEvent[Any]]:
    """The failed event and FAILED status core omits when saving the pause checkpoint fails.

    Redacted as core's own failed event is: message and traceback only with sensitive data on.
    """
    details = WorkflowErrorDetails.from_exception(
        exc, include_sensitive_data=OBSERVABILITY_SETTINGS.SENSITIVE_DATA_ENABLED
    )
    return [
        WorkflowEvent("failed", details=details, origin=WorkflowEventSource.FRAMEWORK),
        WorkflowEvent("status", state=WorkflowRunState.FAILED, origin=WorkflowEventSource.FRAMEWORK),
    ]


def finalize_events(
    events: Sequence[WorkflowEvent[Any]],
    *,
    run: WorkflowRun,
    include_status_events: bool,
) -> FunctionalWorkflowRunResult:
    """Build the run result the way core's finalizer does, plus the continuation token."""
    kept: list[WorkflowEvent[Any]] = []
    status_events: list[WorkflowEvent[Any]] = []
    for event in events:
        if event.type == "started":
            continue
        if event.type == "status":
            status_events.append(event)
            if not include_status_events:
                continue
        kept.append(event)
    return FunctionalWorkflowRunResult(kept, status_events, continuation_token=run.token)
