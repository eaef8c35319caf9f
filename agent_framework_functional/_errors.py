"""Every exception this package raises on purpose, in one tree.

Every concrete error subclasses both :class:`FunctionalWorkflowError` and the builtin that callers already
catch, so existing ``except ValueError`` / ``except RuntimeError`` handlers keep working. Two
intermediate bases group them by what the caller can do: :class:`CallRefusedError` (the call was
refused before it changed anything: fix the call and retry) and :class:`DurableStoreError` (a store
or checkpoint storage failed: the message says whether a write may have happened)::

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

All of them pickle (hosts send them across processes) and none of their messages echo a secret or
the token. :class:`ContinuationAuthorityError` and :class:`StaleContinuationError` each have one
fixed message; the others say what happened and what to do next.
"""

from __future__ import annotations

AUTHORITY_ERROR_MESSAGE = (
    "The continuation token was not accepted. Resume with the continuation_token returned by the "
    "run that paused, restore the pause from its checkpoint (checkpoint_id=...), or start a new run."
)

PENDING_CONTINUATION_MESSAGE = (
    "This workflow instance has a pending continuation (a run paused on request_info). "
    "Resume it with responses=... and its continuation_token, or call "
    "abandon_continuation(token) before starting new input or restoring a checkpoint."
)

AGENT_PENDING_CONTINUATION_MESSAGE = (
    "This agent's workflow has a pending continuation (a run paused on request_info). Answer the pending "
    "requests first: send a message whose contents are function_approval_response / function_result "
    "contents for them (on the same session, or with the continuation token), or call "
    "agent.abandon_continuation(token) / agent.abandon_continuation(session=session) before sending new input."
)


class FunctionalWorkflowError(Exception):
    """Base class of every error this package raises on purpose.

    Catch it to handle all continuation problems in one place; catch a subclass (or the builtin it
    also derives from) to handle one.
    """


class CallRefusedError(FunctionalWorkflowError):
    """A call was refused before it changed anything: no user code ran, no token was spent or issued.

    Catch it to tell "fix the call and try again" from a failure: every refusal (authority, answers that
    do not fit, a pending continuation, a running instance, a sync call that needs the async one, a restore
    that lost to a resume) derives from it and keeps its builtin base (``ValueError`` or ``RuntimeError``).
    """


class DurableStoreError(FunctionalWorkflowError):
    """A continuation store or checkpoint storage failed: unreachable, or it could not keep a write.

    The message says whether the operation may have happened (a claim whose reply was lost may have spent
    its token). Each subclass keeps the base its backend's callers already catch.
    """


class ContinuationAuthorityError(CallRefusedError, ValueError):
    """A response-only resume or an abandonment did not present valid continuation authority.

    Raised for every authority problem with one fixed message: no pending continuation, token
    missing, ``None``, not a mapping, missing fields, wrong ``kind`` or ``version``, wrong value,
    non-ASCII or unpaired-surrogate text, wrong types, a token of another workflow instance, or a
    token already spent. The message reveals nothing (AGENTS.md, invariant 2), so callers cannot
    probe what is pending.

    Args:
        message: Ignored; accepted so that the exception pickles. The message is always
            :data:`AUTHORITY_ERROR_MESSAGE`.
    """

    def __init__(self, message: str | None = None) -> None:
        del message
        super().__init__(AUTHORITY_ERROR_MESSAGE)


STALE_CONTINUATION_MESSAGE = (
    "This session's continuation token no longer resumes anything: its pause was already answered, abandoned "
    "or expired (the session is an older copy of the conversation). Answer on the conversation's latest "
    "session, or send new input on this one to start a new run."
)


class StaleContinuationError(ContinuationAuthorityError):
    """Answers arrived on a session whose own stored token is known to be spent, abandoned or expired.

    Raised by the agent adapter instead of the generic authority error only for the token it keeps in
    the session (never for a token the caller presents), so a host can tell "this conversation moved
    on" from "pending" and from a bad token. Nothing changed. New input on such a session starts a
    fresh run. Also a :class:`ContinuationAuthorityError` (and a ``ValueError``).

    Args:
        message: Ignored; accepted so that the exception pickles. The message is always
            :data:`STALE_CONTINUATION_MESSAGE`.
    """

    def __init__(self, message: str | None = None) -> None:
        del message
        ValueError.__init__(self, STALE_CONTINUATION_MESSAGE)


class ResponseMismatchError(CallRefusedError, ValueError):
    """The answers of an authorised resume do not fit the pause; nothing was spent or changed.

    Raised after authority passed (so the message may name the pause's request ids) when no answer
    is keyed by a pending request id, a chat-native answer names no pending request or answers one
    twice, or an answer cannot be converted to its request's ``response_type`` (also when it nests
    too deeply to be read). The continuation stays pending: fix the answers and resume again with
    the same token.

    Args:
        message: What does not fit and how to fix it.

    Keyword Args:
        request_id: The id the refused answer carries, when one answer is at fault (kept as
            ``request_id``, so a host can point at the input field that holds it).
    """

    def __init__(
        self,
        message: str = (
            "The answers do not fit the pending requests. Key each answer by a pending request id, with a value "
            "of the request's response_type; the continuation is still pending."
        ),
        *,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.request_id = request_id


class PendingContinuationError(CallRefusedError, RuntimeError):
    """New input or a checkpoint restore arrived while a continuation is pending.

    The pending continuation is left intact and still resumes with its token. Resolve it first:
    resume with ``responses=...`` and the token, or abandon it with
    ``abandon_continuation(token)`` (or ``force=True`` as the owner). The agent adapter raises it
    with :data:`AGENT_PENDING_CONTINUATION_MESSAGE`, which says how a chat caller answers.

    Args:
        message: What happened and what to do next.
    """

    def __init__(self, message: str = PENDING_CONTINUATION_MESSAGE) -> None:
        super().__init__(message)


class WorkflowRunningError(CallRefusedError, RuntimeError):
    """The workflow instance is already running; one run at a time per instance.

    Wait for the active run to finish (or close its stream) and try again, or build a separate
    instance for an independent caller.

    Args:
        message: What happened and what to do next.
    """

    def __init__(
        self,
        message: str = (
            "This workflow instance is already running; concurrent runs are not allowed. Wait for the "
            "active run to finish or close its stream, or build another instance for another caller."
        ),
    ) -> None:
        super().__init__(message)


class ContinuationStoreAsyncError(CallRefusedError, RuntimeError):
    """A synchronous method was called on an instance that records continuations in a store.

    The store can only be updated asynchronously, so the synchronous method would leave it out of
    date. Nothing changed: call the ``..._async`` method named in the message instead.

    Args:
        message: Which async method to call.
    """

    def __init__(
        self,
        message: str = (
            "This workflow instance records continuations in a continuation store, so abandoning must update "
            "the store too: call `await workflow.abandon_continuation_async(token)` (or force=True) instead."
        ),
    ) -> None:
        super().__init__(message)


class PauseNotSavedError(FunctionalWorkflowError, RuntimeError):
    """A run paused but no checkpoint was saved for the pause, so no worker could restore it.

    The run returns no continuation token (the caller sees core's failure surface). Check the
    checkpoint storage given to ``build()``.

    Args:
        message: What happened and what to do next.
    """

    def __init__(
        self,
        message: str = (
            "The pause was not checkpointed, so it cannot be recorded in the continuation store. "
            "Check the checkpoint storage given to build()."
        ),
    ) -> None:
        super().__init__(message)


class NotInWorkflowRunError(FunctionalWorkflowError, RuntimeError):
    """``emit_update`` or ``stream_agent`` was called outside a running workflow, or after its run ended.

    Outside a run there is no caller to send to, and dropping the update silently would hide the
    mistake. Call it from a ``@workflow`` function, one of its ``@step`` functions, or a task they
    await, while the run is in progress.

    Args:
        message: What happened and what to do next.
    """

    def __init__(
        self,
        message: str = (
            "This was called outside a running workflow. Call it from a @workflow function, one of its @step "
            "functions, or a task they await, while the run is in progress."
        ),
    ) -> None:
        super().__init__(message)


class ContinuationStoreDurabilityError(DurableStoreError, RuntimeError):
    """Redis cannot keep a claim through a crash, or did not confirm that it kept one.

    Raised by :class:`RedisContinuationStore` (with the default ``durability="fsync"``) before its first
    write when the server's persistence could lose a write it acknowledged, and after a write in
    ``waitaof`` mode when Redis does not confirm in time that the write reached its disk. In the
    second case the operation counts as failed: a claim that raises it runs no resumed code.

    Args:
        message: What Redis lacks and how to configure it (or opt in to ``durability="best_effort"``).
    """

    def __init__(
        self,
        message: str = (
            "Redis cannot keep a claim through a crash. Run it with appendonly yes and appendfsync always, or pass "
            "durability='best_effort' to RedisContinuationStore to accept weaker durability."
        ),
    ) -> None:
        super().__init__(message)


class CheckpointRestoreConflictError(CallRefusedError, RuntimeError):
    """A checkpoint restore lost the race to a resume that presented the pause's continuation token.

    With a continuation store, restoring the checkpoint of a pause whose token is still ``issued``
    supersedes that token atomically (the token is then refused with the authority error). When a
    resume claimed the token first (after the restore started), the restore is refused instead, so
    the pause cannot run twice. Nothing ran and nothing changed.

    Args:
        message: What happened and what to do next.
    """

    def __init__(
        self,
        message: str = (
            "This checkpoint's pause was resumed with its continuation token while the restore started, so "
            "restoring it too could run the resumed code twice; nothing ran. Let that resume finish and continue "
            "from its result. Restore this checkpoint only once you know that resume failed or its worker died."
        ),
    ) -> None:
        super().__init__(message)
