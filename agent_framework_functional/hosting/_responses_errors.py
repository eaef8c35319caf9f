"""The Responses route's errors: one the agent raises on purpose is a refusal, a store's a 503, others a 500."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi.responses import JSONResponse

from .._errors import (
    ContinuationAuthorityError,
    ContinuationStoreDurabilityError,
    DurableStoreError,
    FunctionalWorkflowError,
    PendingContinuationError,
    ResponseMismatchError,
    StaleContinuationError,
    WorkflowRunningError,
)
from ._responses_input import ResponsesRequest

# The agent's messages advise Python calls; a client of this route can only send requests, so these say which.
PENDING_MESSAGE = (
    "This conversation is paused on a request: answer it first (a function_call_output with its call_id, or an "
    "mcp_approval_response with its approval_request_id), or start a new conversation for new input."
)
STALE_MESSAGE = (
    "This response is not the conversation's latest: its pause was already answered, abandoned or expired. "
    "Continue from the latest response (its id as previous_response_id), or send new input here to start over."
)
REFUSED_MESSAGE = (
    "Nothing here can be answered: the pause was already answered, abandoned or expired, or none is pending. "
    "Continue from the conversation's latest response, or send new input to start a new run."
)
# A store failure is the server's: its details (addresses, settings) stay in the server's log.
STORE_MESSAGE = (
    "The server's continuation store failed during this request (unreachable, or not set up to keep a claim); "
    "the request may not have taken effect. Try again later, from the conversation's latest response."
)

# Refusals whose message is fixed (409, x-should-retry false), the first match wins (Stale is an authority error).
_FIXED: tuple[tuple[type[BaseException], str, str], ...] = (
    (PendingContinuationError, "pending_request", PENDING_MESSAGE),
    (StaleContinuationError, "continuation_refused", STALE_MESSAGE),
    (ContinuationAuthorityError, "continuation_refused", REFUSED_MESSAGE),
)


class Refusal(Exception):
    """One HTTP error response: status, OpenAI-style error code and message, the field, whether to retry."""

    def __init__(self, status: int, code: str, message: str, *, param: str | None = None, retry: bool = False):
        super().__init__(message)
        self.status, self.code, self.message, self.param, self.retry = status, code, message, param, retry


def refusal_for(exc: BaseException, request: ResponsesRequest | None = None) -> Refusal | None:
    """The HTTP answer to an error the agent raised on purpose (None: not the client's doing)."""
    if isinstance(exc, WorkflowRunningError):
        return Refusal(409, "workflow_running", str(exc), retry=True)
    for kind, code, message in _FIXED:
        if isinstance(exc, kind):
            return Refusal(409, code, message)
    if isinstance(exc, ResponseMismatchError):
        return Refusal(400, "answer_mismatch", str(exc), param=_answer_param(exc, request))
    if isinstance(exc, DurableStoreError):  # the server's store, not the client's request
        retry = not isinstance(exc, ContinuationStoreDurabilityError)  # a misconfigured store stays so
        return Refusal(503, "store_unavailable", STORE_MESSAGE, retry=retry)
    if isinstance(exc, FunctionalWorkflowError):
        if isinstance(exc, ValueError):
            return Refusal(400, "invalid_request", str(exc))
        return Refusal(409, "conflict", str(exc))
    return None


def _answer_param(exc: ResponseMismatchError, request: ResponsesRequest | None) -> str:
    """The input field of the answer the agent refused (its id field when that id names no pending request)."""
    if request is None:
        return "input"
    fields: Mapping[str, str] = request.answer_id_params if exc.unknown_id else request.answer_params
    if exc.request_id is not None and exc.request_id in fields:
        return fields[exc.request_id]
    named = [field for request_id, field in fields.items() if repr(request_id) in str(exc)]
    if len(named) == 1:
        return named[0]
    return next(iter(fields.values())) if len(fields) == 1 else "input"


def error_response(refusal: Refusal, retry_after: int) -> JSONResponse:
    """The refusal as the OpenAI-style JSON error body, with ``x-should-retry`` (and ``retry-after``)."""
    kind = "server_error" if refusal.status >= 500 else "invalid_request_error"
    body = {"error": {"type": kind, "code": refusal.code, "message": refusal.message, "param": refusal.param}}
    headers = {"x-should-retry": "true" if refusal.retry else "false"}
    if refusal.retry:
        headers["retry-after"] = str(retry_after)
    return JSONResponse(body, status_code=refusal.status, headers=headers)
