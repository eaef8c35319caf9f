"""One run of a workflow instance: one driver over core's stream, in both run modes.

:class:`WorkflowRun` drives core through the same steps whether the caller streams or not, each
calling one authority hook: ``_start`` (``before_core``), ``_claim`` (after core's first status,
before user code: AGENTS.md invariant 5), ``_issue`` (a saved pause, before its status reaches the
caller: invariant 6) and ``_ended`` (``finish``).
"""

from __future__ import annotations

import enum
import functools
import weakref
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from typing import Any

from agent_framework import FunctionalWorkflow as _CoreFunctionalWorkflow
from agent_framework import (
    ResponseStream,
    WorkflowEvent,
    WorkflowRunResult,
    WorkflowRunState,
)

from ._authority_protocol import Authority, Requests, ResumeTicket
from ._continuation import FunctionalWorkflowContinuationToken
from ._core_compat import core_event_stream
from ._errors import ContinuationAuthorityError
from ._live import LiveCollector, live_channel, stream_live
from ._run_result import FunctionalWorkflowRunResult, failure_surface, finalize_events, merge_live
from ._telemetry import (
    SPENT,
    continuation_issued,
    continuation_rejected,
    continuation_spent,
    continuation_started,
    counted_refusal,
)


class Phase(enum.Enum):
    """Where one core event puts a streaming run, so what the driver does with it."""

    EARLY = "early"  # before user code: withheld until the token is spent
    CLAIM = "claim"  # core's first status: user code is next, so spend the token, then pass the early events
    ISSUE = "issue"  # the status of a saved pause: issue its token, then pass it
    EMIT = "emit"  # anything else: pass it on


_EARLY, _CLAIM, _ISSUE, _EMIT = Phase.EARLY, Phase.CLAIM, Phase.ISSUE, Phase.EMIT
_PAUSED = WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
_IDLE = WorkflowRunState.IDLE


class RunLease:
    """Held only by a non-streaming run's coroutine frame: ``__del__`` frees the guard of a run never awaited."""

    __slots__ = ("_run",)

    def __init__(self, run: WorkflowRun) -> None:
        self._run = run

    def __del__(self) -> None:
        self._run.free(self._run)


class WorkflowRun:
    """The one run that holds an instance's run guard, and its driving of core (internal).

    State fields default on the class: one run is made per call and sets only what it uses.

    Args:
        ticket: What the authority accepted for this run.
        authority: The instance's authority strategy.
        core: The core instance this run drives.
        name: The workflow name (source of live events).
        holds_guard: True while this run still holds the instance's guard (AGENTS.md invariant 8).
        on_end: Called once when the run's driving ends (the instance settles its state).
        free: Frees the instance if this run still holds it (a dropped stream or awaitable).
    """

    core_started = False
    token: FunctionalWorkflowContinuationToken | None = None
    chain: Requests | None = None  # the requests of the run chain up to the resumed pause (from the claim)
    requests: dict[str, WorkflowEvent[Any]] | None = None  # this run's pause, handed to its continuation
    early: list[WorkflowEvent[Any]] | None = None  # streaming: withheld until the claim; None once passed
    final_state: WorkflowRunState | None = None
    saw_failed = False
    span: Any = None  # the span this run reports continuation events to (_telemetry.continuation_started)

    def __init__(
        self,
        ticket: ResumeTicket,
        authority: Authority,
        core: _CoreFunctionalWorkflow,
        name: str,
        *,
        holds_guard: Callable[[WorkflowRun], bool],
        on_end: Callable[[WorkflowRun], None],
        free: Callable[[WorkflowRun], None],
    ) -> None:
        self.ticket = ticket
        self.authority = authority
        self.core = core
        self.name = name
        self.holds_guard = holds_guard
        self.on_end = on_end
        self.free = free

    def end(self, *, dropped: bool) -> bool:
        """Hand back what the run did not spend; True when core's replay state must go.

        It must go after a dropped run that started core, or one that ended after user code without
        finishing or pausing.
        """
        handed_back = self.authority.hand_back(self.ticket)
        if dropped:
            return self.core_started
        if handed_back or not self.core_started:
            return False
        return self.final_state != _IDLE and self.token is None

    def record_request(self, event: WorkflowEvent[Any]) -> None:
        """Keep a ``request_info`` event of this run's pause (by its request id)."""
        request_id = event.request_id
        if request_id:
            if self.requests is None:
                self.requests = {}
            self.requests[request_id] = event

    def observe(self, event: WorkflowEvent[Any]) -> Phase:
        """Streaming: record what one core event says about the run; return its :class:`Phase`."""
        kind = event.type
        early = self.early
        if kind == "status":
            self.final_state = event.state
            if early is not None:
                early.append(event)
                return _CLAIM
            if event.state == _PAUSED and self.token is None and self.holds_guard(self):
                return _ISSUE
            return _EMIT
        if kind == "failed":
            self.saw_failed = True
        elif kind == "request_info":
            self.record_request(event)
        if early is not None:
            early.append(event)
            return _EARLY
        return _EMIT

    # ------------------------------------------------------------------ the steps (one authority hook each)

    async def _start(self, core_kwargs: dict[str, Any]) -> None:
        """Before core: the authority's checks (a refusal is counted) and the run's checkpoint recorder."""
        self.span = continuation_started(self.name, self.ticket, core_kwargs["checkpoint_id"])
        self.ticket = await counted_refusal(self.authority.before_core(self.ticket, core_kwargs), self.name)

    async def _claim(self) -> None:
        """Right before user code: spend the token (with a store, claim it)."""
        ticket = self.ticket
        try:
            self.chain = await self.authority.claim(ticket)
        except ContinuationAuthorityError:
            if ticket.resumes:
                continuation_rejected(self.name, SPENT)  # another resume (or an abandonment) won the claim
            raise
        if ticket.resumes:
            continuation_spent(self.name, ticket.continuation, ticket.record, ticket.claim_hash, self.span)

    async def _issue(self) -> None:
        """Issue the continuation of a saved pause (recorded in the store first, if there is one)."""
        continuation = await self.authority.record_pause(
            self.ticket,
            self.chain,
            self.requests or {},
            workflow_name=self.name,
            signature_hash=self.core.graph_signature_hash,
        )
        self.token = continuation.token()
        continuation_issued(self.name, continuation, self.span)

    async def _ended(self) -> None:
        """Core's stream ended: a run that finished deletes its chain's checkpoints."""
        if self.final_state == _IDLE:
            await self.authority.finish(self.ticket)

    # ------------------------------------------------------------------ streaming

    async def stream(self, core_kwargs: dict[str, Any]) -> AsyncIterable[WorkflowEvent[Any]]:
        """Streaming run: core's events merged with live updates, the token spent before user code."""
        if not self.holds_guard(self):
            return  # closed before it was iterated: its guard was freed, so never call core
        self.early = []
        try:
            await self._start(core_kwargs)
            core_stream = self.core.run(stream=True, **core_kwargs)
            self.core_started = True
            # User code runs in a task bound to a live channel (_live.stream_live, AGENTS.md invariant 15).
            live_events = stream_live(core_stream, source=self.name)
            try:
                async for event in live_events:
                    phase = self.observe(event)
                    if phase is _EMIT:
                        yield event
                    elif phase is not _EARLY:
                        for passed in await self._turn(phase, event):
                            yield passed
                await self._ended()
            except Exception as exc:
                for failure in self._failure(exc):
                    yield failure
                raise
            finally:
                await live_events.aclose()  # cancels the workflow task if the stream was abandoned
                await core_stream.close()
        finally:
            await self._settle()

    async def _turn(self, phase: Phase, event: WorkflowEvent[Any]) -> Sequence[WorkflowEvent[Any]]:
        """The claim or the issue a streaming run does at ``event``; the events to pass on then."""
        if phase is _CLAIM:
            await self._claim()
            early, self.early = self.early or [], None
            return early
        await self._issue()
        return (event,)

    async def _settle(self) -> None:
        """The run ended: its storage writes the step checkpoints it still holds back for it, then ``on_end``."""
        try:
            recorder = self.ticket.recorder
            if recorder is not None:
                await recorder.settle()
        finally:
            self.on_end(self)

    def _failure(self, exc: Exception) -> list[WorkflowEvent[Any]]:
        """The failure surface a streaming run adds when core raised without its ``failed`` event."""
        return [] if self.saw_failed else failure_surface(exc)

    # ------------------------------------------------------------------ non-streaming

    async def collect(
        self, core_kwargs: dict[str, Any], include_status_events: bool, lease: RunLease
    ) -> FunctionalWorkflowRunResult:
        """Non-streaming run: the token spent before user code, then core's own ``get_final_response()``.

        Core's non-streaming path (AGENTS.md invariant 40); nobody reads before this returns, so a pause's
        token is issued once core's stream ended, and live updates are merged in production order.
        """
        # ``lease`` stays referenced by this frame until the run ends; never ``del`` it here.
        if not self.holds_guard(self):
            return FunctionalWorkflowRunResult([], [])
        collector = LiveCollector(self.name)
        bound = live_channel.set(collector)
        try:
            await self._start(core_kwargs)
            # Core's own non-streaming stream (ctx.is_streaming() False), not run(stream=True).
            core_stream = core_event_stream(self.core, include_status_events=include_status_events, **core_kwargs)
            self.core_started = True
            await self._pull_to_user_code(core_stream)
            result = await core_stream.get_final_response()
            collector.closed = True  # core's stream ended: later updates are refused, as in a streaming run
            await self._collected(result)
        finally:
            live_channel.reset(bound)
            collector.closed = True
            await self._settle()
        events: list[WorkflowEvent[Any]] = result
        if collector.entries:  # something was emitted: merge it in
            events = merge_live(result, collector, include_status_events)
        return FunctionalWorkflowRunResult(events, result.status_timeline(), continuation_token=self.token)

    async def _pull_to_user_code(self, core_stream: ResponseStream[WorkflowEvent[Any], WorkflowRunResult]) -> None:
        """Pull core's events up to its first status (user code is next), then claim; close core if that fails.

        Core's ``ResponseStream`` closes itself when it ends or raises, so only a failed claim closes it.
        """
        pull = core_stream.__anext__
        try:
            while (await pull()).type != "status":
                pass
        except StopAsyncIteration:
            return  # no status at all: nothing ran, core's result says so
        try:
            await self._claim()
        except BaseException:
            await core_stream.close()
            raise

    async def _collected(self, result: WorkflowRunResult) -> None:
        """Core's non-streaming result is in: issue the token of a saved pause, or end the run."""
        state = self.final_state = result.get_final_state()
        if state == _PAUSED and self.holds_guard(self):
            for event in result:
                if event.type == "request_info":
                    self.record_request(event)
            await self._issue()
        await self._ended()


def handle(
    run: WorkflowRun, core_kwargs: dict[str, Any], *, stream: bool, include_status_events: bool
) -> ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] | Awaitable[FunctionalWorkflowRunResult]:
    """The caller's handle on an accepted run: a ``ResponseStream``, or one coroutine (non-streaming).

    Either frees the guard when dropped unfinished (AGENTS.md invariant 9): the stream by its cleanup
    hook and a weak finalizer, the coroutine by the :class:`RunLease` only its frame holds.
    """
    if not stream:
        return run.collect(core_kwargs, include_status_events, RunLease(run))
    response_stream: ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] = ResponseStream(
        run.stream(core_kwargs),
        finalizer=functools.partial(finalize_events, run=run, include_status_events=include_status_events),
        cleanup_hooks=[functools.partial(run.free, run)],
    )
    weakref.finalize(response_stream, run.free, run).atexit = False
    return response_stream
