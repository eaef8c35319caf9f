"""A released pause deletes its checkpoint in every checkpoint storage (files, Redis keys, Postgres rows).

Released means abandoned (with or without ``force``) or evicted past ``max_conversations``; the
pause's checkpoint then backs nothing, so it must not stay behind until the storage's own TTL.
"""

from __future__ import annotations

from collections.abc import Callable

from agent_framework import AgentSession, CheckpointStorage, RunContext

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
