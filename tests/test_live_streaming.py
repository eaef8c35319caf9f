"""Live streaming from workflow and step code (emit_update, stream_agent, the live channel)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
from collections.abc import AsyncIterable, Sequence
from pathlib import Path
from typing import Any

import agent_framework
import httpx
import pytest
import respx
from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    BaseAgent,
    Content,
    InMemoryCheckpointStorage,
    Message,
    ResponseStream,
    WorkflowEvent,
    WorkflowRunState,
)
from pydantic import BaseModel
from request_ids import core_ids

from agent_framework_functional import (
    RunContext,
    SQLiteContinuationStore,
    emit_update,
    get_run_context,
    step,
    stream_agent,
    workflow,
)
from agent_framework_functional._core_compat import collected_events
from agent_framework_functional._live import LIVE_BUFFER_SIZE, stream_live

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

CALLS: collections.Counter[str] = collections.Counter()
GATES: dict[str, asyncio.Event] = {}
SEEN: list[Any] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    GATES.clear()
    SEEN.clear()


def gate(name: str) -> asyncio.Event:
    return GATES.setdefault(name, asyncio.Event())


class ChunkAgent(BaseAgent):
    """A local agent that streams its answer in chunks (core's agent protocol, no HTTP)."""

    def __init__(self, chunks: Sequence[str], *, name: str = "writer", gate_after_first: str | None = None) -> None:
        super().__init__(name=name, description="streams fixed chunks")
        self.chunks = list(chunks)
        self.gate_after_first = gate_after_first
        self.runs = 0

    def run(  # type: ignore[override]
        self, messages: Any = None, *, stream: bool = False, session: Any = None, **kwargs: Any
    ) -> Any:
        self.runs += 1
        CALLS[f"agent:{self.name}"] += 1
        if stream:
            return ResponseStream(self._updates(), finalizer=AgentResponse.from_updates)
        return self._respond()

    async def _updates(self) -> AsyncIterable[AgentResponseUpdate]:
        for index, chunk in enumerate(self.chunks):
            yield AgentResponseUpdate(
                contents=[Content.from_text(text=chunk)],
                role="assistant",
                author_name=self.name,
                message_id="m1",
                response_id="inner",
            )
            if index == 0 and self.gate_after_first is not None:
                await gate(self.gate_after_first).wait()

    async def _respond(self) -> AgentResponse:
        return AgentResponse.from_updates([update async for update in self._updates()])


WRITER = ChunkAgent(["Hello", ", ", "world", "."])


# ---------------------------------------------------------------------------------------------- workflows


@workflow(name="gated_emit")
async def gated_emit(topic: str) -> str:
    await emit_update(f"started {topic}")
    await gate("go").wait()  # only the test, after seeing the update live, opens this
    return f"done {topic}"


@step
async def inner_step(text: str) -> str:
    await emit_update(f"in step: {text}")
    return text.upper()


@workflow(name="ordered")
async def ordered(topic: str, ctx: RunContext) -> str:
    await emit_update("a")
    upper = await inner_step(topic)
    await ctx.add_event(WorkflowEvent("warning", data="custom"))
    await emit_update({"after": upper})
    answer = await ctx.request_info({"q": upper}, response_type=str)
    await emit_update(f"answer {answer}")
    return f"{upper}:{answer}"


@step
async def write(topic: str) -> str:
    response = await stream_agent(WRITER, f"write about {topic}")
    return response.text


@workflow(name="streams_then_returns")
async def streams_then_returns(topic: str) -> str:
    return await write(topic)


@workflow(name="progress_then_answer")
async def progress_then_answer(topic: str) -> str:
    await emit_update("Thinking... ")
    return await write(topic)


@workflow(name="returns_the_response")
async def returns_the_response(topic: str) -> AgentResponse:
    return await stream_agent(WRITER, topic)


@workflow(name="streams_then_summarises")
async def streams_then_summarises(topic: str) -> str:
    text = await write(topic)
    return f"Summary: {len(text)} characters."


@workflow(name="write_then_review")
async def write_then_review(topic: str, ctx: RunContext) -> str:
    text = await write(topic)
    verdict = await ctx.request_info({"draft": text}, response_type=str)
    await emit_update(f"verdict: {verdict}")
    return f"{text} [{verdict}]"


@workflow(name="fails_after_updates")
async def fails_after_updates(topic: str) -> str:
    await emit_update("one")
    await emit_update("two")
    raise ValueError(f"broken {topic}")


@workflow(name="endless")
async def endless(topic: str) -> str:
    try:
        index = 0
        while True:
            await emit_update(f"{topic} {index}")
            index += 1
            await asyncio.sleep(0)
    except asyncio.CancelledError:
        CALLS["endless_cancelled"] += 1
        raise


@workflow(name="slow_to_cancel")
async def slow_to_cancel(topic: str) -> str:
    try:
        while True:
            await emit_update(topic)
            await asyncio.sleep(0.01)
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)  # clean-up that takes a while after the cancellation
        CALLS["slow_cancelled"] += 1
        raise


@workflow(name="burst")
async def burst(count: int) -> str:
    for index in range(count):
        await emit_update(index)
        CALLS["emitted"] += 1
    return "burst done"


@workflow(name="plain")
async def plain(topic: str) -> str:
    return f"plain {topic}"


# ---------------------------------------------------------------------------------------------- 1. live


async def test_update_reaches_the_workflow_stream_before_the_function_returns() -> None:
    wf = gated_emit.build()
    stream = wf.run("tea", stream=True)
    seen: list[WorkflowEvent[Any]] = []

    async def consume() -> None:
        async for event in stream:
            seen.append(event)
            if event.type == "intermediate":
                assert not any(e.type == "output" for e in seen)
                gate("go").set()  # the function is still waiting: the update came live

    await asyncio.wait_for(consume(), timeout=10)
    intermediate = [e for e in seen if e.type == "intermediate"]
    assert [e.data for e in intermediate] == ["started tea"]
    assert intermediate[0].executor_id == "gated_emit"
    assert [e.data for e in seen if e.type == "output"] == ["done tea"]


async def test_update_reaches_the_agent_stream_before_the_function_returns() -> None:
    agent = gated_emit.build().as_agent()
    stream = agent.run("tea", stream=True)
    texts: list[str] = []

    async def consume() -> None:
        async for update in stream:
            texts.append(update.text)
            if update.text == "started tea":
                gate("go").set()

    await asyncio.wait_for(consume(), timeout=10)
    assert texts == ["started tea", "done tea"]


async def test_accepted_payloads_and_their_agent_updates() -> None:
    inner = AgentResponseUpdate(
        contents=[Content.from_text(text="from inner")],
        role="assistant",
        author_name="inner",
        message_id="x1",
        continuation_token={"kind": "other", "token": "must not leak"},  # type: ignore[typeddict-item]
    )
    data: dict[str, Any] = {"n": 1, "items": [1.5, True, None, "s"], "pair": (1, 2)}

    @workflow(name="payloads")
    async def payloads(topic: str) -> None:
        await emit_update("text")
        await emit_update(Content.from_text(text="content"))
        await emit_update(inner)
        await emit_update(data)
        data["n"] = 2  # JSON data is copied when emitted
        await emit_update([1, 2])
        await emit_update(None)

    wf = payloads.build()
    events = [e async for e in wf.run("x", stream=True)]
    sent = [e.data for e in events if e.type == "intermediate"]
    assert sent[0] == "text"
    assert isinstance(sent[1], Content) and sent[1].text == "content"
    assert sent[2] is inner
    assert sent[3] == {"n": 1, "items": [1.5, True, None, "s"], "pair": [1, 2]}
    assert sent[4:] == [[1, 2], None]

    agent = wf.as_agent(name="payload_agent")
    updates = [u async for u in agent.run("x", stream=True)]
    assert [u.text for u in updates] == ["text", "content", "from inner", "", "", ""]
    assert updates[2].author_name == "inner" and updates[0].author_name == "payload_agent"
    assert all(u.continuation_token is None for u in updates)
    assert all(u.agent_id == agent.id for u in updates)
    assert len({u.response_id for u in updates}) == 1
    # Second run: it copied the dict as it was when emitted again (n is 2 by now).
    data_props = [(u.additional_properties or {}).get("data", "missing") for u in updates[3:]]
    assert data_props == [{**sent[3], "n": 2}, [1, 2], None]
    final = AgentResponse.from_updates(updates)
    assert final.continuation_token is None
    assert final.text == "textcontentfrom inner"


class _Model(BaseModel):
    x: int


@pytest.mark.parametrize(
    "bad",
    [
        object(),
        Message("assistant", [Content.from_text(text="m")]),
        AgentResponse(messages=[]),
        {1, 2},
        b"bytes",
        float("nan"),
        {"x": float("inf")},
        {1: "int key"},
        [object()],
        _Model(x=1),
    ],
    ids=["object", "message", "agent_response", "set", "bytes", "nan", "inf_in_dict", "int_key", "nested", "pydantic"],
)
async def test_other_payloads_raise_type_error_and_send_nothing(bad: Any) -> None:
    @workflow(name="bad_payload")
    async def bad_payload(topic: str) -> str:
        try:
            await emit_update(bad)
        except TypeError as exc:
            SEEN.append(str(exc))
        return "survived"

    events = [e async for e in bad_payload.build().run("x", stream=True)]
    assert not any(e.type == "intermediate" for e in events)
    assert [e.data for e in events if e.type == "output"] == ["survived"]
    assert len(SEEN) == 1 and "emit_update()" in SEEN[0]


async def test_too_deep_json_is_rejected() -> None:
    deep: Any = "leaf"
    for _ in range(100):
        deep = [deep]

    @workflow(name="deep")
    async def deep_wf(topic: str) -> None:
        with pytest.raises(TypeError, match="deeper"):
            await emit_update(deep)

    result = await deep_wf.build().run("x")
    assert result.get_final_state() == WorkflowRunState.IDLE


async def test_outside_a_workflow_emit_and_stream_agent_raise_runtime_error() -> None:
    with pytest.raises(RuntimeError, match="outside a running workflow"):
        await emit_update("nobody listens")
    agent = ChunkAgent(["x"])
    with pytest.raises(RuntimeError, match="outside a running workflow"):
        await stream_agent(agent, "hi")
    assert agent.runs == 0  # checked before the agent is called
    with pytest.raises(TypeError):
        await emit_update(object())  # the payload check comes first


async def test_under_cores_own_engine_updates_are_collected_like_add_event() -> None:
    core_wf = agent_framework.workflow(name="core_streams")(streams_then_returns.func).build()
    result = await core_wf.run("tea")
    assert result.get_outputs() == ["Hello, world."]
    assert [e.data.text for e in result if e.type == "intermediate"] == ["Hello", ", ", "world", "."]


async def test_emitting_after_the_run_ended_raises() -> None:
    release = asyncio.Event()
    late: list[asyncio.Task[None]] = []

    async def emit_later() -> None:
        await release.wait()
        await emit_update("too late")

    @workflow(name="leaky")
    async def leaky(topic: str) -> str:
        late.append(asyncio.ensure_future(emit_later()))
        return "ok"

    result = await leaky.build().run("x")
    assert result.get_outputs() == ["ok"]
    release.set()
    with pytest.raises(RuntimeError, match="has ended"):
        await late[0]


async def test_updates_after_cores_stream_ended_are_refused_while_the_store_cleans_up(tmp_path: Path) -> None:
    # With a continuation store a finished run (retention 0) still deletes its chain's checkpoints after core's
    # stream ended; an update emitted then was accepted and lost (before), then kept out of order.
    # Now it is refused, as in a streaming run.
    cleaning = asyncio.Event()
    outcome: list[str] = []

    class SlowDelete(InMemoryCheckpointStorage):
        async def delete(self, checkpoint_id: str) -> bool:
            cleaning.set()
            await asyncio.sleep(0.05)
            return await super().delete(checkpoint_id)

    async def emit_during_cleanup() -> None:
        await cleaning.wait()
        try:
            await emit_update("late")
        except RuntimeError as exc:
            outcome.append(str(exc))
        else:
            outcome.append("accepted")

    @step
    async def noted(topic: str) -> str:
        return topic

    @workflow(name="cleans_up", checkpoint_retention=0)  # its finish deletes the chain at once
    async def cleans_up(topic: str) -> str:
        late.append(asyncio.ensure_future(emit_during_cleanup()))
        await noted(topic)  # its checkpoint is what the finished run deletes
        return "ok"

    late: list[asyncio.Future[None]] = []
    async with SQLiteContinuationStore(tmp_path / "store.db") as store:
        wf = cleans_up.build(checkpoint_storage=SlowDelete(), continuation_store=store)
        result = await wf.run("x", include_status_events=True)
        await late[0]
    assert [e.type for e in result if e.type == "intermediate"] == []
    assert result.get_outputs() == ["ok"] and cleaning.is_set()
    assert len(outcome) == 1 and "has ended" in outcome[0]


def test_core_event_list_used_for_ordering_is_still_there() -> None:
    """The live path reads core's RunContext._events (its only core internal); fail loudly if it moves."""
    ctx = agent_framework.RunContext("probe")
    assert collected_events(ctx) == []
    assert get_run_context() is None


# ---------------------------------------------------------------------------------------------- 3. order


async def test_order_is_production_order_and_nothing_is_duplicated() -> None:
    wf = ordered.build()
    events = [e async for e in wf.run("tea", stream=True)]
    visible = [
        (e.type, e.data if e.type in ("intermediate", "warning") else e.executor_id)
        for e in events
        if e.type not in ("started", "status")
    ]
    assert visible == [
        ("intermediate", "a"),
        ("executor_invoked", "inner_step"),
        ("intermediate", "in step: tea"),
        ("executor_completed", "inner_step"),
        ("warning", "custom"),
        ("intermediate", {"after": "TEA"}),
        ("request_info", None),
    ]
    assert len({id(e) for e in events}) == len(events)
    assert events[-1].state == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS


async def test_order_holds_across_a_resume_and_outputs_come_last() -> None:
    wf = ordered.build()
    paused = await wf.run("tea")
    assert paused.get_outputs() == []
    done = await wf.run(responses={"auto::0": "yes"}, continuation_token=paused.continuation_token)
    kinds = [(e.type, e.data) for e in done if e.type in ("intermediate", "output")]
    # Replay hazard: code outside steps runs again, so its updates are sent again; the step's are not.
    assert kinds == [
        ("intermediate", "a"),
        ("intermediate", {"after": "TEA"}),
        ("intermediate", "answer yes"),
        ("output", "TEA:yes"),
    ]


async def test_concurrent_emitters_keep_their_own_order() -> None:
    @workflow(name="fan_out")
    async def fan_out(topic: str) -> str:
        async def worker(name: str) -> None:
            for index in range(LIVE_BUFFER_SIZE):
                await emit_update(f"{name}{index}")
                if index % 7 == 0:
                    await asyncio.sleep(0)

        await asyncio.gather(worker("a"), worker("b"), worker("c"))
        return "joined"

    events = [e async for e in fan_out.build().run("x", stream=True)]
    sent = [e.data for e in events if e.type == "intermediate"]
    assert len(sent) == 3 * LIVE_BUFFER_SIZE
    for name in "abc":
        assert [s for s in sent if s.startswith(name)] == [f"{name}{i}" for i in range(LIVE_BUFFER_SIZE)]
    assert events[-2].type == "output"


# ---------------------------------------------------------------------------------------------- 4. results


async def test_non_streaming_outputs_are_unchanged_by_updates() -> None:
    with_updates = await progress_then_answer.build().run("tea")
    without = await agent_framework.workflow(name="quiet")(_quiet_write).build().run("tea")
    assert with_updates.get_outputs() == without.get_outputs() == ["Hello, world."]
    assert next(e.data for e in with_updates if e.type == "intermediate") == "Thinking... "


async def _quiet_write(topic: str) -> str:
    return "Hello, world."


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        (streams_then_returns, "Hello, world."),
        (progress_then_answer, "Thinking... Hello, world."),
        (returns_the_response, "Hello, world."),
        (streams_then_summarises, "Hello, world.Summary: 13 characters."),
    ],
    ids=["returns_what_it_streamed", "progress_then_answer", "returns_the_response", "different_output"],
)
async def test_streaming_and_non_streaming_agent_text_agree_without_repeats(definition: Any, expected: str) -> None:
    agent = definition.build().as_agent()
    stream = agent.run("tea", stream=True)
    updates = [u async for u in stream]
    streamed = await stream.get_final_response()
    single = await agent.run("tea")
    assert streamed.text == single.text == AgentResponse.from_updates(updates).text == expected
    assert "".join(u.text for u in updates) == expected  # what a chat app shows, chunk by chunk


# ---------------------------------------------------------------------------------------------- 2. inner agent


async def test_stream_agent_forwards_each_update_live() -> None:
    agent = ChunkAgent(["first", " second"], gate_after_first="inner")

    @workflow(name="live_inner")
    async def live_inner(topic: str) -> str:
        response = await stream_agent(agent, topic)
        return response.text

    seen: list[str] = []

    async def consume() -> None:
        async for event in live_inner.build().run("x", stream=True):
            if event.type == "intermediate":
                seen.append(event.data.text)
                gate("inner").set()  # the inner agent waits after its first chunk until we saw it

    await asyncio.wait_for(consume(), timeout=10)
    assert seen == ["first", " second"]


async def test_stream_agent_in_a_step_is_not_called_again_on_resume() -> None:
    WRITER.runs = 0
    wf = write_then_review.build(checkpoint_storage=InMemoryCheckpointStorage())
    agent = wf.as_agent()
    stream = agent.run("tea", stream=True)
    first = [u async for u in stream]
    assert [u.text for u in first[:4]] == ["Hello", ", ", "world", "."]
    assert first[-1].continuation_token is not None
    assert WRITER.runs == 1
    token = first[-1].continuation_token

    resumed = agent.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    second = [u async for u in resumed]
    assert WRITER.runs == 1  # the cached AgentResponse came back; the agent was not called
    assert [u.text for u in second] == ["verdict: ok", "Hello, world. [ok]"]
    assert (await resumed.get_final_response()).continuation_token is None


async def test_stream_agent_returns_the_inner_final_response() -> None:
    agent = ChunkAgent(["a", "b"])

    @workflow(name="returns_response")
    async def returns_response(topic: str) -> str:
        response = await stream_agent(agent, topic)
        SEEN.append(response)
        return "ok"

    await returns_response.build().run("x")
    (response,) = SEEN
    assert isinstance(response, AgentResponse)
    assert response.text == "ab"
    assert response.response_id == "inner"


class ProtocolAgent:
    """The duck-typed shape from core's SupportsAgentRun docstring: async run returning a generator."""

    id = "protocol"
    name = "protocol"
    description = None

    async def run(self, messages: Any = None, *, stream: bool = False, session: Any = None, **kwargs: Any) -> Any:
        SEEN.append(("kwargs", kwargs))

        async def chunks() -> AsyncIterable[AgentResponseUpdate]:
            for text in ("x", "y"):
                yield AgentResponseUpdate(contents=[Content.from_text(text=text)], role="assistant")

        return chunks()


class NonStreamingAgent:
    id = "flat"
    name = "flat"
    description = None

    async def run(self, messages: Any = None, *, stream: bool = False, session: Any = None, **kwargs: Any) -> Any:
        return AgentResponse(messages=[Message("assistant", [Content.from_text(text="whole")])])


async def test_stream_agent_accepts_other_protocol_shapes_and_forwards_kwargs() -> None:
    @workflow(name="shapes")
    async def shapes(topic: str) -> str:
        first = await stream_agent(ProtocolAgent(), topic, client_kwargs={"temperature": 0})  # type: ignore[arg-type]
        second = await stream_agent(NonStreamingAgent(), topic)  # type: ignore[arg-type]
        return first.text + second.text

    result = await shapes.build().run("x")
    assert result.get_outputs() == ["xywhole"]
    assert [e.data.text for e in result if e.type == "intermediate"] == ["x", "y", "whole"]
    assert SEEN == [("kwargs", {"client_kwargs": {"temperature": 0}})]


async def test_stream_agent_rejects_an_agent_that_yields_non_updates() -> None:
    class Bad:
        id = name = "bad"
        description = None

        def run(self, messages: Any = None, *, stream: bool = False, session: Any = None) -> Any:
            async def items() -> AsyncIterable[str]:
                yield "not an update"

            return items()

    @workflow(name="bad_inner")
    async def bad_inner(topic: str) -> str:
        with pytest.raises(TypeError, match="AgentResponseUpdate"):
            await stream_agent(Bad(), topic)  # type: ignore[arg-type]
        return "checked"

    assert (await bad_inner.build().run("x")).get_outputs() == ["checked"]


async def test_a_workflow_agent_streams_live_through_another_workflow() -> None:
    inner_agent = gated_emit.build().as_agent(name="inner_wf")

    @workflow(name="outer")
    async def outer(topic: str) -> str:
        response = await stream_agent(inner_agent, topic)
        return f"outer saw: {response.text}"

    seen: list[str] = []

    async def consume() -> None:
        async for update in outer.build().as_agent().run("tea", stream=True):
            seen.append(update.text)
            if update.text == "started tea":
                gate("go").set()  # the inner workflow still waits: its update crossed both layers live

    await asyncio.wait_for(consume(), timeout=10)
    assert seen == ["started tea", "done tea", "outer saw: started teadone tea"]


# ---------------------------------------------------------------------------------------------- 5. authority


async def test_token_is_on_the_last_update_with_live_updates_on() -> None:
    wf = write_then_review.build()
    agent = wf.as_agent()
    stream = agent.run("tea", stream=True)
    updates = [u async for u in stream]
    token = updates[-1].continuation_token
    assert token is not None and token["kind"] == "functional_workflow"
    assert all(u.continuation_token is None for u in updates[:-1])
    assert AgentResponse.from_updates(updates).continuation_token == token
    assert (await stream.get_final_response()).continuation_token == token
    assert core_ids(agent.pending_requests) == {"auto::0"} == wf.pending_request_ids


async def test_token_is_spent_before_the_first_live_update_of_a_resume() -> None:
    wf = write_then_review.build()
    paused = await wf.run("tea")
    token = paused.continuation_token
    assert wf.has_pending_continuation
    stream = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    async for event in stream:
        if event.type == "intermediate":
            SEEN.append((wf.has_pending_continuation, wf.is_running))
    assert SEEN == [(False, True)]
    assert not wf.is_running and not wf.has_pending_continuation


# ---------------------------------------------------------------------------------------------- 6. abandon, errors


def _assert_no_task_noise(caplog: pytest.LogCaptureFixture) -> None:
    gc.collect()
    noisy = [
        r.getMessage()
        for r in caplog.records
        if "Task was destroyed" in r.getMessage()
        or "never retrieved" in r.getMessage()
        or "GeneratorExit" in r.getMessage()
        or r.levelno >= logging.ERROR
    ]
    assert not noisy


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.mark.parametrize("how", ["aclose", "break_and_drop"])
async def test_abandoned_workflow_stream_cancels_the_workflow(how: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wf = endless.build()
    stream = wf.run("tick", stream=True)
    received = 0
    async for event in stream:
        if event.type == "intermediate":
            received += 1
            if received == 3:
                break
    assert wf.is_running
    if how == "aclose":
        await stream.close()
    else:
        del stream
        gc.collect()
    await _settle()
    assert CALLS["endless_cancelled"] == 1
    assert not wf.is_running
    again = wf.run("again", stream=True)  # accepted: the instance was released
    async for event in again:
        if event.type == "intermediate":
            assert event.data == "again 0"
            break
    await again.close()
    await _settle()
    assert CALLS["endless_cancelled"] == 2
    _assert_no_task_noise(caplog)


async def test_stream_closed_before_user_code_never_starts_the_workflow(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wf = endless.build()
    stream = wf.run("tick", stream=True)
    async for event in stream:
        assert event.type == "started"  # core's first event, before any user code
        break
    await stream.close()
    await _settle()
    assert not wf.is_running
    assert CALLS["endless_cancelled"] == 0
    _assert_no_task_noise(caplog)


async def test_abandoned_agent_stream_cancels_the_workflow(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wf = endless.build()
    agent = wf.as_agent()
    stream = agent.run("tick", stream=True)
    async for update in stream:
        if update.text == "tick 2":
            break
    await stream.close()
    await _settle()
    assert CALLS["endless_cancelled"] == 1
    assert not wf.is_running
    plain_agent = plain.build().as_agent()
    assert (await plain_agent.run("x")).text == "plain x"
    _assert_no_task_noise(caplog)


class _QuietOnCancel:
    """A core stream: started, status, ``count`` events, then one that ends quietly when cancelled."""

    def __init__(self, count: int) -> None:
        self.pulled, self.count = 0, count

    def __aiter__(self) -> _QuietOnCancel:
        return self

    async def __anext__(self) -> WorkflowEvent[Any]:
        self.pulled += 1
        if self.pulled == 1:
            return WorkflowEvent("started")
        if self.pulled == 2:
            return WorkflowEvent("status", data="IN_PROGRESS")
        if self.pulled <= 2 + self.count:
            return WorkflowEvent("intermediate", data=self.pulled)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        raise StopAsyncIteration


async def test_leaving_a_full_channel_whose_core_stream_ends_quietly_on_cancel_does_not_hang() -> None:
    stream = stream_live(_QuietOnCancel(LIVE_BUFFER_SIZE + 1))  # type: ignore[arg-type]
    async for event in stream:
        if event.type == "intermediate":
            break  # the buffer is left exactly full
    await _settle()
    await asyncio.wait_for(asyncio.shield(asyncio.ensure_future(stream.aclose())), 5)


async def test_abandoned_stream_releases_the_instance_for_a_new_run(caplog: pytest.LogCaptureFixture) -> None:
    wf = burst.build()
    stream = wf.run(LIVE_BUFFER_SIZE * 4, stream=True)
    async for event in stream:
        if event.type == "intermediate":
            break
    await stream.close()
    assert not wf.is_running
    result = await wf.run(3)
    assert result.get_outputs() == ["burst done"]
    assert [e.data for e in result if e.type == "intermediate"] == [0, 1, 2]
    _assert_no_task_noise(caplog)


async def test_cancelled_consumer_cancels_the_workflow(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wf = gated_emit.build()  # waits on a gate nobody opens
    stream = wf.run("tea", stream=True)
    seen: list[str] = []

    async def consume() -> None:
        async for event in stream:
            seen.append(event.type)

    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(consume(), timeout=0.5)
    assert "intermediate" in seen
    await _settle()
    assert not wf.is_running
    assert (await plain.build().run("x")).get_outputs() == ["plain x"]
    _assert_no_task_noise(caplog)


async def test_a_consumer_cancelled_again_while_the_workflow_winds_down_still_ends_cancelled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # anyio's cancel scopes (Starlette, when an HTTP client hangs up) cancel again at every await, so
    # the stream's clean-up is cancelled while it waits for the workflow to wind down. The caller must
    # still see a cancellation (it saw "aclose(): asynchronous generator is already running"), and
    # the workflow must be wound down before the instance is free.
    caplog.set_level(logging.DEBUG)
    wf = slow_to_cancel.build()
    seen: list[str] = []

    async def consume() -> None:
        async for event in wf.run("tea", stream=True):
            seen.append(event.type)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    assert "intermediate" in seen
    task.cancel()
    await asyncio.sleep(0.01)  # the stream now waits for the workflow's clean-up
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert CALLS["slow_cancelled"] == 1  # wound down before the cancellation reached the caller
    assert not wf.is_running
    assert (await plain.build().run("x")).get_outputs() == ["plain x"]
    _assert_no_task_noise(caplog)


async def test_cancelled_non_streaming_run_cancels_the_workflow(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wf = endless.build()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(wf.run("tick"), timeout=0.5)
    await _settle()
    assert CALLS["endless_cancelled"] == 1
    assert not wf.is_running
    _assert_no_task_noise(caplog)


async def test_exception_reaches_the_caller_after_the_updates_before_it() -> None:
    wf = fails_after_updates.build()
    seen: list[str] = []
    with pytest.raises(ValueError, match="broken tea"):
        async for event in wf.run("tea", stream=True):
            seen.append(event.type if event.type != "intermediate" else event.data)
    assert seen[:3] == ["started", "status", "one"]
    assert seen[3] == "two"
    assert seen[4:] == ["failed", "status"]
    assert not wf.is_running

    texts: list[str] = []
    with pytest.raises(ValueError, match="broken tea"):
        async for update in wf.as_agent().run("tea", stream=True):
            texts.append(update.text)
    assert texts == ["one", "two"]


# ---------------------------------------------------------------------------------------------- 7. backpressure


async def test_a_slow_consumer_holds_the_workflow_at_the_buffer_bound() -> None:
    total = LIVE_BUFFER_SIZE * 5
    wf = burst.build()
    stream = wf.run(total, stream=True)
    iterator = stream.__aiter__()
    while (await iterator.__anext__()).type != "intermediate":
        pass
    await _settle()  # give the workflow every chance to run ahead
    # One entry taken, LIVE_BUFFER_SIZE queued, at most one more emission suspended at the bound.
    assert CALLS["emitted"] <= LIVE_BUFFER_SIZE + 2
    assert CALLS["emitted"] < total
    rest = [event async for event in iterator]
    assert CALLS["emitted"] == total
    assert [e.data for e in rest if e.type == "intermediate"] == list(range(1, total))  # lossless, in order
    assert [e.data for e in rest if e.type == "output"] == ["burst done"]


async def test_a_non_streaming_run_collects_every_update_in_order() -> None:
    total = LIVE_BUFFER_SIZE * 3  # more than the streaming bound: nobody reads before the end here
    result = await burst.build().run(total)
    assert [e.data for e in result if e.type == "intermediate"] == list(range(total))
    assert result.get_outputs() == ["burst done"]


async def test_non_streaming_and_streaming_runs_give_the_same_events() -> None:
    def shape(events: Sequence[WorkflowEvent[Any]]) -> list[tuple[str, Any]]:
        return [(e.type, e.data if e.type == "intermediate" else e.executor_id) for e in events if e.type != "status"]

    streamed = ordered.build().run("tea", stream=True)
    async for _ in streamed:
        pass
    single = await ordered.build().run("tea")
    assert shape(list(single)) == shape(list(await streamed.get_final_response()))
    assert ("intermediate", "in step: tea") in shape(list(single))


async def test_with_status_events_both_run_modes_give_the_same_order() -> None:
    # A non-streaming run merges its live updates into core's result after core's first status
    # (_live.collect_live); a streaming run yields them live. Status events included, they must agree.
    def shape(events: Sequence[WorkflowEvent[Any]]) -> list[tuple[str, Any]]:
        return [
            (e.type, e.data if e.type == "intermediate" else (e.state if e.type == "status" else e.executor_id))
            for e in events
        ]

    streamed = ordered.build().run("tea", stream=True, include_status_events=True)
    async for _ in streamed:
        pass
    single = await ordered.build().run("tea", include_status_events=True)
    expected = shape(list(await streamed.get_final_response()))
    assert shape(list(single)) == expected
    assert expected[0][0] == "status" and expected[1] == ("intermediate", "a")
    assert single.continuation_token is not None and [e.type for e in single.status_timeline()][-1] == "status"


@step
async def write_response(topic: str) -> AgentResponse:
    return await stream_agent(WRITER, f"write about {topic}")


@workflow(name="keeps_the_response")
async def keeps_the_response(topic: str, ctx: RunContext) -> str:
    response = await write_response(topic)
    SEEN.append(response)
    verdict = await ctx.request_info({"draft": response.text}, response_type=str)
    return f"{response.text} [{verdict}]"


@pytest.mark.parametrize("resume", ["token", "checkpoint"])
async def test_a_step_returning_the_agent_response_replays_it_from_the_cache(
    resume: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keeps_the_response, "checkpoint_retention", None)  # "checkpoint" restores an abandoned pause
    WRITER.runs = 0
    storage = InMemoryCheckpointStorage()
    wf = keeps_the_response.build(checkpoint_storage=storage)
    paused = await wf.run("tea")
    assert [e.data.text for e in paused if e.type == "intermediate"] == ["Hello", ", ", "world", "."]
    if resume == "token":
        done = await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
    else:
        wf.abandon_continuation(paused.continuation_token)
        checkpoint = (await storage.list_checkpoints(workflow_name="keeps_the_response"))[-1]
        done = await wf.run(checkpoint_id=checkpoint.checkpoint_id, responses={"auto::0": "ok"})
    assert WRITER.runs == 1
    assert not any(e.type == "intermediate" for e in done)  # the cached step sends nothing again
    assert done.get_outputs() == ["Hello, world. [ok]"]
    first, replayed = SEEN
    assert isinstance(replayed, AgentResponse) and replayed.text == first.text == "Hello, world."


# ---------------------------------------------------------------------------------------------- core Agent (respx)


async def test_stream_agent_forwards_a_core_openai_agent_live() -> None:
    """A real core ``Agent`` on ``OpenAIChatClient`` (Responses API faked with respx) streams through."""
    from agent_framework import Agent
    from openai_wire import RESPONSES_URL, chat_client, is_streaming_request, sse_response

    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(RESPONSES_URL).mock(
            side_effect=lambda request: (
                sse_response(["Green tea ", "is ", "calm."]) if is_streaming_request(request) else httpx.Response(500)
            )
        )
        model_agent = Agent(client=chat_client(), name="writer", instructions="Write one sentence.")

        @step(replay_key=lambda topic: f"draft:{topic}")  # it closes over the model agent
        async def draft(topic: str) -> str:
            return (await stream_agent(model_agent, f"Write about {topic}.")).text

        @workflow(name="model_post")
        async def model_post(topic: str, ctx: RunContext) -> str:
            text = await draft(topic)
            approved = await ctx.request_info({"draft": text}, response_type=bool)
            return text if approved else "(withheld)"

        agent = model_post.build().as_agent(name="poster")
        paused_updates = [u async for u in agent.run("tea", stream=True)]
        texts = [(u.text, [c.merge_mode for c in u.contents]) for u in paused_updates if u.text]
        # Chunk by chunk as the model wrote them, then core's client sends the full text as a replace snapshot.
        assert texts == [
            ("Green tea ", ["append"]),
            ("is ", ["append"]),
            ("calm.", ["append"]),
            ("Green tea is calm.", ["replace"]),
        ]
        assert AgentResponse.from_updates(paused_updates).text == "Green tea is calm."  # folded once
        token = paused_updates[-1].continuation_token
        assert token is not None
        done = await agent.run(responses={"auto::0": True}, continuation_token=token)
        assert done.text == "Green tea is calm."
        assert route.call_count == 1  # the resume replayed the step: no second model call

        # A run that streams the model and returns its text: the answer once, in both modes.
        @workflow(name="model_answer")
        async def model_answer(topic: str) -> str:
            return (await stream_agent(model_agent, topic)).text

        answer_agent = model_answer.build().as_agent()
        stream = answer_agent.run("tea", stream=True)
        assert (await stream.get_final_response()).text == "Green tea is calm."
        assert (await answer_agent.run("tea")).text == "Green tea is calm."


def _text_update(text: str, *, mode: str | None = None, update_mode: str | None = None, **fields: Any) -> Any:
    content = Content.from_text(text=text)
    content.merge_mode = mode  # type: ignore[assignment]
    return AgentResponseUpdate(contents=[content], role="assistant", merge_mode=update_mode, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "updates",
    [
        [_text_update("a"), _text_update("b")],
        [_text_update("Hel"), _text_update("lo"), _text_update("Hello", mode="replace")],
        [_text_update("x", author_name="p"), _text_update("y", author_name="q"), _text_update("y!", mode="replace")],
        [_text_update("draft"), _text_update("final", update_mode="replace")],
        [_text_update("one", message_id="m1"), _text_update("two", message_id="m2")],
    ],
    ids=["appends", "content_replace", "authors", "update_replace", "messages"],
)
def test_live_text_follows_cores_merge_rules(updates: list[AgentResponseUpdate]) -> None:
    from agent_framework_functional._updates import LiveText

    live = LiveText()
    for update in updates:
        live.add(update)
    folded = AgentResponse.from_updates(updates)
    contents = [content for message in folded.messages for content in message.contents]
    assert live.repeats(contents)  # the text core folds equals the text LiveText tracked
    assert not live.repeats([Content.from_text(text=folded.text + "?")])
