"""A released pause deletes its checkpoint in every checkpoint storage (files, Redis keys, Postgres rows).

Released means abandoned (with or without ``force``) or evicted past ``max_conversations``; the
pause's checkpoint then backs nothing, so it must not stay behind until the storage's own TTL.
A finished run's checkpoints stay for ``checkpoint_retention`` and then go, in every storage too.
"""

from __future__ import annotations

from collections.abc import Callable

from agent_framework import AgentSession, CheckpointStorage, RunContext
from retention_clock import RetentionClock

from agent_framework_functional import workflow
from agent_framework_functional._expiry import checkpoint_deletions


@workflow(name="release_probe")
async def release_probe(target: str, ctx: RunContext) -> str:
    return str(await ctx.request_info({"target": target}, response_type=bool))


async def _saved(storage: CheckpointStorage) -> int:
    return len(await storage.list_checkpoint_ids(workflow_name="release_probe"))


async def test_abandonment_deletes_the_pause_checkpoint(make_storage: Callable[[], CheckpointStorage]) -> None:
    storage = make_storage()
    agent = release_probe.build(checkpoint_storage=storage).as_agent()
    sessions: list[AgentSession] = []
    for i in range(4):
        sessions.append(agent.create_session())
        await agent.run(f"t{i}", session=sessions[-1])
    assert await _saved(storage) == 4
    await agent.abandon_continuation_async(session=sessions[0])
    await agent.abandon_continuation_async(force=True, session=sessions[1])
    agent.abandon_continuation(session=sessions[2])
    await checkpoint_deletions()
    assert await _saved(storage) == 1


async def test_eviction_deletes_the_pause_checkpoint(make_storage: Callable[[], CheckpointStorage]) -> None:
    storage = make_storage()
    agent = release_probe.build(checkpoint_storage=storage).as_agent(max_conversations=2)
    for i in range(5):
        await agent.run(f"t{i}", session=agent.create_session())
    await checkpoint_deletions()
    assert await _saved(storage) == 2


async def test_a_finished_chain_stays_for_its_retention_then_goes(
    make_storage: Callable[[], CheckpointStorage], retention_clock: RetentionClock
) -> None:
    storage = make_storage()
    wf = release_probe.build(checkpoint_storage=storage)
    paused = await wf.run("t")
    request_id = paused.get_request_info_events()[0].request_id
    await wf.run(responses={request_id: True}, continuation_token=paused.continuation_token)
    assert await _saved(storage) == 2  # the resumed pause's and core's final save
    await retention_clock.pass_retention()
    assert await _saved(storage) == 0
