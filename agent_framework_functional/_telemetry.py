"""Continuation telemetry through the OpenTelemetry API ("Observability" in the docs lists the names).

Each point of a continuation's life is an event on the current span and a child span of it (DevUI draws
spans, not events), and updates three metrics; never a secret or an answer, only the token's hash.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

from opentelemetry import metrics, trace

from ._authority_protocol import Authority, ResumeTicket, raw_token
from ._continuation import Continuation, hash_secret, presented_secret
from ._errors import (
    CheckpointRestoreConflictError,
    ContinuationAuthorityError,
    PendingContinuationError,
    ResponseMismatchError,
    WorkflowRunningError,
)

EVENT_ISSUED = "functional_workflow.continuation.issued"
EVENT_ACCEPTED = "functional_workflow.continuation.accepted"
EVENT_SPENT = "functional_workflow.continuation.spent"
EVENT_REJECTED = "functional_workflow.continuation.rejected"
EVENT_ABANDONED = "functional_workflow.continuation.abandoned"
EVENT_RESTORED = "functional_workflow.continuation.restored"

ATTR_WORKFLOW_NAME = "workflow.name"  # core's OtelAttr.WORKFLOW_NAME
ATTR_TOKEN_HASH = "functional_workflow.continuation_token_hash"
ATTR_REQUEST_IDS = "functional_workflow.request_ids"
ATTR_CHECKPOINT_ID = "functional_workflow.checkpoint_id"
ATTR_FORCED = "functional_workflow.continuation.forced"
ATTR_REASON = "error.type"  # OpenTelemetry's attribute for why an operation failed

METRIC_PENDING = "functional_workflow.continuation.pending"
METRIC_WAIT = "functional_workflow.continuation.wait.duration"
METRIC_REJECTED = "functional_workflow.continuation.rejected"

# The reasons a resume (or an abandonment) is refused: ``error.type`` on the event and the counter.
BAD_TOKEN = "bad_token"
SPENT = "spent"
PENDING_CONFLICT = "pending_conflict"
TYPE_MISMATCH = "type_mismatch"
RUNNING = "running"

_meter = metrics.get_meter("agent_framework_functional")
_pending = _meter.create_up_down_counter(
    METRIC_PENDING, unit="{continuation}", description="Continuations issued here and not yet spent or abandoned."
)
_wait = _meter.create_histogram(
    METRIC_WAIT, unit="s", description="Time from a pause (its token issued) to the resume that spent the token."
)
_rejected = _meter.create_counter(
    METRIC_REJECTED, unit="{attempt}", description="Refused resume or abandonment attempts, by reason (error.type)."
)
_tracer = trace.get_tracer("agent_framework_functional")  # a proxy until a provider is set
_T = TypeVar("_T")


def _token_hash(token: object) -> str | None:
    secret = presented_secret(raw_token(token))
    return hash_secret(secret) if secret is not None else None


def _reason_of_type(exc: BaseException) -> str | None:
    if isinstance(exc, ContinuationAuthorityError):
        return BAD_TOKEN
    if isinstance(exc, (PendingContinuationError, CheckpointRestoreConflictError)):
        return PENDING_CONFLICT
    if isinstance(exc, ResponseMismatchError):
        return TYPE_MISMATCH
    return RUNNING if isinstance(exc, WorkflowRunningError) else None


def note_refusal(workflow: str, exc: BaseException, authority: Authority, token: object) -> None:
    """Count a refused call by its reason, for telemetry only (the caller still gets ``exc``, one fixed message)."""
    reason = _reason_of_type(exc)
    secret = presented_secret(raw_token(token)) if reason == BAD_TOKEN else None
    if secret is not None:
        text = secret.decode("ascii")
        pending = authority.pending
        if pending is not None and pending.reserved and pending.secret == text:
            reason = RUNNING  # its resume was accepted and has not finished
        elif authority.spent_hash == hash(text):
            reason = SPENT
    if reason is not None:
        continuation_rejected(workflow, reason, token)


async def counted_refusal(checking: Awaitable[_T], workflow: str) -> _T:
    """Await the authority's checks of an accepted run; count a refusal (an authority one as ``bad_token``)."""
    try:
        return await checking
    except Exception as exc:
        reason = _reason_of_type(exc)
        if reason is not None:
            continuation_rejected(workflow, reason)
        raise


def _event(name: str, workflow: str, attributes: dict[str, Any], span: trace.Span | None = None) -> None:
    """Add the event to ``span`` (else the current span) and as a child span of it."""
    attributes[ATTR_WORKFLOW_NAME] = workflow
    target = span or trace.get_current_span()
    kept = {key: value for key, value in attributes.items() if value is not None}
    target.add_event(name, kept)
    _tracer.start_span(name, context=trace.set_span_in_context(target), attributes=kept).end()


def continuation_issued(workflow: str, continuation: Continuation, span: trace.Span) -> None:
    """A pause was saved and its token issued (one more pending continuation); ``span``: the run's."""
    _pending.add(1, {ATTR_WORKFLOW_NAME: workflow})
    if span.is_recording():
        token_hash, request_ids = hash_secret(continuation.secret), sorted(continuation.pending_requests)
        _event(EVENT_ISSUED, workflow, {ATTR_TOKEN_HASH: token_hash, ATTR_REQUEST_IDS: request_ids}, span)


def continuation_started(workflow: str, ticket: ResumeTicket, checkpoint_id: str | None) -> trace.Span:
    """An accepted run starts (a resume or a restore); returns the span the run reports to (looked up once)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return span
    if checkpoint_id is not None:
        _event(EVENT_RESTORED, workflow, {ATTR_CHECKPOINT_ID: checkpoint_id}, span)
    elif ticket.responses is not None:
        continuation = ticket.continuation
        token_hash = hash_secret(continuation.secret) if continuation is not None else ticket.claim_hash
        attributes = {ATTR_TOKEN_HASH: token_hash, ATTR_REQUEST_IDS: sorted(ticket.responses)}
        _event(EVENT_ACCEPTED, workflow, attributes, span)
    return span


def continuation_spent(
    workflow: str, continuation: Continuation | None, record: Any, claim_hash: str | None, span: trace.Span
) -> None:
    """A resumed pause's token was spent, right before resumed user code (``record``: a pause held elsewhere)."""
    attributes = {ATTR_WORKFLOW_NAME: workflow}
    _pending.add(-1, attributes)
    issued_at = continuation.issued_at if continuation is not None else getattr(record, "created_at", None)
    if issued_at is not None:
        _wait.record(max(0.0, time.time() - issued_at), attributes)
    if span.is_recording():
        if continuation is not None:
            token_hash, request_ids = claim_hash or hash_secret(continuation.secret), continuation.pending_requests
        else:
            token_hash, request_ids = claim_hash, getattr(record, "pending_request_ids", ())
        _event(EVENT_SPENT, workflow, {ATTR_TOKEN_HASH: token_hash, ATTR_REQUEST_IDS: sorted(request_ids)}, span)


def continuation_rejected(workflow: str, reason: str, token: object = None) -> None:
    """A resume or abandonment was refused for ``reason`` (one of the module's reason names)."""
    _rejected.add(1, {ATTR_WORKFLOW_NAME: workflow, ATTR_REASON: reason})
    if trace.get_current_span().is_recording():
        _event(EVENT_REJECTED, workflow, {ATTR_REASON: reason, ATTR_TOKEN_HASH: _token_hash(token)})


def continuation_abandoned(
    workflow: str, token: object, *, forced: bool, request_ids: Iterable[str], counted: bool
) -> None:
    """A pending continuation was abandoned (``counted``: it was pending in this process)."""
    if counted:
        _pending.add(-1, {ATTR_WORKFLOW_NAME: workflow})
    if trace.get_current_span().is_recording():
        attributes = {ATTR_TOKEN_HASH: _token_hash(token), ATTR_REQUEST_IDS: sorted(request_ids), ATTR_FORCED: forced}
        _event(EVENT_ABANDONED, workflow, attributes)
