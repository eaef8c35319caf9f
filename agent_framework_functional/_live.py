"""The live channel: carries emit_update's updates from a running workflow to its caller, in order.

Core yields a functional workflow's events only after the function returns, so this side channel
(bound through the ``live_channel`` ``ContextVar``) carries them instead of a reimplemented engine.
Streaming: :func:`stream_live` pulls core's stream in a pump task bound to a bounded channel; core
creates the workflow task from it, so every task the workflow spawns inherits the channel.
Non-streaming: :func:`collect_live` binds an unbounded channel around each pull (no pump task).

Ordering (one merge, :class:`_Merge`): when a live update enters, the events core collected since the
last one go in first (``_core_compat.collected_events``, pinned by a test) and are skipped when core
yields them again, so the caller sees everything once, in the order it happened.

Backpressure (streaming): when :data:`LIVE_BUFFER_SIZE` entries wait, ``await emit_update(...)`` waits
for the consumer; nothing is dropped (core's ``ResponseStream`` keeps its own history, outside the bound).
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import AsyncGenerator
from contextvars import ContextVar
from typing import Any, Literal

from agent_framework import ResponseStream, RunContext, WorkflowEvent

from ._core_compat import collected_events
from ._errors import NotInWorkflowRunError

LIVE_BUFFER_SIZE = 64
"""Entries the live channel holds before ``emit_update`` waits for the consumer."""

_LIVE: Literal[0] = 0
_CORE: Literal[1] = 1
_END: Literal[2] = 2

_Item = tuple[Any, ...]


class _LiveChannel:
    """A FIFO from one run's workflow code (any number of tasks) to its one consumer (internal).

    A producer that finds it full waits in line; a freed slot is promised to the first waiting
    producer, so producers enter in arrival order and the bound holds exactly. The end never waits.
    """

    __slots__ = ("_getter", "_items", "_maxsize", "_promised", "_putters", "closed", "core_seen", "ctx", "source")

    def __init__(self, maxsize: int, source: str | None) -> None:
        self.closed = False
        self.ctx: RunContext | None = None
        self.core_seen = 0
        self.source = source
        self._items: deque[_Item] = deque()
        self._maxsize = maxsize
        self._promised = 0
        self._putters: deque[asyncio.Future[None]] = deque()
        self._getter: asyncio.Future[None] | None = None

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

    async def _wait_for_slot(self) -> None:
        if len(self._items) + self._promised < self._maxsize and not self._putters:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._putters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._promised -= 1  # a slot was promised to us: pass it on
                self._wake_putter()
            elif waiter in self._putters:
                self._putters.remove(waiter)
            raise
        self._promised -= 1

    def _wake_putter(self) -> None:
        while self._putters and len(self._items) + self._promised < self._maxsize:
            waiter = self._putters.popleft()
            if not waiter.done():
                self._promised += 1
                waiter.set_result(None)

    def _append(self, item: _Item) -> None:
        self._items.append(item)
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)

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

    def drain(self, merge: _Merge, out: list[WorkflowEvent[Any]]) -> None:
        """Move the live entries into ``out`` through ``merge`` (a non-streaming run, after each pull)."""
        while self._items:
            merge.live(self._items.popleft(), out)

    def close(self) -> None:
        """Refuse new entries and release waiting producers (they raise ``NotInWorkflowRunError``)."""
        self.closed = True
        while self._putters:
            waiter = self._putters.popleft()
            if not waiter.done():
                self._promised += 1
                waiter.set_result(None)


live_channel: ContextVar[_LiveChannel | None] = ContextVar("agent_framework_functional_live_channel", default=None)


class _Merge:
    """The one merge of live entries and core's events, used by both run modes (internal)."""

    __slots__ = ("_forwarded",)

    def __init__(self) -> None:
        self._forwarded: set[WorkflowEvent[Any]] = set()

    def live(self, item: _Item, out: list[WorkflowEvent[Any]]) -> None:
        """Append a live entry's events to ``out``: core's collected ones, then the live event."""
        for early in item[1]:
            self._forwarded.add(early)
            out.append(early)
        out.append(item[2])

    def is_new(self, event: WorkflowEvent[Any]) -> bool:
        """True when core's ``event`` was not already sent ahead of a live update."""
        if event in self._forwarded:
            self._forwarded.discard(event)
            return False
        return True


async def collect_live(
    core_stream: ResponseStream[WorkflowEvent[Any], Any], *, source: str | None = None
) -> AsyncGenerator[WorkflowEvent[Any], None]:
    """Yield core's events merged, in order, with the live updates the workflow emits (non-streaming runs)."""
    channel = _LiveChannel(sys.maxsize, source)
    merge = _Merge()
    out: list[WorkflowEvent[Any]] = []
    try:
        while True:
            bound = live_channel.set(channel)
            try:
                event = await _next_core_event(core_stream)
            finally:
                live_channel.reset(bound)
            channel.drain(merge, out)
            if event is not None and merge.is_new(event):
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
        channel.finish(exc)
        if not isinstance(exc, Exception):
            raise
        return
    channel.finish(None)


async def stream_live(
    core_stream: ResponseStream[WorkflowEvent[Any], Any], *, source: str | None = None
) -> AsyncGenerator[WorkflowEvent[Any], None]:
    """Yield core's events merged, in order, with the live updates the workflow emits (streaming runs).

    Core yields ``started`` and the first ``status`` before it calls user code; those are pulled
    directly, and the pump (which runs user code) starts only when the next event is requested, so
    the caller can act between the first status and user code (the token is spent there). Closing
    this generator cancels the pump and so the workflow task (core cancels it and its children);
    it returns once the pump has finished.
    """
    while (event := await _next_core_event(core_stream)) is not None:
        yield event
        if event.type == "status":
            break
    else:
        return  # core's stream ended before user code
    merge = _Merge()
    channel = _LiveChannel(LIVE_BUFFER_SIZE, source)
    pump = asyncio.get_running_loop().create_task(_pump(core_stream, channel))
    out: list[WorkflowEvent[Any]] = []
    try:
        while _released(await channel.get(), merge, out):
            for merged in out:
                yield merged
            out.clear()
    finally:
        if await _stop_pump(pump, channel):
            raise asyncio.CancelledError


async def _next_core_event(core_stream: ResponseStream[WorkflowEvent[Any], Any]) -> WorkflowEvent[Any] | None:
    """Core's next event, or None at the end of its stream."""
    try:
        return await core_stream.__anext__()
    except StopAsyncIteration:
        return None


def _released(item: _Item, merge: _Merge, out: list[WorkflowEvent[Any]]) -> bool:
    """Put the events one channel item releases into ``out``, in order; False at the run's end (its error raised)."""
    kind = item[0]
    if kind == _LIVE:
        merge.live(item, out)
        return True
    if kind == _CORE:
        if merge.is_new(item[1]):
            out.append(item[1])
        return True
    error: BaseException | None = item[1]
    if error is not None:
        raise error
    return False


async def _stop_pump(pump: asyncio.Task[None], channel: _LiveChannel) -> bool:
    """Wind the pump down and close the channel; True when this wait was cancelled again (re-raise it)."""
    cancelled_again = False
    if not pump.done():
        # Abandoned: cancel first, so the workflow task sees a cancellation (core cancels it and
        # its children) rather than a closed channel at its next emit_update().
        pump.cancel()
        # Wait until core's stream is wound down even if this wait is cancelled too (anyio's
        # cancel scopes, as in Starlette when a client hangs up, cancel again at every await):
        # leaving while the pump is inside core's stream makes closing that stream fail with
        # "asynchronous generator is already running" instead of the cancellation.
        while not pump.done():
            try:
                await asyncio.wait({pump})
            except asyncio.CancelledError:
                cancelled_again = True
    channel.close()
    if not pump.cancelled():
        pump.exception()  # retrieved: a failure already reached the caller through the channel
    return cancelled_again
