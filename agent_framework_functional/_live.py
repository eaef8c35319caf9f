"""Live updates: ``emit_update`` and ``stream_agent``, and the channel that carries them to the caller in order.

Core yields a functional workflow's events only after the function returns, so a channel (the ``live_channel``
``ContextVar``) carries them: bounded in a pump task when streaming (a full one makes ``emit_update`` wait),
unbounded around each pull otherwise. A live update sends core's events collected since the last one first
(``_core_compat.collected_events``); core's later yield of them is skipped. Under core's own
``FunctionalWorkflow`` updates fall back to ``ctx.add_event``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable
from contextvars import ContextVar
from typing import Any, Literal, cast

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    Content,
    Message,
    ResponseStream,
    RunContext,
    SupportsAgentRun,
    WorkflowEvent,
    get_run_context,
)

from ._core_compat import collected_events
from ._errors import NotInWorkflowRunError

LIVE_BUFFER_SIZE = 64
"""Entries the live channel holds before ``emit_update`` waits for the consumer."""

_LIVE: Literal[0] = 0
_CORE: Literal[1] = 1
_END: Literal[2] = 2

_Item = list[Any]


class _LiveChannel:
    """A FIFO from one run's workflow tasks to its one consumer (``queue``); producers enter in arrival order."""

    __slots__ = ("closed", "core_seen", "ctx", "entry", "left", "queue", "source")

    def __init__(self, maxsize: int, source: str | None) -> None:
        self.closed = False
        self.left = False  # the consumer left: nobody reads the end
        self.ctx: RunContext | None = None
        self.core_seen = 0
        self.source = source
        self.queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize)
        self.entry = asyncio.Lock()  # one producer waits for a slot, the others (fairly) for it

    def _check_open(self) -> None:
        if self.closed:
            raise NotInWorkflowRunError(
                "This workflow run has ended, so its live stream is closed. Emit updates only while the run "
                "is in progress (from the workflow function, its steps, or tasks they await)."
            )

    def _take_collected(self, ctx: RunContext | None) -> tuple[WorkflowEvent[Any], ...]:
        if ctx is None:
            return ()
        if self.ctx is None:
            self.ctx = ctx
        elif ctx is not self.ctx:
            return ()  # a nested core run's context: its events are not this stream's
        events = collected_events(ctx)
        if events is None or len(events) <= self.core_seen:
            return ()
        taken = tuple(events[self.core_seen :])
        self.core_seen = len(events)
        return taken

    async def put_live(self, event: WorkflowEvent[Any], ctx: RunContext | None) -> None:
        async with self.entry:
            self._check_open()
            item: _Item = [_LIVE, (), event]
            await self.queue.put(item)
            self._check_open()
            item[1] = self._take_collected(ctx)  # nothing ran since the put: the snapshot goes in with it

    async def put_core(self, event: WorkflowEvent[Any]) -> None:
        async with self.entry:
            await self.queue.put([_CORE, event])

    def close(self) -> None:
        """Refuse new entries; the producer waiting for a slot gets one, then raises ``NotInWorkflowRunError``."""
        self.closed = True
        while not self.queue.empty():
            self.queue.get_nowait()


live_channel: ContextVar[_LiveChannel | None] = ContextVar("agent_framework_functional_live_channel", default=None)


def _merge_live(item: _Item, forwarded: set[WorkflowEvent[Any]], out: list[WorkflowEvent[Any]]) -> None:
    """Append a live entry's events to ``out``: core's collected ones (remembered as ``forwarded``), then its own."""
    forwarded.update(item[1])
    out.extend(item[1])
    out.append(item[2])


def _is_new(event: WorkflowEvent[Any], forwarded: set[WorkflowEvent[Any]]) -> bool:
    """True when core's ``event`` was not already sent ahead of a live update."""
    if event in forwarded:
        forwarded.discard(event)
        return False
    return True


async def collect_live(
    core_stream: ResponseStream[WorkflowEvent[Any], Any], *, source: str | None = None
) -> AsyncGenerator[WorkflowEvent[Any], None]:
    """Yield core's events merged, in order, with the live updates the workflow emits (non-streaming runs)."""
    channel = _LiveChannel(sys.maxsize, source)
    forwarded: set[WorkflowEvent[Any]] = set()
    out: list[WorkflowEvent[Any]] = []
    try:
        while True:
            bound = live_channel.set(channel)
            try:
                event = await _next_core_event(core_stream)
            finally:
                live_channel.reset(bound)
            while not channel.queue.empty():
                _merge_live(channel.queue.get_nowait(), forwarded, out)
            if event is not None and _is_new(event, forwarded):
                out.append(event)
            for merged in out:
                yield merged
            if event is None:
                return
            out.clear()
    finally:
        channel.closed = True  # core's stream ended: later updates are refused, as in a streaming run


async def _pump(core_stream: ResponseStream[WorkflowEvent[Any], Any], channel: _LiveChannel) -> None:
    """Pull core's stream (running the workflow function) in a task bound to the live channel."""
    live_channel.set(channel)  # this task's own context copy: the caller's context is untouched
    try:
        while (event := await _next_core_event(core_stream)) is not None:
            await channel.put_core(event)
    except BaseException as exc:
        if not channel.left:
            await channel.queue.put([_END, exc])
        if not isinstance(exc, Exception):
            raise
        return
    if not channel.left:  # a cancel core swallowed must not leave the pump waiting for a slot nobody frees
        await channel.queue.put([_END, None])


async def stream_live(
    core_stream: ResponseStream[WorkflowEvent[Any], Any], *, source: str | None = None
) -> AsyncGenerator[WorkflowEvent[Any], None]:
    """Yield core's events merged, in order, with the live updates the workflow emits (streaming runs).

    ``started`` and the first ``status`` are pulled directly; the pump (user code, where the token is spent)
    starts at the next request. Closing this cancels the pump and the workflow task, then waits.
    """
    while (event := await _next_core_event(core_stream)) is not None:
        yield event
        if event.type == "status":
            break
    else:
        return  # core's stream ended before user code
    forwarded: set[WorkflowEvent[Any]] = set()
    channel = _LiveChannel(LIVE_BUFFER_SIZE, source)
    pump = asyncio.get_running_loop().create_task(_pump(core_stream, channel))
    out: list[WorkflowEvent[Any]] = []
    try:
        while _released(await channel.queue.get(), forwarded, out):
            for merged in out:
                yield merged
            out.clear()
    finally:
        if await _stop_pump(pump, channel):
            raise asyncio.CancelledError


async def _next_core_event(core_stream: ResponseStream[WorkflowEvent[Any], Any]) -> WorkflowEvent[Any] | None:
    try:
        return await core_stream.__anext__()
    except StopAsyncIteration:
        return None


def _released(item: _Item, forwarded: set[WorkflowEvent[Any]], out: list[WorkflowEvent[Any]]) -> bool:
    """Put the events one channel item releases into ``out``, in order; False at the run's end (its error raised)."""
    kind = item[0]
    if kind == _LIVE:
        _merge_live(item, forwarded, out)
        return True
    if kind == _CORE:
        if _is_new(item[1], forwarded):
            out.append(item[1])
        return True
    error: BaseException | None = item[1]
    if error is not None:
        raise error
    return False


async def _stop_pump(pump: asyncio.Task[None], channel: _LiveChannel) -> bool:
    """Wind the pump down and close the channel; True when this wait was cancelled again (re-raise it)."""
    cancelled_again = False
    channel.left = True
    if not pump.done():
        pump.cancel()  # first: the workflow task sees a cancellation, not a closed channel
        # Wait even if cancelled again (anyio cancels at every await): leaving while the pump is inside
        # core's stream makes closing it fail with "asynchronous generator is already running".
        while not pump.done():
            try:
                await asyncio.wait({pump})
            except asyncio.CancelledError:
                cancelled_again = True
    channel.close()
    if not pump.cancelled():
        pump.exception()  # retrieved: a failure already reached the caller through the channel
    return cancelled_again


_MAX_JSON_DEPTH = 64


def _json_copy(value: Any, depth: int = 0) -> Any:
    """Return a copy of a JSON-safe value, or raise TypeError naming what is not JSON-safe."""
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeError("emit_update() got a non-finite float (nan or infinity), which JSON cannot carry.")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth >= _MAX_JSON_DEPTH:
        raise TypeError(f"emit_update() data nests deeper than {_MAX_JSON_DEPTH} levels; flatten it.")
    if isinstance(value, (list, tuple)):
        return [_json_copy(item, depth + 1) for item in cast("list[Any]", value)]
    if not isinstance(value, dict):
        raise TypeError(
            f"emit_update() cannot send a {type(value).__name__}. Send text (str), a Content, an "
            "AgentResponseUpdate, or JSON-safe data (dict with str keys, list, str, int, float, bool, None); "
            "convert other objects first, e.g. model.model_dump(mode='json')."
        )
    items = cast("dict[Any, Any]", value).items()
    for key, _ in items:
        if not isinstance(key, str):
            raise TypeError(f"emit_update() data has a {type(key).__name__} dict key; JSON keys must be str.")
    return {key: _json_copy(item, depth + 1) for key, item in items}


async def emit_update(update: str | Content | AgentResponseUpdate | Any) -> None:
    """Send an update to the caller now, from workflow or step code (or a task they start).

    An ``intermediate`` event, in order; a slow consumer makes this wait, nothing is dropped. JSON data is
    copied; ``Content`` and ``AgentResponseUpdate`` are sent as they are (do not change them afterwards).
    See "Live streaming" in the docs.

    Replay hazard: on resume, updates emitted outside a ``@step`` are sent again.

    Args:
        update: Text, a ``Content``, an ``AgentResponseUpdate``, or JSON-safe data.

    Raises:
        TypeError: Anything else (a ``Message``, a pydantic model, a NaN float, ...); nothing is sent.
        NotInWorkflowRunError: Called outside a running workflow, or after its run ended.

    Examples:
        .. code-block:: python

            await emit_update({"stage": "research", "topic": topic})
    """
    if isinstance(update, (Message, AgentResponse)):
        raise TypeError(
            f"emit_update() cannot send a whole {type(update).__name__}: stream its parts instead (its text, "
            "its contents, or the AgentResponseUpdates of a streaming run; stream_agent() does that)."
        )
    payload = update if isinstance(update, (str, Content, AgentResponseUpdate)) else _json_copy(update)
    channel = live_channel.get()
    ctx = get_run_context()
    if channel is not None:
        await channel.put_live(WorkflowEvent("intermediate", data=payload, executor_id=channel.source), ctx)
    elif ctx is not None:
        await ctx.add_event(WorkflowEvent("intermediate", data=payload))
    else:
        raise NotInWorkflowRunError(
            "emit_update() was called outside a running workflow. Call it from a @workflow function, "
            "one of its @step functions, or a task they await, while the run is in progress."
        )


async def stream_agent(
    agent: SupportsAgentRun,
    messages: Any | None = None,
    *,
    session: Any | None = None,
    **kwargs: Any,
) -> AgentResponse:
    """Run an agent streaming, forward each update through :func:`emit_update`, return its response.

    Replay hazard: call it inside a ``@step``, so a resume returns the cached response instead of
    running the agent again. Text already streamed is not repeated in the workflow agent's answer.

    Args:
        agent: The inner agent.
        messages: Input for the agent, as its ``run`` accepts.

    Keyword Args:
        session: The inner agent's session.
        **kwargs: Forwarded unchanged to ``agent.run``.

    Returns:
        The inner agent's final ``AgentResponse``.

    Raises:
        NotInWorkflowRunError: Called outside a running workflow (before the agent is called).
        TypeError: The agent's stream is not a stream of ``AgentResponseUpdate``.
        Exception: Whatever the inner agent raises, after the updates it produced.
    """
    if live_channel.get() is None and get_run_context() is None:
        raise NotInWorkflowRunError(
            "stream_agent() was called outside a running workflow. Call it from a @workflow function or one of "
            "its @step functions while the run is in progress."
        )
    result: Any = agent.run(messages, stream=True, session=session, **kwargs)
    if not isinstance(result, (ResponseStream, AsyncIterable, AgentResponse)) and isinstance(result, Awaitable):
        result = await cast("Awaitable[Any]", result)
    if isinstance(result, AgentResponse):
        whole = cast("AgentResponse[Any]", result)
        for message in whole.messages:  # a response returned whole: one update per message
            await emit_update(
                AgentResponseUpdate(
                    contents=list(message.contents),
                    role=message.role,
                    author_name=message.author_name,
                    message_id=message.message_id,
                    response_id=whole.response_id,
                )
            )
        return whole
    if not isinstance(result, AsyncIterable):
        raise TypeError(
            f"{type(agent).__name__}.run(stream=True) returned {type(result).__name__}; stream_agent() needs a "
            "ResponseStream or an async iterable of AgentResponseUpdate."
        )
    updates = await _forward(type(agent).__name__, cast("AsyncIterable[Any]", result))
    if isinstance(result, ResponseStream):
        return await cast("ResponseStream[AgentResponseUpdate, AgentResponse]", result).get_final_response()
    return AgentResponse.from_updates(updates)


async def _forward(agent_name: str, stream: AsyncIterable[Any]) -> list[AgentResponseUpdate]:
    """Forward each update of an inner agent's stream as it arrives; close the stream if anything fails."""
    updates: list[AgentResponseUpdate] = []
    try:
        async for update in aiter(stream):
            if not isinstance(update, AgentResponseUpdate):
                raise TypeError(
                    f"{agent_name}.run(stream=True) yielded {type(update).__name__}; "
                    "stream_agent() forwards AgentResponseUpdate only."
                )
            updates.append(update)
            await emit_update(update)
    except BaseException:
        close = getattr(stream, "close" if isinstance(stream, ResponseStream) else "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):  # a failing close must not replace the failure
                await close()
        raise
    return updates
