"""Every exception this package raises on purpose, in one tree.

Each also subclasses the builtin callers already catch (``ValueError``, ``RuntimeError``). Two bases
group them by what the caller can do: :class:`CallRefusedError` (fix the call and retry) and
:class:`DurableStoreError` (a store failed; the message says whether a write may have happened)::

    Exception
     └── FunctionalWorkflowError
          ├── CallRefusedError                                  refused; nothing ran, nothing changed
          │    ├── ContinuationAuthorityError (also ValueError) bad, missing or spent continuation token
          │    │    └── StaleContinuationError                  the session's own stored token is spent,
          │    │                                                abandoned or expired (the agent knows it)
          │    ├── ResponseMismatchError     (also ValueError)  answers match no pending request, or have
          │    │                                                the wrong type; the continuation stays pending
          │    ├── PendingContinuationError  (also RuntimeError) new input while a continuation is pending
          │    ├── WorkflowRunningError      (also RuntimeError) the instance is already running
          │    ├── ContinuationStoreAsyncError (also RuntimeError) a synchronous call on an instance with a
          │    │                                                continuation store: use the async method
          │    └── CheckpointRestoreConflictError (also RuntimeError) a checkpoint restore lost the race to
          │                                                     a resume with the pause's continuation token
          ├── DurableStoreError                                 a store or checkpoint storage failed
          │    ├── ContinuationStoreDurabilityError (also RuntimeError) Redis cannot keep a claim through
          │    │                                                a crash
          │    └── PostgresUnavailableError (also psycopg.OperationalError) PostgreSQL unreachable or the
          │                                                connection lost (``_durable/postgres_errors.py``,
          │                                                loaded with psycopg)
          ├── PauseNotSavedError            (also RuntimeError) a pause could not be checkpointed, so it
          │                                                     cannot be recorded in the continuation store
          └── NotInWorkflowRunError         (also RuntimeError) emit_update / stream_agent outside a run

All of them pickle (hosts send them across processes); no message echoes a secret. The authority
and stale errors have one fixed message each; the others say what happened and what to do next.
"""

from __future__ import annotations

from typing import Any

AUTHORITY_ERROR_MESSAGE = (
    "The continuation token was not accepted. Resume with the continuation_token returned by the "
    "run that paused, restore the pause from its checkpoint (checkpoint_id=...), or start a new run."
)

STALE_CONTINUATION_MESSAGE = (
    "This session's continuation token no longer resumes anything: its pause was already answered, abandoned "
    "or expired (the session is an older copy of the conversation). Answer on the conversation's latest "
    "session, or send new input on this one to start a new run."
)

AGENT_PENDING_CONTINUATION_MESSAGE = (
    "This agent's workflow has a pending continuation (a run paused on request_info). Answer the pending "
    "requests first: send a message whose contents are function_approval_response / function_result "
    "contents for them (on the same session, or with the continuation token), or call "
    "agent.abandon_continuation(token) / agent.abandon_continuation(session=session) before sending new input."
)


class FunctionalWorkflowError(Exception):
    """Base class of every error this package raises on purpose; ``message`` defaults to the class's own.

    Further arguments go on to ``Exception`` (or the library error a backend's error mixes in).
    """

    default_message: str | None = None

    def __init__(self, message: object = None, *args: object, **kwargs: Any) -> None:
        if message is None and not args:
            message = self.default_message
        super().__init__(*(() if message is None else (message,)), *args, **kwargs)


class CallRefusedError(FunctionalWorkflowError):
    """A call was refused before it changed anything: no user code ran, no token was spent or issued."""


class DurableStoreError(FunctionalWorkflowError):
    """A store failed (unreachable, or a write not kept); the message says whether the operation may have happened."""


class ContinuationAuthorityError(CallRefusedError, ValueError):
    """A resume or an abandonment did not present valid authority; one fixed message (AGENTS.md invariant 2).

    ``message`` is ignored (it is there for pickling), so callers cannot probe what is pending.
    """

    default_message = AUTHORITY_ERROR_MESSAGE

    def __init__(self, message: str | None = None) -> None:
        super().__init__(None)


class StaleContinuationError(ContinuationAuthorityError):
    """Answers arrived on a session whose own stored token is spent, abandoned or expired (the agent knows it).

    A host can tell "this conversation moved on" from a bad token; new input starts a fresh run.
    """

    default_message = STALE_CONTINUATION_MESSAGE


class ResponseMismatchError(CallRefusedError, ValueError):
    """The answers of an authorised resume do not fit the pause; nothing was spent and the token stays valid.

    Keyword Args:
        request_id: The refused answer's id when one answer is at fault (for a host to point at it).
        unknown_id: True when the answer at fault names no pending request (its id is wrong, not its value).
    """

    default_message = (
        "The answers do not fit the pending requests. Key each answer by a pending request id, with a value "
        "of the request's response_type; the continuation is still pending."
    )

    def __init__(self, message: str | None = None, *, request_id: str | None = None, unknown_id: bool = False) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.unknown_id = unknown_id


class PendingContinuationError(CallRefusedError, RuntimeError):
    """New input or a checkpoint restore arrived while a continuation is pending (it stays intact)."""

    default_message = (
        "This workflow instance has a pending continuation (a run paused on request_info). "
        "Resume it with responses=... and its continuation_token, or call "
        "abandon_continuation(token) before starting new input or restoring a checkpoint."
    )


class WorkflowRunningError(CallRefusedError, RuntimeError):
    """The workflow instance is already running; one run at a time per instance."""

    default_message = (
        "This workflow instance is already running; concurrent runs are not allowed. Wait for the "
        "active run to finish or close its stream, or build another instance for another caller."
    )


class ContinuationStoreAsyncError(CallRefusedError, RuntimeError):
    """A synchronous method was called on an instance with a continuation store (updated only asynchronously)."""

    default_message = (
        "This workflow instance records continuations in a continuation store, so abandoning must update "
        "the store too: call `await workflow.abandon_continuation_async(token)` (or force=True) instead."
    )


class PauseNotSavedError(FunctionalWorkflowError, RuntimeError):
    """A run paused but no checkpoint was saved for it, so no token is issued (core's failure surface)."""

    default_message = (
        "The pause was not checkpointed, so it cannot be recorded in the continuation store. "
        "Check the checkpoint storage given to build()."
    )


class NotInWorkflowRunError(FunctionalWorkflowError, RuntimeError):
    """``emit_update`` or ``stream_agent`` was called outside a running workflow (or after its run ended)."""

    default_message = (
        "This was called outside a running workflow. Call it from a @workflow function, one of its @step "
        "functions, or a task they await, while the run is in progress."
    )


class ContinuationStoreDurabilityError(DurableStoreError, RuntimeError):
    """Redis cannot keep a claim through a crash, or did not confirm in time that it kept one (``waitaof``).

    Raised before the store's first write; a claim that raises it runs no resumed code.
    """

    default_message = (
        "Redis cannot keep a claim through a crash. Run it with appendonly yes and appendfsync always, or pass "
        "durability='best_effort' to RedisContinuationStore to accept weaker durability."
    )


class CheckpointRestoreConflictError(CallRefusedError, RuntimeError):
    """A checkpoint restore lost the race to a resume that presented the pause's token (nothing ran)."""

    default_message = (
        "This checkpoint's pause was resumed with its continuation token while the restore started, so "
        "restoring it too could run the resumed code twice; nothing ran. Let that resume finish and continue "
        "from its result. Restore this checkpoint only once you know that resume failed or its worker died."
    )
