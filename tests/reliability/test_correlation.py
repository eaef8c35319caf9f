"""Response correlation.

A valid token with answers that match no pending request is refused without spending the token or
dropping the pending request. Parallel branches (``asyncio.gather``) that call ``request_info``
without an explicit id get distinct, replay-stable ids, and one call answering all of them
completes every branch. Core's engine surfaces one gathered request per pause (the first
interruption cancels its siblings), so the ids are learned pause by pause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from request_ids import core_ids

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    RunContext,
    workflow,
)

BRANCHES = 4
RUNS: list[int] = []


@workflow
async def ask(topic: str, ctx: RunContext) -> str:
    answer = await ctx.request_info({"topic": topic}, response_type=str)
    return f"{topic}:{answer}"


@workflow
async def fan_out(count: int, ctx: RunContext) -> list[str]:
    async def branch(index: int) -> str:
        await asyncio.sleep(0)
        answer = await ctx.request_info({"branch": index}, response_type=str)
        return f"branch-{index}={answer}"

    RUNS.append(count)
    return list(await asyncio.gather(*(branch(i) for i in range(count))))


@pytest.mark.parametrize(
    "responses",
    [{"auto::9": "x"}, {"nope": "x"}, {"": "x"}, {"AUTO::0": "x"}, {"auto::0 ": "x"}],
    ids=["other-auto", "unknown", "empty", "case", "padded"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_unmatched_response_is_refused_without_spending_the_token(
    responses: dict[str, Any], stream: bool
) -> None:
    wf = ask.build()
    agent = wf.as_agent()
    paused = await wf.run("tea")
    token = paused.continuation_token
    with pytest.raises(ValueError, match="None of the responses answers a pending request") as info:
        wf.run(responses=responses, continuation_token=token, stream=stream)
    assert not isinstance(info.value, ContinuationAuthorityError)
    assert "continuation is still pending" in str(info.value)
    assert token is not None
    assert token["token"] not in str(info.value)
    # Nothing moved: same pending request, same view in the agent, not running, token still good.
    assert wf.pending_request_ids == {"auto::0"}
    assert core_ids(agent.pending_requests) == {"auto::0"}
    assert wf.has_pending_continuation
    assert not wf.is_running
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["tea:ok"]


async def test_unmatched_response_through_the_agent_keeps_its_view() -> None:
    agent = ask.build().as_agent()
    paused = await agent.run("tea")
    with pytest.raises(ValueError, match="None of the responses"):
        agent.run(responses={"wrong": "x"}, continuation_token=paused.continuation_token)
    assert core_ids(agent.pending_requests) == {"auto::0"}
    done = await agent.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
    assert done.text == "tea:ok"


async def test_extra_answers_beside_a_matching_one_are_accepted() -> None:
    wf = ask.build()
    paused = await wf.run("tea")
    done = await wf.run(
        responses={"auto::0": "ok", "unrelated": "ignored"}, continuation_token=paused.continuation_token
    )
    assert done.get_outputs() == ["tea:ok"]


async def _collect_ids_pause_by_pause(wf: FunctionalWorkflow) -> tuple[list[str], dict[str, Any]]:
    """Answer gathered requests one pause at a time; return the ids in order and each id's payload."""
    result = await wf.run(BRANCHES)
    ids: list[str] = []
    payloads: dict[str, Any] = {}
    answers: dict[str, str] = {}
    while result.continuation_token is not None:
        requests = result.get_request_info_events()
        assert requests
        for request in requests:
            assert request.request_id not in ids  # distinct
            ids.append(request.request_id)
            payloads[request.request_id] = request.data
            answers[request.request_id] = f"a{request.data['branch']}"
        result = await wf.run(responses=dict(answers), continuation_token=result.continuation_token)
    assert result.get_outputs() == [[f"branch-{i}=a{i}" for i in range(BRANCHES)]]
    return ids, payloads


async def test_parallel_branches_get_distinct_replay_stable_ids() -> None:
    first_ids, first_payloads = await _collect_ids_pause_by_pause(fan_out.build())
    second_ids, second_payloads = await _collect_ids_pause_by_pause(fan_out.build())
    assert len(first_ids) == len(set(first_ids)) == BRANCHES
    # Stable across replay and across instances: the same branch always gets the same id.
    assert first_ids == second_ids
    assert first_payloads == second_payloads
    assert {payload["branch"] for payload in first_payloads.values()} == set(range(BRANCHES))


async def test_one_call_answering_every_branch_completes_them_all() -> None:
    ids, payloads = await _collect_ids_pause_by_pause(fan_out.build())
    RUNS.clear()
    wf = fan_out.build()
    paused = await wf.run(BRANCHES)
    assert paused.continuation_token is not None
    answers = {request_id: f"a{payloads[request_id]['branch']}" for request_id in ids}
    done = await wf.run(responses=answers, continuation_token=paused.continuation_token)
    assert done.continuation_token is None
    assert done.get_outputs() == [[f"branch-{i}=a{i}" for i in range(BRANCHES)]]
    assert RUNS == [BRANCHES, BRANCHES]  # the pause and one replay, nothing more
    assert not wf.has_pending_continuation


async def test_branch_answers_do_not_cross_between_instances() -> None:
    instances = [fan_out.build() for _ in range(5)]
    paused = [await wf.run(BRANCHES) for wf in instances]
    answers = [{f"auto::{i}": f"i{n}-b{i}" for i in range(BRANCHES)} for n in range(len(instances))]
    results = await asyncio.gather(
        *(
            wf.run(responses=answers[n], continuation_token=paused[n].continuation_token)
            for n, wf in enumerate(instances)
        )
    )
    for n, result in enumerate(results):
        outputs = result.get_outputs()[0]
        assert all(f"=i{n}-" in item for item in outputs), outputs


class Boom(Exception):
    pass


class UncopyableResponses(Mapping[str, Any]):
    """Passes the key checks (its keys name the pending request) but cannot be read."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __getitem__(self, key: str) -> Any:
        raise Boom(f"getitem {key}")

    def __iter__(self) -> Iterator[str]:
        return iter(["auto::0"])

    def __len__(self) -> int:
        return 1

    def keys(self) -> Any:
        if self.where == "keys":
            raise Boom("keys")
        return super().keys()


@pytest.mark.parametrize("where", ["getitem", "keys"])
@pytest.mark.parametrize("surface", ["workflow", "workflow-stream", "agent", "agent-stream"])
async def test_responses_that_cannot_be_read_leave_the_pause_intact(where: str, surface: str) -> None:
    wf = ask.build()
    agent = wf.as_agent()
    paused = await wf.run("tea")
    token = paused.continuation_token
    runner = agent if surface.startswith("agent") else wf
    with pytest.raises(Boom):
        runner.run(responses=UncopyableResponses(where), continuation_token=token, stream=surface.endswith("stream"))
    # The failed call changed nothing: not running, still pending, and the real token resumes.
    assert not wf.is_running
    assert wf.has_pending_continuation
    assert wf.pending_request_ids == {"auto::0"}
    assert core_ids(agent.pending_requests) == {"auto::0"}
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["tea:ok"]
