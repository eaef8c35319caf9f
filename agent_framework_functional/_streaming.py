"""Live streaming: workflow and step code send updates to the caller while the workflow runs.

Core's functional engine collects every event while the workflow function runs and yields them only
after it returns (core says so in ``FunctionalWorkflow._run_core``). This module adds a side channel
instead of reimplementing the engine: :meth:`FunctionalWorkflow.run` drives core's stream through
:func:`stream_live`, which runs core's ``__anext__`` (and so the workflow function) in a pump task
bound to a per-run :class:`_LiveChannel` through a ``ContextVar``. Core creates the workflow task
with ``asyncio.create_task`` from that pump task, so the task (and every task it spawns) inherits
the channel. :func:`emit_update` puts an ``intermediate`` :class:`WorkflowEvent` on the channel and
the stream yields it at once.

Ordering: one FIFO carries live updates and the events core yields, so the caller sees them in the
order they entered it. When a live update enters, the events core has collected since the last one
(its ``add_event``: ``executor_invoked``/``executor_completed`` of steps, ``request_info``, outputs
added by hand) go in first, and the stream later skips them when core yields them again, so nothing
is delivered twice. That one read of core's event list is this package's only touch of a core
internal for streaming (``_core_compat.collected_events``); a test pins it.

Backpressure (streaming runs): the channel is bounded (:data:`LIVE_BUFFER_SIZE` entries). When it
is full, ``await emit_update(...)`` waits until the consumer takes an entry, so a slow consumer slows
the workflow down instead of making it buffer without bound. Nothing is dropped. A non-streaming
``run()`` has no reader until the function returns, so there the updates are collected with the
run's other events (as core collects its own) and no pump task is started. Note that core's
``ResponseStream`` keeps every update it yielded for ``get_final_response()``; that history is
core's, outside this bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Sequence
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

LIVE_BUFFER_SIZE = 64
"""Entries the live channel holds before ``emit_update`` waits for the consumer."""

LIVE_DATA_PROPERTY = "data"
"""Key of ``AgentResponseUpdate.additional_properties`` that carries an emitted JSON value."""

_MAX_JSON_DEPTH = 64
_UNBOUNDED = sys.maxsize

_LIVE: Literal[0] = 0
_CORE: Literal[1] = 1
_END: Literal[2] = 2

_Item = tuple[Any, ...]


class _LiveChannel:
    """Bounded FIFO from one run's workflow code (any number of tasks) to its stream (one consumer).

    A producer that finds the channel full waits in line; a freed slot is reserved for the first
    waiting producer, so producers enter in the order they arrived and the bound holds exactly.
    Terminal entries (end of stream, failure) never wait.
    """

    __slots__ = ("_closed", "_getter", "_items", "_maxsize", "_putters", "_reserved", "core_seen", "ctx", "source")

    def __init__(self, maxsize: int, source: str | None) -> None:
        self._items: deque[_Item] = deque()
        self._maxsize = maxsize
        self._reserved = 0
        self._putters: deque[asyncio.Future[None]] = deque()
        self._getter: asyncio.Future[None] | None = None
        self._closed = False
        self.ctx: RunContext | None = None
        self.core_seen = 0
        self.source = source

    async def _wait_for_slot(self) -> None:
        if len(self._items) + self._reserved < self._maxsize and not self._putters:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._putters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._reserved -= 1  # a slot was handed to us: pass it on
                self._wake_putter()
            elif waiter in self._putters:
                self._putters.remove(waiter)
            raise
        self._reserved -= 1

    def _wake_putter(self) -> None:
        while self._putters and len(self._items) + self._reserved < self._maxsize:
            waiter = self._putters.popleft()
            if not waiter.done():
                self._reserved += 1
                waiter.set_result(None)

    def _append(self, item: _Item) -> None:
        self._items.append(item)
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                "This workflow run has ended, so its live stream is closed. Emit updates only while the run "
                "is in progress (from the workflow function, its steps, or tasks they await)."
            )

    async def put_live(self, event: WorkflowEvent[Any], ctx: RunContext | None) -> None:
        """Enqueue a live event, preceded by the events core collected since the last entry."""
        self._check_open()
        await self._wait_for_slot()
        self._check_open()
        # Synchronous from here: the snapshot of core's events and the append are one step.
        self._append((_LIVE, self._take_collected(ctx), event))

    async def put_core(self, event: WorkflowEvent[Any]) -> None:
        """Enqueue an event yielded by core's stream."""
        await self._wait_for_slot()
        self._append((_CORE, event))

    def finish(self, error: BaseException | None) -> None:
        """Enqueue the end of the stream (never waits)."""
        self._append((_END, error))

    def has_items(self) -> bool:
        """True when an entry is waiting."""
        return bool(self._items)

    def pop(self) -> _Item:
        """Take the next entry without waiting (collecting mode: nobody waits for room)."""
        return self._items.popleft()

    async def get(self) -> _Item:
        """Take the next entry, waiting for one."""
        while not self._items:
            getter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getter = getter
            try:
                await getter
            finally:
                self._getter = None
        item = self._items.popleft()
        if self._putters:
            self._wake_putter()
        return item

    def close(self) -> None:
        """Refuse new entries and release waiting producers (they raise ``RuntimeError``)."""
        self._closed = True
        while self._putters:
            waiter = self._putters.popleft()
            if not waiter.done():
                self._reserved += 1
                waiter.set_result(None)

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


_live_channel: ContextVar[_LiveChannel | None] = ContextVar("agent_framework_functional_live_channel", default=None)


def _json_copy(value: Any, depth: int = 0) -> Any:
    """Return a copy of a JSON-safe value, or raise TypeError naming what is not JSON-safe."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError("emit_update() got a non-finite float (nan or infinity), which JSON cannot carry.")
        return value
    if depth >= _MAX_JSON_DEPTH:
        raise TypeError(f"emit_update() data nests deeper than {_MAX_JSON_DEPTH} levels; flatten it.")
    if isinstance(value, dict):
        copied: dict[str, Any] = {}
        for key, item in cast("dict[Any, Any]", value).items():
            if not isinstance(key, str):
                raise TypeError(f"emit_update() data has a {type(key).__name__} dict key; JSON keys must be str.")
            copied[key] = _json_copy(item, depth + 1)
        return copied
    if isinstance(value, (list, tuple)):
        return [_json_copy(item, depth + 1) for item in cast("Sequence[Any]", value)]
    raise TypeError(
        f"emit_update() cannot send a {type(value).__name__}. Send text (str), a Content, an "
        "AgentResponseUpdate, or JSON-safe data (dict with str keys, list, str, int, float, bool, None); "
        "convert other objects first, e.g. model.model_dump(mode='json')."
    )


def _checked_payload(update: Any) -> Any:
    if isinstance(update, (str, Content, AgentResponseUpdate)):
        return update
    kind = type(cast(object, update)).__name__
    if isinstance(update, (Message, AgentResponse)):
        raise TypeError(
            f"emit_update() cannot send a whole {kind}: stream its parts instead (its text, "
            "its contents, or the AgentResponseUpdates of a streaming run; stream_agent() does that)."
        )
    return _json_copy(update)


async def emit_update(update: str | Content | AgentResponseUpdate | Any) -> None:
    """Send an update to the caller now, while the workflow is still running.

    Usable anywhere inside a running workflow: the workflow function, its ``@step`` functions, and
    tasks they start. In a run of :class:`~agent_framework_functional.FunctionalWorkflow`, the update
    reaches the workflow stream at once as a ``WorkflowEvent`` of type ``intermediate`` (core's type
    for visible progress; ``event.data`` is the update, ``event.executor_id`` the workflow name), and
    the stream of :class:`~agent_framework_functional.FunctionalWorkflowAgent` as an
    ``AgentResponseUpdate``: text and ``Content`` become message contents, an ``AgentResponseUpdate``
    is forwarded (restamped with the agent's response id, never carrying a continuation token), and
    JSON data rides in ``additional_properties["data"]`` with no contents.

    Rules:

    * Order: updates, ``request_info`` events and outputs reach the caller in the order the code
      produced them; events core collects are never delivered twice.
    * Backpressure (streaming runs, ``run(..., stream=True)``, which the agent adapter always
      uses): the live channel holds 64 entries per run. When the consumer is slower than the
      workflow, this call waits until there is room; nothing is dropped or buffered beyond that
      bound.
    * Non-streaming ``run()`` has no reader before the function returns: the updates are collected
      with the run's other events (as core collects its own) and the result carries the same events
      in the same order as a streaming run; ``WorkflowRunResult.get_outputs()`` is unchanged
      (updates are ``intermediate``, not ``output``).
    * Under core's own ``FunctionalWorkflow`` (not this package's), the update is added with core's
      ``ctx.add_event`` and arrives when core yields its collected events, after the function returns.
    * Replay hazard: on resume the workflow function runs again from the top, so updates emitted
      outside a ``@step`` are sent again; updates emitted inside a completed step are not (its body
      does not run again).

    JSON data is copied when emitted; ``Content`` and ``AgentResponseUpdate`` objects are sent as
    they are, so do not change them afterwards.

    Args:
        update: Text (``str``), a core ``Content``, an ``AgentResponseUpdate``, or JSON-safe data
            (``dict`` with ``str`` keys, ``list``/``tuple``, ``int``, finite ``float``, ``bool``,
            ``None``).

    Raises:
        TypeError: ``update`` is none of the above (for example a ``Message``, an ``AgentResponse``,
            a pydantic model, a NaN float, or a dict with non-string keys). Nothing is sent.
        RuntimeError: Called outside a running workflow, or after the run it belongs to ended.
            Outside a workflow there is no caller to send to, and dropping the update silently would
            hide the mistake.

    Examples:
        .. code-block:: python

            from agent_framework_functional import emit_update, step, workflow


            @step
            async def research(topic: str) -> list[str]:
                await emit_update({"stage": "research", "topic": topic})
                return [f"fact about {topic}"]


            @workflow
            async def report(topic: str) -> str:
                facts = await research(topic)
                await emit_update("Writing the report...")
                return f"{topic}: {facts[0]}"
    """
    payload = _checked_payload(update)
    channel = _live_channel.get()
    ctx = get_run_context()
    if channel is None:
        if ctx is None:
            raise RuntimeError(
                "emit_update() was called outside a running workflow. Call it from a @workflow function, "
                "one of its @step functions, or a task they await, while the run is in progress."
            )
        await ctx.add_event(WorkflowEvent("intermediate", data=payload))
        return
    await channel.put_live(WorkflowEvent("intermediate", data=payload, executor_id=channel.source), ctx)


def _require_running(name: str) -> None:
    if _live_channel.get() is None and get_run_context() is None:
        raise RuntimeError(
            f"{name}() was called outside a running workflow. Call it from a @workflow function or one of "
            "its @step functions while the run is in progress."
        )


async def stream_agent(
    agent: SupportsAgentRun,
    messages: Any | None = None,
    *,
    session: Any | None = None,
    **kwargs: Any,
) -> AgentResponse:
    """Run an agent in streaming mode, forward each of its updates live, and return its final response.

    Works with anything that satisfies core's agent protocol (``SupportsAgentRun``): core's
    ``Agent``, a ``BaseAgent`` subclass, another workflow's agent. Each ``AgentResponseUpdate`` goes
    through :func:`emit_update` as it arrives, so the caller of the workflow sees the agent write.

    Call it inside a ``@step`` so that a resumed run returns the step's cached ``AgentResponse``
    without calling the agent again or re-sending its updates (core replays completed steps).
    Outside a step it runs again, and streams again, on every replay.

    The agent adapter does not repeat text the run already streamed: returning the response (or its
    ``.text``) from the workflow adds no second copy to the agent's answer (see
    :class:`~agent_framework_functional.FunctionalWorkflowAgent`).

    Args:
        agent: The inner agent.
        messages: Input for the agent, as its ``run`` accepts.

    Keyword Args:
        session: The inner agent's session, passed as ``session=``.
        **kwargs: Forwarded unchanged to ``agent.run`` (for example ``function_invocation_kwargs``
            or ``client_kwargs``).

    Returns:
        The inner agent's final ``AgentResponse`` (``get_final_response()`` of its stream; built
        with ``AgentResponse.from_updates`` when the agent returns a plain async iterable).

    Raises:
        RuntimeError: Called outside a running workflow (checked before the agent is called).
        TypeError: The agent's streaming run returned neither a ``ResponseStream``, an async
            iterable of updates, nor an ``AgentResponse``, or it yielded something that is not an
            ``AgentResponseUpdate``.
        Exception: Whatever the inner agent raises, after the updates it produced before failing.

    Examples:
        .. code-block:: python

            @step
            async def answer(question: str) -> str:
                response = await stream_agent(writer_agent, question)
                return response.text
    """
    _require_running("stream_agent")
    result: Any = agent.run(messages, stream=True, session=session, **kwargs)
    if not isinstance(result, (ResponseStream, AsyncIterable, AgentResponse)) and isinstance(result, Awaitable):
        result = await cast("Awaitable[Any]", result)
    if isinstance(result, AgentResponse):
        whole = cast("AgentResponse[Any]", result)
        for message in whole.messages:
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
    updates: list[AgentResponseUpdate] = []
    iterator: AsyncIterator[Any] = aiter(cast("AsyncIterable[Any]", result))
    try:
        async for update in iterator:
            if not isinstance(update, AgentResponseUpdate):
                raise TypeError(
                    f"{type(agent).__name__}.run(stream=True) yielded {type(update).__name__}; "
                    "stream_agent() forwards AgentResponseUpdate only."
                )
            updates.append(update)
            await emit_update(update)
    except BaseException:
        await _close_inner(cast(object, result))
        raise
    if isinstance(result, ResponseStream):
        return await cast("ResponseStream[AgentResponseUpdate, AgentResponse]", result).get_final_response()
    return AgentResponse.from_updates(updates)


async def _close_inner(stream: object) -> None:
    """Close an inner agent's stream after a failure; a failing close must not replace that failure."""
    close = getattr(stream, "close" if isinstance(stream, ResponseStream) else "aclose", None)
    if close is None:
        return
    with contextlib.suppress(Exception):
        await close()


# ---------------------------------------------------------------------------------------------- driving


async def _pump(core_stream: ResponseStream[WorkflowEvent[Any], Any], channel: _LiveChannel) -> None:
    """Pull core's stream (running the workflow function) in a task bound to the live channel."""
    _live_channel.set(channel)  # this task's own context copy: the caller's context is untouched
    try:
        while True:
            try:
                event = await core_stream.__anext__()
            except StopAsyncIteration:
                break
            await channel.put_core(event)
    except BaseException as exc:
        channel.finish(exc)
        if not isinstance(exc, Exception):
            raise
        return
    channel.finish(None)


async def stream_live(
    core_stream: ResponseStream[WorkflowEvent[Any], Any],
    *,
    source: str | None = None,
    live: bool = True,
    maxsize: int = LIVE_BUFFER_SIZE,
) -> AsyncGenerator[WorkflowEvent[Any], None]:
    """Yield core's events merged, in order, with the live updates the workflow emits (internal).

    Core yields ``started`` and the first ``status`` before it calls user code; those are pulled
    directly, and the pump (which runs user code) starts only when the next event is requested, so
    the caller can act between the first status and user code (the token is spent there). Closing
    this generator cancels the pump and so the workflow task (core cancels it and its children);
    it returns once the pump has finished.

    With ``live=False`` (a non-streaming run: nobody reads before the function returns) there is
    no pump: core's stream is pulled here with the channel bound around each pull, the channel
    collects without a bound (as core collects its own events), and the same merge yields the
    same events in the same order.
    """
    while True:
        try:
            event = await core_stream.__anext__()
        except StopAsyncIteration:
            return
        yield event
        if event.type == "status":
            break
    forwarded: set[WorkflowEvent[Any]] = set()
    if not live:
        collector = _LiveChannel(_UNBOUNDED, source)
        # Core runs the whole workflow function inside the first pull after its first status
        # event; later pulls only hand out what it collected, so only that pull needs the channel.
        bind = True
        try:
            while True:
                bound = _live_channel.set(collector) if bind else None  # core's workflow task copies it
                bind = False
                try:
                    pulled: WorkflowEvent[Any] | None = await core_stream.__anext__()
                except StopAsyncIteration:
                    pulled = None
                finally:
                    if bound is not None:
                        _live_channel.reset(bound)
                while collector.has_items():  # what the function emitted came before this event
                    item = collector.pop()
                    for early in item[1]:
                        forwarded.add(early)
                        yield early
                    yield item[2]
                if pulled is None:
                    return
                if pulled in forwarded:
                    forwarded.discard(pulled)
                    continue
                yield pulled
        finally:
            collector.close()
    channel = _LiveChannel(maxsize, source)
    pump = asyncio.get_running_loop().create_task(_pump(core_stream, channel))
    try:
        while True:
            item = await channel.get()
            kind = item[0]
            if kind == _LIVE:
                for early in item[1]:
                    forwarded.add(early)
                    yield early
                yield item[2]
            elif kind == _CORE:
                core_event: WorkflowEvent[Any] = item[1]
                if core_event in forwarded:
                    forwarded.discard(core_event)
                    continue
                yield core_event
            else:
                error: BaseException | None = item[1]
                if error is not None:
                    raise error
                return
    finally:
        if not pump.done():
            # Abandoned: cancel first, so the workflow task sees a cancellation (core cancels it and
            # its children) rather than a closed channel at its next emit_update().
            pump.cancel()
            await asyncio.wait({pump})
        channel.close()
        if not pump.cancelled():
            pump.exception()  # retrieved: a failure already reached the caller through the channel


# ---------------------------------------------------------------------------------------------- agent side


def live_update_to_agent_update(
    data: Any,
    *,
    author_name: str | None,
    agent_id: str,
    response_id: str,
) -> AgentResponseUpdate | None:
    """Convert the payload of an ``intermediate`` event to the agent update the caller sees.

    Text and ``Content`` become contents of an assistant update authored by the agent; an
    ``AgentResponseUpdate`` is copied (contents, role, author, message id, properties; never its
    continuation token or operation state, so the token rule of the last update holds); JSON data
    becomes an update with no contents and ``additional_properties["data"]``. Merge modes are kept,
    so core's ``AgentResponse.from_updates`` folds a replace snapshot as the inner agent meant it. Other payloads (an
    ``intermediate`` event a user added by hand with something else) give None.
    """
    if isinstance(data, AgentResponseUpdate):
        properties = dict(data.additional_properties) if data.additional_properties else None
        return AgentResponseUpdate(
            contents=list(data.contents),
            role=data.role or "assistant",
            author_name=data.author_name or author_name,
            agent_id=agent_id,
            response_id=response_id,
            message_id=data.message_id,
            merge_mode=data.merge_mode,
            created_at=data.created_at,
            additional_properties=properties,
            raw_representation=data,
        )
    if isinstance(data, str):
        contents = [Content.from_text(text=data)]
    elif isinstance(data, Content):
        contents = [data]
    elif data is None or isinstance(data, (bool, int, float, dict, list)):
        return AgentResponseUpdate(
            contents=[],
            role="assistant",
            author_name=author_name,
            agent_id=agent_id,
            response_id=response_id,
            additional_properties={LIVE_DATA_PROPERTY: data},
        )
    else:
        return None
    return AgentResponseUpdate(
        contents=contents, role="assistant", author_name=author_name, agent_id=agent_id, response_id=response_id
    )


class LiveText:
    """The text one agent run has streamed live, to keep outputs from repeating it (internal).

    Rule (the same in both run modes, since both convert the same events in the same order): an
    ``output`` adds nothing to the agent's answer when it has text and the text streamed live before
    it ends with exactly that text. This is the common case of a workflow returning what it streamed
    (``return response.text`` after :func:`stream_agent`). Any other output is added as usual.

    The streamed text follows core's merge rules (``AgentResponse.from_updates``): adjacent text
    contents form a run, a text content with ``merge_mode="replace"`` (the full-text snapshot that
    core's OpenAI client sends after the deltas) replaces its run, and an update with
    ``merge_mode="replace"`` clears its message.
    """

    __slots__ = ("_author", "_message_id", "_message_start", "_open", "_role", "_runs")

    def __init__(self) -> None:
        self._runs: list[list[str]] = []  # text runs, each a list of chunks (joined only when needed)
        self._message_start = 0  # index in _runs where the current message begins
        self._open = False  # the last content was text: the next text chunk joins that run
        self._author: str | None = None
        self._message_id: str | None = None
        self._role: Any = None

    def add(self, update: AgentResponseUpdate) -> None:
        """Record the text of a live update."""
        if not self._runs or self._starts_new_message(update):
            self._message_start = len(self._runs)
            self._open = False
        if update.merge_mode == "replace":
            del self._runs[self._message_start :]
            self._open = False
        for content in update.contents:
            if content.type != "text":
                self._open = False
                continue
            text = content.text or ""
            if not self._open:
                self._runs.append([text])
                self._open = True
            elif content.merge_mode == "replace":
                self._runs[-1] = [text]
            else:
                self._runs[-1].append(text)
        if update.author_name is not None:
            self._author = update.author_name
        if update.role is not None:
            self._role = update.role
        if update.message_id:
            self._message_id = update.message_id

    def _starts_new_message(self, update: AgentResponseUpdate) -> bool:
        """Core's rule in ``_process_update`` for when an update opens a new message."""
        return bool(
            (update.message_id and self._message_id and update.message_id != self._message_id)
            or (update.author_name and self._author and update.author_name != self._author)
            or (update.role and update.role != self._role)
        )

    def repeats(self, contents: Sequence[Content]) -> bool:
        """True when ``contents`` carry text and the live text so far ends with exactly that text."""
        if not self._runs:
            return False
        text = "".join(content.text or "" for content in contents if content.type == "text")
        if not text:
            return False
        return "".join("".join(run) for run in self._runs).endswith(text)
