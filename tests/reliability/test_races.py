"""Races on one workflow instance.

Concurrent resumes with one token, abandonment racing a resume, and two fresh runs at once. All
run on one event loop: the instance is an asyncio object, and every acceptance check happens
synchronously in ``run(...)``, so interleavings at each ``await`` are the races that matter.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    PendingContinuationError,
    RunContext,
    WorkflowRunningError,
    workflow,
)

SIDE_EFFECTS: list[tuple[str, Any]] = []


@workflow
async def charge(order: str, ctx: RunContext) -> str:
    approved = await ctx.request_info({"order": order}, response_type=str)
    # Resumed user code: must run exactly once per token.
    SIDE_EFFECTS.append((order, approved))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    return f"{order}:{approved}"


@pytest.fixture(autouse=True)
def _clear_side_effects() -> None:
    SIDE_EFFECTS.clear()


async def _attempt_resume(wf: FunctionalWorkflow, token: Any, answer: str, *, stream: bool, delay: int) -> list[Any]:
    for _ in range(delay):
        await asyncio.sleep(0)
    if stream:
        events = [event async for event in wf.run(responses={"auto::0": answer}, continuation_token=token, stream=True)]
        return [event.data for event in events if event.type == "output"]
    result = await wf.run(responses={"auto::0": answer}, continuation_token=token)
    return result.get_outputs()


@pytest.mark.parametrize("n", [2, 10, 100])
@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_concurrent_resumes_with_one_token_run_the_resumed_code_once(n: int, stream: bool) -> None:
    wf = charge.build()
    paused = await wf.run("order-1")
    token = paused.continuation_token
    # Staggered start: some attempts arrive before the winner is accepted, others while it runs.
    results = await asyncio.gather(
        *(_attempt_resume(wf, token, f"answer-{i}", stream=stream, delay=i % 4) for i in range(n)),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(type(exc) is ContinuationAuthorityError for exc in losers), losers
    assert len(SIDE_EFFECTS) == 1
    order, answer = SIDE_EFFECTS[0]
    assert order == "order-1"
    assert winners[0] == [f"order-1:{answer}"]
    assert not wf.has_pending_continuation
    assert not wf.is_running
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": "again"}, continuation_token=token)
    # The instance is free for new input.
    assert (await wf.run("order-2")).continuation_token is not None


async def test_concurrent_resumes_of_many_instances_do_not_cross() -> None:
    instances = [charge.build() for _ in range(20)]
    paused = [await wf.run(f"order-{i}") for i, wf in enumerate(instances)]
    tokens = [p.continuation_token for p in paused]

    async def resume_with(i: int, j: int) -> list[Any]:
        await asyncio.sleep(0)
        return (await instances[i].run(responses={"auto::0": f"by-{j}"}, continuation_token=tokens[j])).get_outputs()

    # Every instance is offered every token; only its own may work.
    pairs = list(itertools.product(range(20), range(20)))
    results = await asyncio.gather(*(resume_with(i, j) for i, j in pairs), return_exceptions=True)
    for (i, j), result in zip(pairs, results, strict=True):
        if i == j:
            assert result == [f"order-{i}:by-{i}"]
        else:
            assert type(result) is ContinuationAuthorityError
    assert sorted(SIDE_EFFECTS) == sorted((f"order-{i}", f"by-{i}") for i in range(20))


@pytest.mark.parametrize("abandon_first", [True, False])
@pytest.mark.parametrize("force", [False, True])
async def test_abandon_racing_a_resume_leaves_one_consistent_winner(abandon_first: bool, force: bool) -> None:
    wf = charge.build()
    paused = await wf.run("order-1")
    token = paused.continuation_token

    async def abandon() -> str:
        if not abandon_first:
            await asyncio.sleep(0)
        if force:
            wf.abandon_continuation(force=True)
        else:
            wf.abandon_continuation(token)
        return "abandoned"

    async def resume() -> list[Any]:
        if abandon_first:
            await asyncio.sleep(0)
        return (await wf.run(responses={"auto::0": "yes"}, continuation_token=token)).get_outputs()

    abandoned, resumed = await asyncio.gather(abandon(), resume(), return_exceptions=True)
    if abandon_first:
        assert abandoned == "abandoned"
        assert type(resumed) is ContinuationAuthorityError
        assert SIDE_EFFECTS == []
    else:
        assert resumed == ["order-1:yes"]
        # A token-holding abandon sees a claimed (then spent) token; the owner's force sees a running run.
        assert type(abandoned) is (WorkflowRunningError if force else ContinuationAuthorityError)
        assert SIDE_EFFECTS == [("order-1", "yes")]
    assert not wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset()
    assert not wf.is_running
    # Whatever won, fresh input is accepted and pauses with a new token.
    again = await wf.run("order-2")
    assert again.continuation_token is not None
    assert again.continuation_token != token


async def test_many_abandons_and_resumes_interleaved() -> None:
    wf = charge.build()
    for round_ in range(25):
        paused = await wf.run(f"order-{round_}")
        token = paused.continuation_token

        async def resume(token: Any = token, round_: int = round_) -> str:
            await asyncio.sleep(0)
            await wf.run(responses={"auto::0": f"r{round_}"}, continuation_token=token)
            return "resumed"

        async def abandon(token: Any = token, delay: int = round_ % 3) -> str:
            for _ in range(delay):
                await asyncio.sleep(0)
            wf.abandon_continuation(token)
            return "abandoned"

        outcomes = await asyncio.gather(resume(), abandon(), resume(), abandon(), return_exceptions=True)
        successes = [o for o in outcomes if isinstance(o, str)]
        assert len(successes) == 1, outcomes
        refused = [o for o in outcomes if not isinstance(o, str)]
        assert all(isinstance(o, (ContinuationAuthorityError, WorkflowRunningError)) for o in refused), outcomes
        assert not wf.has_pending_continuation
        assert not wf.is_running
    resumed_rounds = [answer for _order, answer in SIDE_EFFECTS]
    assert len(resumed_rounds) == len(set(resumed_rounds))


async def test_two_concurrent_fresh_runs_second_is_rejected_and_nothing_mixes() -> None:
    wf = charge.build()
    first = wf.run("first", stream=True)
    first_events: list[Any] = []
    iterator = first.__aiter__()
    first_events.append(await iterator.__anext__())
    # The first run holds the instance: a second fresh run is refused at the call site.
    with pytest.raises(WorkflowRunningError, match="already running"):
        wf.run("second")
    with pytest.raises(WorkflowRunningError):
        wf.run("second", stream=True)
    first_events.extend([event async for event in iterator])
    result = await first.get_final_response()
    requests = result.get_request_info_events()
    assert [r.data for r in requests] == [{"order": "first"}]
    assert wf.pending_request_ids == {requests[0].request_id}
    # Now a fresh run conflicts with the pending continuation instead.
    with pytest.raises(PendingContinuationError):
        wf.run("second")
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=result.continuation_token)
    assert done.get_outputs() == ["first:ok"]
    assert SIDE_EFFECTS == [("first", "ok")]


async def test_two_fresh_runs_started_together_one_wins() -> None:
    wf = charge.build()

    async def start(message: str) -> Any:
        await asyncio.sleep(0)
        return await wf.run(message)

    results = await asyncio.gather(start("a"), start("b"), return_exceptions=True)
    paused = [r for r in results if not isinstance(r, BaseException)]
    rejected = [r for r in results if isinstance(r, BaseException)]
    assert len(paused) == 1
    assert len(rejected) == 1
    assert isinstance(rejected[0], (WorkflowRunningError, PendingContinuationError))
    winner = paused[0]
    (request,) = winner.get_request_info_events()
    message = request.data["order"]
    done = await wf.run(responses={request.request_id: "ok"}, continuation_token=winner.continuation_token)
    assert done.get_outputs() == [f"{message}:ok"]
