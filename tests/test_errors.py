"""The error hierarchy: builtin compatibility, fixed and helpful messages, pickling."""

from __future__ import annotations

import copy
import pickle

import pytest

from agent_framework_functional import (
    CheckpointRestoreConflictError,
    ContinuationAuthorityError,
    ContinuationStoreAsyncError,
    ContinuationStoreDurabilityError,
    FunctionalWorkflowError,
    NotInWorkflowRunError,
    PauseNotSavedError,
    PendingContinuationError,
    ResponseMismatchError,
    StaleContinuationError,
    WorkflowRunningError,
)

ERRORS = [ContinuationAuthorityError, PendingContinuationError, WorkflowRunningError]


@pytest.mark.parametrize("error_type", ERRORS)
def test_default_instances_pickle_round_trip(error_type: type[FunctionalWorkflowError]) -> None:
    error = error_type()
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        clone = pickle.loads(pickle.dumps(error, protocol=protocol))
        assert type(clone) is error_type
        assert str(clone) == str(error)
        assert clone.args == error.args


@pytest.mark.parametrize("error_type", [PendingContinuationError, WorkflowRunningError])
def test_custom_messages_pickle_round_trip(error_type: type[FunctionalWorkflowError]) -> None:
    error = error_type("custom: wait and retry")
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is error_type
    assert str(clone) == "custom: wait and retry"
    assert str(copy.copy(error)) == "custom: wait and retry"


def test_authority_error_message_is_fixed_whatever_is_passed() -> None:
    fixed = str(ContinuationAuthorityError())
    leaked = ContinuationAuthorityError("token=s3cret request=auto::0")
    assert str(leaked) == fixed
    assert "s3cret" not in repr(leaked)
    clone = pickle.loads(pickle.dumps(leaked))
    assert type(clone) is ContinuationAuthorityError
    assert str(clone) == fixed


def test_raised_errors_pickle_with_traceback_context() -> None:
    try:
        raise ContinuationAuthorityError()
    except ContinuationAuthorityError as exc:
        clone = pickle.loads(pickle.dumps(exc))
    assert type(clone) is ContinuationAuthorityError
    assert isinstance(clone, ValueError)


@pytest.mark.parametrize(
    ("error_type", "builtin"),
    [
        (ContinuationAuthorityError, ValueError),
        (PendingContinuationError, RuntimeError),
        (WorkflowRunningError, RuntimeError),
    ],
)
def test_errors_are_caught_by_the_builtin_and_the_base(
    error_type: type[FunctionalWorkflowError], builtin: type[Exception]
) -> None:
    with pytest.raises(builtin):
        raise error_type()
    with pytest.raises(FunctionalWorkflowError):
        raise error_type()
    assert issubclass(FunctionalWorkflowError, Exception)
    assert not issubclass(FunctionalWorkflowError, (ValueError, RuntimeError))


def test_messages_say_what_to_do_next() -> None:
    assert "abandon_continuation" in str(PendingContinuationError())
    assert "continuation_token" in str(PendingContinuationError())
    assert "already running" in str(WorkflowRunningError())
    authority = str(ContinuationAuthorityError())
    assert "checkpoint_id" in authority
    assert "new run" in authority


NEW_ERRORS = [
    (ResponseMismatchError, ValueError),
    (ContinuationStoreAsyncError, RuntimeError),
    (PauseNotSavedError, RuntimeError),
    (CheckpointRestoreConflictError, RuntimeError),
    (NotInWorkflowRunError, RuntimeError),
    (ContinuationStoreDurabilityError, RuntimeError),
    (StaleContinuationError, ValueError),
]


@pytest.mark.parametrize(("error_type", "builtin"), NEW_ERRORS)
def test_every_error_is_in_the_tree_pickles_and_says_what_to_do(
    error_type: type[FunctionalWorkflowError], builtin: type[Exception]
) -> None:
    assert issubclass(error_type, FunctionalWorkflowError) and issubclass(error_type, builtin)
    for error in (error_type(), error_type("custom: do this next")):
        clone = pickle.loads(pickle.dumps(error))
        assert type(clone) is error_type and str(clone) == str(error)
    assert str(error_type()).rstrip().endswith(".")


def test_errors_module_tree_lists_every_error() -> None:
    import agent_framework_functional._errors as errors_module

    classes = {
        name
        for name, value in vars(errors_module).items()
        if isinstance(value, type) and issubclass(value, FunctionalWorkflowError)
    }
    assert classes == {error.__name__ for error, _ in NEW_ERRORS} | {e.__name__ for e in ERRORS} | {
        "FunctionalWorkflowError"
    }
    tree = errors_module.__doc__ or ""
    for name in classes:
        assert name in tree, f"{name} is missing from the tree in _errors.py's docstring"


async def test_agent_conflict_message_lives_in_the_errors_module() -> None:
    from agent_framework_functional._errors import AGENT_PENDING_CONTINUATION_MESSAGE

    assert "function_approval_response" in AGENT_PENDING_CONTINUATION_MESSAGE
    assert "abandon_continuation" in AGENT_PENDING_CONTINUATION_MESSAGE


def test_stale_error_is_an_authority_error_with_its_own_fixed_message() -> None:
    stale = StaleContinuationError("token=s3cret")
    assert isinstance(stale, ContinuationAuthorityError) and isinstance(stale, ValueError)
    assert str(stale) == str(StaleContinuationError()) != str(ContinuationAuthorityError())
    assert "s3cret" not in repr(stale)
    assert "pending" not in str(stale)  # not the pending-continuation conflict
    assert "latest session" in str(stale) and "new input" in str(stale)
    clone = pickle.loads(pickle.dumps(stale))
    assert type(clone) is StaleContinuationError and str(clone) == str(stale)
