"""Abandoned streams must release their own run and never a newer one.

Pattern for each kind of stream (workflow or agent; broken out of after the request_info event, or
never iterated): drop the first stream, start a second run and keep it suspended mid-stream, force
garbage collection (so the first stream's cleanup runs), then a third run must still be refused
because the second holds the instance. Once the second finishes, runs are allowed again. Nothing
may leak: no warning (pytest runs with ``-W error``), no "Task was destroyed" / "never retrieved"
log, no unraisable exception.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agent_framework_functional import (
    FunctionalWorkflow,
    RunContext,
    WorkflowRunningError,
    workflow,
)

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

RESUMED: list[str] = []


@workflow
async def ask(topic: str, ctx: RunContext) -> str:
    answer = await ctx.request_info({"topic": topic}, response_type=str)
    RESUMED.append(topic)
    return f"{topic}:{answer}"


@pytest.fixture(autouse=True)
def _reset() -> None:
    RESUMED.clear()


async def settle() -> None:
    """Force collection and let the loop run scheduled async-generator finalisers."""
    for _ in range(3):
        gc.collect()
        await asyncio.sleep(0)


def start_stream(wf: FunctionalWorkflow, surface: str, message: str) -> Any:
    if surface == "workflow":
        return wf.run(message, stream=True)
    return wf.as_agent().run(message, stream=True)


def is_request(item: Any, surface: str) -> bool:
    if surface == "workflow":
        return item.type == "request_info"
    return any(content.type == "function_approval_request" for content in item.contents)


async def drop_first_stream(wf: FunctionalWorkflow, surface: str, how: str) -> None:
    """Start the first run and abandon its stream the way ``how`` says."""
    if how == "break":
        async for item in start_stream(wf, surface, "first"):
            if is_request(item, surface):
                break
        if surface == "agent":
            # The agent yields the approval request only once the pause is saved, so breaking there
            # keeps the pause; drop it so the next run is a fresh one.
            assert wf.has_pending_continuation
            wf.abandon_continuation(force=True)
    else:
        start_stream(wf, surface, "first")  # created, never iterated, dropped at once


async def suspended_second_run(wf: FunctionalWorkflow, surface: str) -> tuple[Any, AsyncIterator[Any], list[Any]]:
    """Start the second run and stop after its first item, leaving it suspended mid-stream.

    On the workflow stream: the agent's first update of this workflow comes only after the run ended
    (the approval request waits for its saved pause), so it cannot leave a run suspended.
    """
    del surface
    stream = start_stream(wf, "workflow", "second")
    iterator = stream.__aiter__()
    seen = [await iterator.__anext__()]
    return stream, iterator, seen


@pytest.mark.parametrize("surface", ["workflow", "agent"])
@pytest.mark.parametrize("how", ["break", "never_iterated"])
async def test_dropped_stream_cleanup_never_releases_a_newer_run(surface: str, how: str, clean_loop: Any) -> None:
    wf = ask.build()
    await drop_first_stream(wf, surface, how)
    # The dropped stream released the instance right away: a second run is accepted.
    assert not wf.is_running
    stream, iterator, seen = await suspended_second_run(wf, surface)
    assert wf.is_running
    await settle()  # the first stream's generator cleanup runs now
    with pytest.raises(WorkflowRunningError):
        wf.run("third")
    with pytest.raises(WorkflowRunningError):
        wf.as_agent().run("third", stream=True)
    assert wf.is_running
    seen.extend([item async for item in iterator])
    assert any(is_request(item, "workflow") for item in seen)  # the second run is a workflow stream
    final = await stream.get_final_response()
    token = final.continuation_token
    assert token is not None
    assert not wf.is_running
    assert wf.has_pending_continuation
    # The pending continuation is the second run's, and resumes with its token.
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["second:ok"]
    assert RESUMED == ["second"]
    # And fresh runs are allowed again.
    assert (await wf.run("fourth")).continuation_token is not None
    await settle()
    clean_loop.check()


@pytest.mark.parametrize("surface", ["workflow", "agent"])
async def test_dropped_resume_stream_that_never_started_keeps_the_token(surface: str, clean_loop: Any) -> None:
    wf = ask.build()
    token = (await wf.run("first")).continuation_token
    if surface == "workflow":
        wf.run(responses={"auto::0": "lost"}, continuation_token=token, stream=True)
    else:
        wf.as_agent().run(responses={"auto::0": "lost"}, continuation_token=token, stream=True)
    await settle()
    # Never iterated: no user code ran, so the continuation was handed back intact.
    assert not wf.is_running
    assert wf.has_pending_continuation
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["first:ok"]
    assert RESUMED == ["first"]
    clean_loop.check()


@pytest.mark.parametrize("surface", ["workflow", "agent"])
async def test_broken_resume_stream_spends_the_token_and_frees_the_instance(surface: str, clean_loop: Any) -> None:
    wf = ask.build()
    token = (await wf.run("first")).continuation_token
    stream = (
        wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
        if surface == "workflow"
        else wf.as_agent().run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    )
    async for _item in stream:
        break  # the resumed code has started: the token is spent
    del stream
    assert not wf.is_running
    assert not wf.has_pending_continuation
    await settle()
    with pytest.raises(ValueError):
        wf.run(responses={"auto::0": "again"}, continuation_token=token)
    assert (await wf.run("fresh")).continuation_token is not None
    clean_loop.check()


async def test_closed_streams_release_without_garbage_collection(clean_loop: Any) -> None:
    wf = ask.build()
    for make in _closers():
        stream = make(wf)
        async for _item in stream:
            break
        await stream.close()
        assert not wf.is_running
        if wf.has_pending_continuation:  # the agent's first update came after the saved pause: kept
            wf.abandon_continuation(force=True)
        paused = await wf.run("next")
        wf.abandon_continuation(paused.continuation_token)
    clean_loop.check()


def _closers() -> list[Callable[[FunctionalWorkflow], Any]]:
    return [
        lambda wf: wf.run("x", stream=True),
        lambda wf: wf.as_agent().run("x", stream=True),
    ]


async def test_many_abandoned_streams_in_a_row(clean_loop: Any) -> None:
    wf = ask.build()
    for i in range(50):
        surface = "workflow" if i % 2 else "agent"
        await drop_first_stream(wf, surface, "break" if i % 3 else "never_iterated")
        assert not wf.is_running
    await settle()
    paused = await wf.run("last")
    assert paused.continuation_token is not None
    assert (await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)).get_outputs() == [
        "last:ok"
    ]
    clean_loop.check()


@pytest.mark.parametrize("surface", ["workflow", "agent"])
@pytest.mark.parametrize("kind", ["fresh", "resume"])
async def test_closing_a_stream_before_iterating_releases_the_run(surface: str, kind: str, clean_loop: Any) -> None:
    wf = ask.build()
    token = (await wf.run("first")).continuation_token if kind == "resume" else None
    runner: Any = wf if surface == "workflow" else wf.as_agent()
    if kind == "resume":
        stream = runner.run(responses={"auto::0": "closed"}, continuation_token=token, stream=True)
    else:
        stream = runner.run("closed", stream=True)
    assert wf.is_running
    await stream.close()
    # Closed while the stream object is still alive: the instance is free at once, and a closed
    # resume never reached user code, so its continuation is handed back intact.
    assert not wf.is_running
    assert wf.has_pending_continuation is (kind == "resume")
    # The newer run is a workflow stream, so it can be left suspended mid-run (see suspended_second_run).
    second = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True) if token else None
    if second is None:
        second = wf.run("second", stream=True)
    iterator = second.__aiter__()
    await iterator.__anext__()
    # Iterating the closed stream afterwards runs nothing and leaves the newer run alone.
    assert [item async for item in stream] == []
    assert wf.is_running
    with pytest.raises(WorkflowRunningError):
        wf.run("third")
    _rest = [item async for item in iterator]
    final = await second.get_final_response()
    assert not wf.is_running
    if kind == "resume":
        assert RESUMED == ["first"]
        assert final.continuation_token is None
    else:
        assert RESUMED == []
        assert final.continuation_token is not None
    await settle()
    clean_loop.check()
