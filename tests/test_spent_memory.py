"""The process's memory of spent tokens (``_continuation.remember_spent`` / ``known_spent``) is bounded.

By time: a note lasts one pause TTL of the instance that spent the token (a host's session copy that
still carries the token expires with that TTL too), so a host that answers conversations for months
keeps a flat memory; by count: at most ``SPENT_MEMORY`` notes. While remembered, answers on an old
copy of the conversation get ``StaleContinuationError``.
"""

from __future__ import annotations

import gc
import json
import time
import tracemalloc

import pytest
from agent_framework import AgentResponse, AgentSession, Message, RunContext

from agent_framework_functional import ContinuationAuthorityError, StaleContinuationError, _continuation, workflow

TTL = 60.0


class Clock:
    """The wall clock the spent memory reads, moved forward by the test."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(_continuation, "time", fake)
    monkeypatch.setattr(_continuation, "_spent", {})
    return fake


@workflow(name="deployer")
async def deployer(target: str, ctx: RunContext) -> str:
    approved = await ctx.request_info({"target": target}, response_type=bool)
    return f"deployed {target}" if approved else f"skipped {target}"


def approve(response: AgentResponse) -> Message:
    return Message("user", [response.user_input_requests[0].to_function_approval_response(approved=True)])


def copied(session: AgentSession) -> AgentSession:
    return AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))


def token(secret: str) -> dict[str, str]:
    return {"kind": "functional_workflow", "version": "1", "token": secret}


async def test_a_spent_token_is_remembered_for_one_ttl_then_forgotten(clock: Clock) -> None:
    agent = deployer.build(continuation_ttl=TTL).as_agent()
    session = agent.create_session()
    paused = await agent.run("a", session=session)
    old = copied(session)
    assert (await agent.run(approve(paused), session=session)).text == "deployed a"
    assert _continuation.spent_notes() == 1
    with pytest.raises(StaleContinuationError):  # remembered: the old copy's answers get their own error
        agent.run(approve(paused), session=old)
    clock.offset += TTL * 1.1
    assert _continuation.spent_notes() == 0  # past one TTL the note is gone (nothing grows per conversation)
    assert not _continuation.known_spent(paused.continuation_token)
    with pytest.raises(ContinuationAuthorityError) as info:
        agent.run(approve(paused), session=old)
    assert type(info.value) is ContinuationAuthorityError  # still refused, with the plain authority error


async def test_many_answered_conversations_keep_only_one_ttl_of_notes(clock: Clock) -> None:
    agent = deployer.build(continuation_ttl=TTL).as_agent()
    for i in range(30):
        session = agent.create_session()
        paused = await agent.run(f"a{i}", session=session)
        await agent.run(approve(paused), session=session)
        clock.offset += TTL / 10  # ten conversations per TTL
    assert 9 <= _continuation.spent_notes() <= 10


def test_notes_of_each_duration_expire_on_their_own_and_the_count_is_bounded(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_lived, short_lived = "L" * 43, "S" * 43
    _continuation.remember_spent(long_lived, 1000.0)
    _continuation.remember_spent(short_lived, 10.0)  # behind a longer-lived note, still forgotten on time
    assert _continuation.known_spent(token(short_lived)) and _continuation.known_spent(token(long_lived))
    clock.offset += 11
    assert not _continuation.known_spent(token(short_lived)) and _continuation.known_spent(token(long_lived))
    assert _continuation.spent_notes() == 1
    monkeypatch.setattr(_continuation, "SPENT_MEMORY", 3)
    secrets = [f"{i:043d}" for i in range(5)]
    for secret in secrets:
        clock.offset += 1
        _continuation.remember_spent(secret, 100.0)
    assert _continuation.spent_notes() == 3  # the oldest notes went first: the long-lived one, then 0
    assert [_continuation.known_spent(token(s)) for s in secrets] == [False, False, True, True, True]
    assert not _continuation.known_spent(token(long_lived))


def test_past_the_count_expired_notes_behind_a_longer_lived_one_go_before_it(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_continuation, "SPENT_MEMORY", 3)
    long_lived, newer = "L" * 43, "N" * 43
    _continuation.remember_spent(long_lived, 1000.0)  # an agent with a long pause TTL
    _continuation.remember_spent("a" * 43, 1.0)  # two notes of an agent with a short one
    _continuation.remember_spent("b" * 43, 1.0)
    clock.offset += 2
    _continuation.remember_spent(newer, 1000.0)  # four notes, two of them expired: nothing remembered is dropped
    assert _continuation.known_spent(token(long_lived)) and _continuation.known_spent(token(newer))
    assert _continuation.spent_notes() == 2


def test_memory_returns_to_the_baseline_once_every_note_expired(clock: Clock) -> None:
    gc.collect()
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        for index in range(5000):
            _continuation.remember_spent(f"{index:043d}", TTL)
        clock.offset += TTL * 1.1
        assert _continuation.forget_spent() == 5000
        gc.collect()
        assert tracemalloc.get_traced_memory()[0] - baseline < 10_000  # not the peak table of 5,000 notes
    finally:
        tracemalloc.stop()
