"""The live channel: carries emit_update's updates from a running workflow to its caller, in order.

Core yields a functional workflow's events only after the function returns, so this channel (bound through
the ``live_channel`` ``ContextVar``) carries them. Streaming pulls core's stream in a pump task on a bounded
channel (a full channel makes ``emit_update`` wait; nothing is dropped); non-streaming binds an unbounded
channel around each pull. When a live update enters, the events core collected since the last one go first
(``_core_compat.collected_events``) and are skipped when core yields them again (:class:`_Merge`).
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
    """A FIFO from one run's workflow tasks to its one consumer; a freed slot goes to the first waiting producer."""

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
        self._check_open()
        await self._wait_for_slot()
        self._check_open()
        # Synchronous from here: the snapshot of core's events and the append are one step.
        self._append((_LIVE, self._take_collected(ctx), event))

    async def put_core(self, event: WorkflowEvent[Any]) -> None:
        await self._wait_for_slot()
        self._append((_CORE, event))

    def finish(self, error: BaseException | None) -> None:
        self._append((_END, error))

    async def get(self) -> _Item:
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
    """The one merge of live entries and core's events, used by both run modes."""

    __slots__ = ("_forwarded",)

    def __init__(self) -> None:
        self._forwarded: set[WorkflowEvent[Any]] = set()

    def live(self, item: _Item, out: list[WorkflowEvent[Any]]) -> None:
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

    ``started`` and the first ``status`` are pulled directly; the pump (running user code, where the token
    is spent) starts at the next request. Closing this cancels the pump and the workflow task, then waits.
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
