"""The public surface is exactly what the package documents, and core's names are core's."""

from __future__ import annotations

import json

import agent_framework
import pytest
import typing_extensions
from agent_framework import BaseAgent, ContinuationToken, InMemoryCheckpointStorage

import agent_framework_functional as aff
from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    FunctionalWorkflowAgent,
    FunctionalWorkflowContinuationToken,
    FunctionalWorkflowDefinition,
    FunctionalWorkflowError,
    FunctionalWorkflowRunResult,
    PendingContinuationError,
    RunContext,
    WorkflowRunningError,
    workflow,
)

EXPECTED_ALL = [
    "CallRefusedError",
    "CheckpointRestoreConflictError",
    "CheckpointSealer",
    "ContinuationAuthorityError",
    "ContinuationRecord",
    "ContinuationStore",
    "ContinuationStoreAsyncError",
    "ContinuationStoreDurabilityError",
    "DurableStoreError",
    "FunctionalWorkflow",
    "FunctionalWorkflowAgent",
    "FunctionalWorkflowContinuationToken",
    "FunctionalWorkflowDefinition",
    "FunctionalWorkflowError",
    "FunctionalWorkflowRunResult",
    "InMemorySessionStore",
    "NotInWorkflowRunError",
    "PauseNotSavedError",
    "PendingContinuationError",
    "PostgresCheckpointStorage",
    "PostgresContinuationStore",
    "PostgresSessionStore",
    "RedisCheckpointStorage",
    "RedisContinuationStore",
    "RedisSessionStore",
    "ResponseMismatchError",
    "RunContext",
    "SESSION_STATE_KEY",
    "SQLiteCheckpointStorage",
    "SQLiteContinuationStore",
    "SQLiteSessionStore",
    "StaleContinuationError",
    "VerifiedContinuation",
    "WorkflowRunningError",
    "__version__",
    "continuation_token_hash",
    "emit_update",
    "get_run_context",
    "migrate_postgres",
    "response_schema",
    "responses_approval_messages",
    "responses_to_run_with_approvals",
    "step",
    "stream_agent",
    "workflow",
]


def test_all_is_exactly_the_documented_public_names() -> None:
    assert aff.__all__ == EXPECTED_ALL
    assert sorted(aff.__all__) == aff.__all__, "__all__ must stay sorted"
    for name in aff.__all__:
        assert hasattr(aff, name), name


def test_version_is_a_string() -> None:
    assert isinstance(aff.__version__, str)
    assert aff.__version__


@pytest.mark.parametrize("name", ["step", "RunContext", "get_run_context"])
def test_core_names_are_reexported_unchanged(name: str) -> None:
    assert getattr(aff, name) is getattr(agent_framework, name)


def test_error_hierarchy_matches_builtins_callers_catch() -> None:
    assert issubclass(ContinuationAuthorityError, ValueError)
    assert issubclass(PendingContinuationError, RuntimeError)
    assert issubclass(WorkflowRunningError, RuntimeError)
    public_errors = {
        value for value in map(vars(aff).get, aff.__all__) if isinstance(value, type) and issubclass(value, Exception)
    }

    def tree(base: type[Exception]) -> set[type[Exception]]:
        return {base}.union(*(tree(sub) for sub in base.__subclasses__()))

    # Every error the package exports is in the tree, and every error in the tree that its modules define
    # at the package's top level (the durable backends' own errors are private) is exported.
    assert public_errors <= tree(FunctionalWorkflowError)
    top_level = {e for e in tree(FunctionalWorkflowError) if e.__module__ == "agent_framework_functional._errors"}
    assert top_level == public_errors


def test_token_typeddict_extends_core_continuation_token() -> None:
    assert typing_extensions.is_typeddict(FunctionalWorkflowContinuationToken)
    assert ContinuationToken in FunctionalWorkflowContinuationToken.__orig_bases__  # type: ignore[attr-defined]
    assert {"kind", "version", "token"} <= set(FunctionalWorkflowContinuationToken.__annotations__)


async def test_bare_workflow_decorator_builds_definition() -> None:
    @workflow
    async def shout(text: str) -> str:
        return text.upper()

    assert isinstance(shout, FunctionalWorkflowDefinition)
    assert shout.name == "shout"
    assert shout.description is None
    instance = shout.build()
    assert isinstance(instance, FunctionalWorkflow)
    result = await instance.run("hi")
    assert isinstance(result, FunctionalWorkflowRunResult)
    assert result.get_outputs() == ["HI"]
    assert result.continuation_token is None


async def test_parameterised_workflow_decorator_sets_name_and_description() -> None:
    @workflow(name="loud", description="Shouts.")
    async def shout(text: str, ctx: RunContext) -> str:
        return text.upper()

    assert isinstance(shout, FunctionalWorkflowDefinition)
    assert shout.name == "loud"
    assert shout.description == "Shouts."
    instance = shout.build()
    assert instance.name == "loud"
    assert instance.description == "Shouts."
    assert (await instance.run("x")).get_outputs() == ["X"]


async def test_parameterised_decorator_with_empty_parentheses() -> None:
    @workflow()
    async def echo(text: str) -> str:
        return text

    assert isinstance(echo, FunctionalWorkflowDefinition)
    assert echo.name == "echo"
    assert (await echo.build().run("x")).get_outputs() == ["x"]


def test_workflow_with_two_message_parameters_is_rejected_like_core() -> None:
    async def two_inputs(a: str, b: str) -> str:
        return a + b

    with pytest.raises(ValueError):
        workflow(two_inputs)


def test_workflow_rejects_non_callable() -> None:
    with pytest.raises(TypeError):
        FunctionalWorkflowDefinition("not a function")  # type: ignore[arg-type]


def test_build_is_per_caller_and_keeps_default_storage() -> None:
    @workflow
    async def echo(text: str) -> str:
        return text

    storage = InMemoryCheckpointStorage()
    first = echo.build(checkpoint_storage=storage)
    second = echo.build()
    assert first is not second
    assert first.checkpoint_storage is storage
    assert second.checkpoint_storage is None
    assert first.definition is echo
    assert not first.has_pending_continuation
    assert first.pending_request_ids == frozenset()
    assert not first.is_running


def test_as_agent_builds_a_core_base_agent() -> None:
    @workflow(name="named", description="Has a description.")
    async def echo(text: str) -> str:
        return text

    instance = echo.build()
    agent = instance.as_agent(name="agent-name")
    assert isinstance(agent, FunctionalWorkflowAgent)
    assert isinstance(agent, BaseAgent)
    assert agent.workflow is instance
    assert agent.name == "agent-name"
    assert agent.description == "Has a description."
    assert instance.as_agent().name == "named"


async def test_result_token_is_json_safe_and_shaped_as_documented() -> None:
    @workflow
    async def ask(text: str, ctx: RunContext) -> str:
        return await ctx.request_info({"q": text}, response_type=str)

    result = await ask.build().run("x")
    token = result.continuation_token
    assert token is not None
    assert json.loads(json.dumps(token)) == token
    assert token["kind"] == "functional_workflow"
    assert token["version"] == "1"
    assert isinstance(token["token"], str)
    # >= 256 bits of url-safe base64 text: at least 43 characters.
    assert len(token["token"]) >= 43
