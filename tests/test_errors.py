"""The error hierarchy: builtin compatibility, fixed and helpful messages, pickling."""

from __future__ import annotations

import copy
import pickle

import psycopg
import pytest

import agent_framework_functional._durable.postgres_errors  # noqa: F401  # its error joins the tree (needs psycopg)
from agent_framework_functional import (
    CallRefusedError,
    CheckpointRestoreConflictError,
    ContinuationAuthorityError,
    ContinuationStoreAsyncError,
    ContinuationStoreDurabilityError,
    DurableStoreError,
    FunctionalWorkflowError,
    PendingContinuationError,
    ResponseMismatchError,
    StaleContinuationError,
    WorkflowRunningError,
)


def _tree(base: type[FunctionalWorkflowError]) -> list[type[FunctionalWorkflowError]]:
    found: list[type[FunctionalWorkflowError]] = []
    for sub in base.__subclasses__():
        if sub.__module__.startswith("agent_framework_functional."):
            found += [sub, *_tree(sub)]
    return found


BASES = {CallRefusedError, DurableStoreError}  # groups to catch; the errors raised are below them
TREE = sorted(set(_tree(FunctionalWorkflowError)), key=lambda error: error.__name__)
ERRORS = [error for error in TREE if error not in BASES]
BUILTINS = (ValueError, RuntimeError, psycopg.OperationalError)


def _builtin_of(error_type: type[FunctionalWorkflowError]) -> type[Exception]:
    """The builtin (or driver) exception class the error also derives from, which existing handlers catch."""
    (builtin,) = {base for base in BUILTINS if issubclass(error_type, base)}
    return builtin


def test_the_tree_holds_every_error_and_the_two_bases() -> None:
    assert set(TREE) >= BASES
    assert {ContinuationAuthorityError, StaleContinuationError, ContinuationStoreDurabilityError} <= set(ERRORS)
    assert len(ERRORS) >= 10


@pytest.mark.parametrize("error_type", ERRORS)
def test_default_instances_pickle_round_trip(error_type: type[FunctionalWorkflowError]) -> None:
    error = error_type()
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        clone = pickle.loads(pickle.dumps(error, protocol=protocol))
        assert type(clone) is error_type
        assert str(clone) == str(error)
        assert clone.args == error.args


@pytest.mark.parametrize("error_type", [e for e in ERRORS if not issubclass(e, ContinuationAuthorityError)])
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


@pytest.mark.parametrize("error_type", ERRORS)
def test_errors_are_caught_by_the_builtin_and_the_base(error_type: type[FunctionalWorkflowError]) -> None:
    with pytest.raises(_builtin_of(error_type)):
        raise error_type()
    with pytest.raises(FunctionalWorkflowError):
        raise error_type()
    assert issubclass(FunctionalWorkflowError, Exception)
    for base in (FunctionalWorkflowError, *BASES):
        assert not issubclass(base, BUILTINS), base  # a base adds no builtin: its members keep their own


def test_messages_say_what_to_do_next() -> None:
    assert "abandon_continuation" in str(PendingContinuationError())
    assert "continuation_token" in str(PendingContinuationError())
    assert "already running" in str(WorkflowRunningError())
    authority = str(ContinuationAuthorityError())
    assert "checkpoint_id" in authority
    assert "new run" in authority


@pytest.mark.parametrize("error_type", ERRORS)
def test_every_error_pickles_and_says_what_to_do(error_type: type[FunctionalWorkflowError]) -> None:
    for error in (error_type(), error_type("custom: do this next.")):
        clone = pickle.loads(pickle.dumps(error))
        assert type(clone) is error_type and str(clone) == str(error)
    assert str(error_type()).rstrip().endswith(".")


def _documented_parents() -> dict[str, str]:
    """Each name in ``_errors.py``'s docstring tree, mapped to the name it hangs under."""
    import agent_framework_functional._errors as errors_module

    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = [(-1, "FunctionalWorkflowError")]
    for line in (errors_module.__doc__ or "").splitlines():
        marker = max(line.find("├── "), line.find("└── "))
        if marker < 0 or "FunctionalWorkflowError" in line:
            continue
        name = line[marker + 4 :].split()[0]
        while stack[-1][0] >= marker:
            stack.pop()
        parents[name] = stack[-1][1]
        stack.append((marker, name))
    return parents


def test_errors_module_tree_is_the_class_tree() -> None:
    documented = _documented_parents()
    actual = {
        error.__name__: next(base.__name__ for base in error.__bases__ if issubclass(base, FunctionalWorkflowError))
        for error in TREE
    }
    assert documented == actual, "the tree in _errors.py's docstring must match the classes"


def test_refusals_and_store_failures_are_grouped() -> None:
    for refusal in (ContinuationAuthorityError, ResponseMismatchError, PendingContinuationError, WorkflowRunningError):
        assert issubclass(refusal, CallRefusedError)
    for refusal in (ContinuationStoreAsyncError, CheckpointRestoreConflictError):
        assert issubclass(refusal, CallRefusedError)
    assert issubclass(ContinuationStoreDurabilityError, DurableStoreError)
    assert not set(_tree(CallRefusedError)) & set(_tree(DurableStoreError))


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


@pytest.mark.parametrize("base", [FunctionalWorkflowError, CallRefusedError, DurableStoreError])
def test_the_base_errors_take_exceptions_arguments(base: type[FunctionalWorkflowError]) -> None:
    """A store of one's own may raise a base with several arguments, as any ``Exception``."""
    assert base("what failed", "may have happened").args == ("what failed", "may have happened")


def test_a_backend_error_may_mix_in_a_library_error_with_keywords() -> None:
    class LibraryError(Exception):
        def __init__(self, *args: object, code: int | None = None) -> None:
            super().__init__(*args)
            self.code = code

    class BackendDown(DurableStoreError, LibraryError):
        pass

    error = BackendDown("down", code=7)
    assert (error.code, error.args) == (7, ("down",))
