"""Concurrent resumes with one token: exactly one runs the resumed code."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agent_framework import AgentResponse

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    FunctionalWorkflowAgent,
    FunctionalWorkflowDefinition,
    WorkflowRunningError,
)


def _split(outcomes: list[Any]) -> tuple[list[Any], list[BaseException]]:
    results = [o for o in outcomes if not isinstance(o, BaseException)]
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    return results, errors


async def _gather_resumes(make_call: Callable[[], Any], count: int, *, stream: bool) -> list[Any]:
    async def attempt() -> Any:
        # The call itself may raise synchronously; doing it inside the coroutine captures that too.
        call = make_call()
        if stream:
            return await call.get_final_response()
        return await call

    return await asyncio.gather(*(attempt() for _ in range(count)), return_exceptions=True)


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_two_concurrent_resumes_with_the_same_token(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str], stream: bool
) -> None:
    wf, token = paused
    outcomes = await _gather_resumes(
        lambda: wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=stream), 2, stream=stream
    )
    results, errors = _split(outcomes)
    assert calls["resumed"] == 1
    assert calls["publish"] == 1
    assert len(results) == 1
    assert results[0].get_outputs() == ["published: draft about tea (ok)"]
    assert len(errors) == 1
    # The first call claims the continuation synchronously, so the second finds no unclaimed
    # continuation and gets the authority error (not "already running").
    assert type(errors[0]) is ContinuationAuthorityError
    assert isinstance(errors[0], (ContinuationAuthorityError, WorkflowRunningError))
    assert not wf.is_running
    assert not wf.has_pending_continuation


async def test_many_concurrent_resumes_only_one_wins(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], calls: collections.Counter[str]
) -> None:
    wf, token = paused
    outcomes = await _gather_resumes(
        lambda: wf.run(responses={"auto::0": "ok"}, continuation_token=token), 8, stream=False
    )
    results, errors = _split(outcomes)
    assert len(results) == 1
    assert calls["resumed"] == 1
    assert len(errors) == 7
    assert {type(e) for e in errors} == {ContinuationAuthorityError}


async def test_concurrent_resume_while_first_is_inside_user_code(
    paused: tuple[FunctionalWorkflow, dict[str, Any]],
    hooks: dict[str, Any],
    gate: Any,
    calls: collections.Counter[str],
) -> None:
    wf, token = paused
    hooks["after_feedback"] = gate
    first = asyncio.create_task(wf.run(responses={"auto::0": "ok"}, continuation_token=token))
    await gate.entered.wait()
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "other"}, continuation_token=token)
    gate.release.set()
    done = await first
    assert done.get_outputs() == ["published: draft about tea (ok)"]
    assert gate.entries == 1
    assert calls["resumed"] == 1


async def test_concurrent_agent_resumes_with_the_same_token(
    review_definition: FunctionalWorkflowDefinition, calls: collections.Counter[str]
) -> None:
    agent: FunctionalWorkflowAgent = review_definition.build().as_agent()
    token = (await agent.run("tea")).continuation_token

    def call() -> Awaitable[AgentResponse]:
        return agent.run(responses={"auto::0": "ok"}, continuation_token=token)

    outcomes = await _gather_resumes(call, 2, stream=False)
    results, errors = _split(outcomes)
    assert calls["resumed"] == 1
    assert [r.text for r in results] == ["published: draft about tea (ok)"]
    assert [type(e) for e in errors] == [ContinuationAuthorityError]
    assert dict(agent.pending_requests) == {}


async def test_concurrent_fresh_runs_one_is_rejected_as_running(
    review_definition: FunctionalWorkflowDefinition, calls: collections.Counter[str]
) -> None:
    wf = review_definition.build()

    async def attempt(topic: str) -> Any:
        return await wf.run(topic)

    outcomes = await asyncio.gather(attempt("tea"), attempt("coffee"), return_exceptions=True)
    results, errors = _split(outcomes)
    assert len(results) == 1
    assert [type(e) for e in errors] == [WorkflowRunningError]
    assert calls["draft"] == 1
    assert wf.has_pending_continuation


async def test_separate_instances_resume_concurrently(
    review_definition: FunctionalWorkflowDefinition, calls: collections.Counter[str]
) -> None:
    instances = [review_definition.build() for _ in range(4)]
    tokens = [(await wf.run("tea")).continuation_token for wf in instances]
    done = await asyncio.gather(
        *(
            wf.run(responses={"auto::0": f"ok{i}"}, continuation_token=t)
            for i, (wf, t) in enumerate(zip(instances, tokens, strict=True))
        )
    )
    assert [d.get_outputs() for d in done] == [[f"published: draft about tea (ok{i})"] for i in range(4)]
    assert calls["resumed"] == 4
