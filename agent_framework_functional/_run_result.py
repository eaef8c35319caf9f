"""The run result: core's ``WorkflowRunResult`` plus the token, built from either run mode."""

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
    """Core's ``WorkflowRunResult`` plus ``continuation_token``: set only when the run ended paused.

    Args:
        events: Data-plane events of the run, as core collects them.
        status_events: Status events of the run (core's status timeline).
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
    """Core's result events with a non-streaming run's live updates merged in production order.

    Each live entry carries the events core collected before it, so the entries go right after core's
    first status, and core's events they already hold are skipped.
    """
    head = 1 if include_status_events and result and result[0].type == "status" else 0
    events: list[WorkflowEvent[Any]] = list(result[:head])
    events.extend(collector.drain())
    events.extend(event for event in result[head:] if collector.is_new(event))
    return events


def failure_surface(exc: Exception) -> list[WorkflowEvent[Any]]:
    """The failed event and FAILED status core omits when saving the pause checkpoint fails (redacted as core's)."""
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
