"""A remote resume checks the answers to EARLIER rounds before its claim.

A pause's checkpoint holds only the pending request, so a worker that never saw round one used to
claim the token and then fail in core's replay on a wrongly typed answer to round one: token spent,
nothing ran, the corrected retry refused. The record now carries every request's response type.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from agent_framework import FileCheckpointStorage
from durable_workflows import EFFECTS, counts_then_note, two_rounds

from agent_framework_functional import (
    ContinuationRecord,
    ContinuationStore,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    ResponseMismatchError,
    continuation_token_hash,
)
from agent_framework_functional._response_types import describe_type, resolve_type


@pytest.fixture
def build(
    make_store: Callable[..., ContinuationStore], storage: FileCheckpointStorage
) -> Callable[[FunctionalWorkflowDefinition], FunctionalWorkflow]:
    def make(definition: FunctionalWorkflowDefinition) -> FunctionalWorkflow:
        return definition.build(checkpoint_storage=storage, continuation_store=make_store())

    return make


Build = Callable[[FunctionalWorkflowDefinition], FunctionalWorkflow]


async def _round_two_token(build: Build, definition: FunctionalWorkflowDefinition, first: Any) -> dict[str, Any]:
    paused = await build(definition).run("tea")
    assert paused.continuation_token is not None
    again = await build(definition).run(responses={"auto::0": first}, continuation_token=paused.continuation_token)
    assert again.continuation_token is not None
    return dict(again.continuation_token)


async def _status(store: ContinuationStore | None, token: dict[str, Any]) -> str | None:
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    return record.status if record is not None else None


@pytest.mark.parametrize("stream", [False, True])
async def test_wrong_earlier_answer_on_a_third_worker_spends_nothing(
    build: Callable[[FunctionalWorkflowDefinition], FunctionalWorkflow], stream: bool
) -> None:
    token = await _round_two_token(build, two_rounds, "one")
    worker = build(two_rounds)
    effects = list(EFFECTS)
    wrong = {"auto::0": 5, "auto::1": "two"}
    with pytest.raises(ResponseMismatchError, match="'auto::0' is not a str"):
        if stream:
            async for _ in worker.run(responses=wrong, continuation_token=token, stream=True):
                pass
        else:
            await worker.run(responses=wrong, continuation_token=token)
    assert await _status(worker.continuation_store, token) == "issued"
    assert list(EFFECTS) == effects  # nothing ran
    done = await worker.run(responses={"auto::0": "one", "auto::1": "two"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea [one] [two]"]


async def test_generic_earlier_answer_is_checked_remotely(
    make_store: Callable[..., ContinuationStore], checkpoint_dir: Path
) -> None:
    def build(definition: FunctionalWorkflowDefinition) -> FunctionalWorkflow:
        # list[int] in a pending request pickles as types.GenericAlias: core's allow-list must name it.
        storage = FileCheckpointStorage(checkpoint_dir, allowed_checkpoint_types=["types:GenericAlias"])
        return definition.build(checkpoint_storage=storage, continuation_store=make_store())

    token = await _round_two_token(build, counts_then_note, [1, 2])
    store = build(counts_then_note).continuation_store
    assert store is not None
    record = await store.get(continuation_token_hash(token))
    assert record is not None and record.response_types == {
        "auto::0": "builtins:list[builtins:int]",
        "auto::1": "builtins:str",
    }
    worker = build(counts_then_note)
    with pytest.raises(ResponseMismatchError, match="'auto::0'"):
        await worker.run(responses={"auto::0": ["a", "b"], "auto::1": "ok"}, continuation_token=token)
    assert await _status(store, token) == "issued"
    done = await worker.run(responses={"auto::0": [1, 2], "auto::1": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["shipped: draft about tea 3 ok"]


async def test_a_verdict_carries_the_earlier_requests(
    build: Callable[[FunctionalWorkflowDefinition], FunctionalWorkflow],
) -> None:
    token = await _round_two_token(build, two_rounds, "one")
    worker = build(two_rounds)
    verdict = await worker.verify_continuation_token_async(token)
    assert set(verdict) == {"auto::1"}
    assert verdict.earlier_requests["auto::0"].response_type is str
    with pytest.raises(ResponseMismatchError):
        await worker.run(responses={"auto::0": 5, "auto::1": "two"}, continuation_token=verdict)
    assert await _status(worker.continuation_store, token) == "issued"


@pytest.mark.parametrize(
    "response_type",
    [
        str,
        int,
        bool,
        list[int],
        dict[str, Any],
        int | None,
        list[dict[str, list[int]]],
        Any,
        ContinuationRecord,
        Literal["ship", "hold, or [not]"],
        Literal[1, True, None] | None,
        list[Literal["a"]],
    ],
)
def test_response_types_read_back_equal(response_type: Any) -> None:
    text = describe_type(response_type)
    assert text is not None and resolve_type(text) == response_type


def test_types_that_cannot_be_written_are_not_recorded() -> None:
    class Local:
        pass

    assert describe_type(Local) is None
    assert describe_type(Literal[object()]) is None  # only JSON scalars are written
    assert resolve_type("not_an_imported_module_xyz:Thing") is None  # never imports
    assert resolve_type("builtins:list[builtins:int") is None
