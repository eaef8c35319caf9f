"""Exception types raised by agent-framework-functional.

Every error subclasses both :class:`FunctionalWorkflowError` and the builtin that callers already
catch, so existing ``except ValueError`` / ``except RuntimeError`` handlers keep working::

    Exception
     └── FunctionalWorkflowError
          ├── ContinuationAuthorityError   (also ValueError)   bad, missing or spent continuation token
          ├── PendingContinuationError     (also RuntimeError) new input while a continuation is pending
          └── WorkflowRunningError         (also RuntimeError) the instance is already running

All of them pickle (hosts send them across processes) and none of their messages echo a secret,
a request id or user input.
"""

from __future__ import annotations

AUTHORITY_ERROR_MESSAGE = (
    "The continuation token was not accepted. Resume with the continuation_token returned by the "
    "run that paused, restore the pause from its checkpoint (checkpoint_id=...), or start a new run."
)


class FunctionalWorkflowError(Exception):
    """Base class of every error this package raises on purpose.

    Catch it to handle all continuation problems in one place; catch a subclass (or the builtin it
    also derives from) to handle one.
    """


class ContinuationAuthorityError(FunctionalWorkflowError, ValueError):
    """A response-only resume or an abandonment did not present valid continuation authority.

    Raised for every authority problem with one fixed message: no pending continuation, token
    missing, ``None``, not a mapping, missing fields, wrong ``kind`` or ``version``, wrong value,
    non-ASCII or unpaired-surrogate text, wrong types, a token of another workflow instance, or a
    token already spent. The message reveals nothing (DESIGN.md, "FunctionalWorkflow contract",
    rule 2), so callers cannot probe what is pending.

    Args:
        message: Ignored; accepted so that the exception pickles. The message is always
            :data:`AUTHORITY_ERROR_MESSAGE`.
    """

    def __init__(self, message: str | None = None) -> None:
        del message
        super().__init__(AUTHORITY_ERROR_MESSAGE)


class PendingContinuationError(FunctionalWorkflowError, RuntimeError):
    """New input or a checkpoint restore arrived while a continuation is pending.

    The pending continuation is left intact and still resumes with its token. Resolve it first:
    resume with ``responses=...`` and the token, or abandon it with
    ``abandon_continuation(token)`` (or ``force=True`` as the owner).

    Args:
        message: What happened and what to do next.
    """

    def __init__(
        self,
        message: str = (
            "This workflow instance has a pending continuation (a run paused on request_info). "
            "Resume it with responses=... and its continuation_token, or call "
            "abandon_continuation(token) before starting new input or restoring a checkpoint."
        ),
    ) -> None:
        super().__init__(message)


class WorkflowRunningError(FunctionalWorkflowError, RuntimeError):
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
