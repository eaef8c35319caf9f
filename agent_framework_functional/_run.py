"""One run of a workflow instance: one driver over core's stream, in both run modes, and its result.

:class:`WorkflowRun` runs the same steps in both modes, each one authority hook: ``_start``, ``_claim``
(before user code: AGENTS.md invariant 5), ``_issue`` (before the pause's status reaches the caller:
invariant 6) and ``_ended``.
"""

from __future__ import annotations

import enum
import functools
import weakref
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Sequence
from typing import Any

from agent_framework import FunctionalWorkflow as _CoreFunctionalWorkflow
from agent_framework import (
    ResponseStream,
    WorkflowErrorDetails,
    WorkflowEvent,
    WorkflowEventSource,
    WorkflowRunResult,
    WorkflowRunState,
)
from agent_framework.observability import OBSERVABILITY_SETTINGS

from ._authority_protocol import Authority, Requests, ResumeTicket
from ._continuation import FunctionalWorkflowContinuationToken
from ._core_compat import core_event_stream
from ._errors import ContinuationAuthorityError
from ._live import collect_live, stream_live
from ._telemetry import (
    SPENT,
    continuation_issued,
    continuation_rejected,
    continuation_spent,
    continuation_started,
    counted_refusal,
)


class Phase(enum.Enum):
    """Where one core event puts a run, so what the driver does with it."""

    EARLY = "early"  # before user code: withheld until the token is spent
    CLAIM = "claim"  # core's first status: user code is next, so spend the token, then pass the early events
    ISSUE = "issue"  # the status of a saved pause: issue its token, then pass it
    EMIT = "emit"  # anything else: pass it on


_EARLY, _CLAIM, _ISSUE, _EMIT = Phase.EARLY, Phase.CLAIM, Phase.ISSUE, Phase.EMIT
_PAUSED = WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
_IDLE = WorkflowRunState.IDLE


class FunctionalWorkflowRunResult(WorkflowRunResult):
    """Core's ``WorkflowRunResult`` plus ``continuation_token``: set only when the run ended paused.

    Args:
        events: Data-plane events of the run, as core collects them.
        status_events: Status events of the run (core's status timeline).
    """

    def __init__(
        self,
        events: list[WorkflowEvent[Any]],
        status_events: list[WorkflowEvent[Any]] | None = None,
        *,
        continuation_token: FunctionalWorkflowContinuationToken | None = None,
    ) -> None:
        super().__init__(events, status_events)
        self.continuation_token: FunctionalWorkflowContinuationToken | None = continuation_token


class RunLease:
    """Held only by a non-streaming run's coroutine frame: ``__del__`` frees the guard of a run never awaited."""

    __slots__ = ("_run",)

    def __init__(self, run: WorkflowRun) -> None:
        self._run = run

    def __del__(self) -> None:
        self._run.free_guard(self._run, True)


class WorkflowRun:
    """The one run that holds an instance's run guard, driving core; state fields default on the class."""

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
        free_guard: Callable[[WorkflowRun, bool], None],
    ) -> None:
        self.ticket = ticket
        self.authority = authority
        self.core = core
        self.name = name
        self.holds_guard = holds_guard
        self.free_guard = free_guard

    def end(self, *, dropped: bool) -> bool:
        """Hand back what the run did not spend; True when core's replay state must go (AGENTS.md invariant 8)."""
        handed_back = self.authority.hand_back(self.ticket)
        if dropped:
            return self.core_started
        if handed_back or not self.core_started:
            return False
        return self.final_state != _IDLE and self.token is None

    def observe(self, event: WorkflowEvent[Any]) -> Phase:
        """Record what one core event says about the run; return its :class:`Phase`."""
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
        elif kind == "request_info" and event.request_id:  # kept for this run's pause, by request id
            if self.requests is None:
                self.requests = {}
            self.requests[event.request_id] = event
        if early is not None:
            early.append(event)
            return _EARLY
        return _EMIT

    # ------------------------------------------------------------------ the steps (one authority hook each)

    async def _start(self, core_kwargs: dict[str, Any]) -> None:
        self.span = continuation_started(self.name, self.ticket, core_kwargs["checkpoint_id"])
        self.ticket = await counted_refusal(self.authority.before_core(self.ticket, core_kwargs), self.name)

    async def _claim(self) -> None:
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
        continuation = await self.authority.record_pause(self.ticket, self.chain, self.requests or {})
        self.token = continuation.token()
        continuation_issued(self.name, continuation, self.span)

    async def _ended(self) -> None:
        if self.final_state == _IDLE:
            await self.authority.finish(self.ticket)

    # ------------------------------------------------------------------ the one driver

    async def stream(self, core_kwargs: dict[str, Any], *, streaming: bool = True) -> AsyncIterable[WorkflowEvent[Any]]:
        """Core's events merged with live updates, the token spent before user code; both run modes."""
        if not self.holds_guard(self):
            return  # closed before it was iterated: its guard was freed, so never call core
        self.early = []
        try:
            await self._start(core_kwargs)
            core_stream, live_events = self._open_core(core_kwargs, streaming)
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
                for failure in [] if self.saw_failed or not streaming else failure_surface(exc):
                    yield failure  # core raised without its failed event (a non-streaming run just raises)
                raise
            finally:
                await live_events.aclose()  # cancels the workflow task if the stream was abandoned
                await core_stream.close()
        finally:
            await self._done()

    def _open_core(
        self, core_kwargs: dict[str, Any], streaming: bool
    ) -> tuple[ResponseStream[WorkflowEvent[Any], Any], AsyncGenerator[WorkflowEvent[Any], None]]:
        if streaming:
            core_stream = self.core.run(stream=True, **core_kwargs)
            # User code runs in a task bound to a live channel (_live.stream_live, AGENTS.md invariant 15).
            live_events = stream_live(core_stream, source=self.name)
        else:  # core's own non-streaming stream: ctx.is_streaming() False, as in core
            core_stream = core_event_stream(self.core, include_status_events=False, **core_kwargs)
            live_events = collect_live(core_stream, source=self.name)
        self.core_started = True
        return core_stream, live_events

    async def collect(
        self, core_kwargs: dict[str, Any], include_status_events: bool, lease: RunLease
    ) -> FunctionalWorkflowRunResult:
        """Non-streaming run: :meth:`stream` folded into core's result shape plus the token."""
        # ``lease`` stays referenced by this frame until the run ends; never ``del`` it here.
        events = [event async for event in self.stream(core_kwargs, streaming=False)]
        return finalize_events(events, run=self, include_status_events=include_status_events)

    async def _turn(self, phase: Phase, event: WorkflowEvent[Any]) -> Sequence[WorkflowEvent[Any]]:
        if phase is _CLAIM:
            await self._claim()
            early, self.early = self.early or [], None
            return early
        await self._issue()
        return (event,)

    async def _done(self) -> None:
        try:
            recorder = self.ticket.recorder
            if recorder is not None:
                await recorder.flush()
        finally:
            self.free_guard(self, False)


def failure_surface(exc: Exception) -> list[WorkflowEvent[Any]]:
    """The failed event and FAILED status core omits when saving the pause checkpoint fails (redacted as core's)."""
    details = WorkflowErrorDetails.from_exception(
        exc, include_sensitive_data=OBSERVABILITY_SETTINGS.SENSITIVE_DATA_ENABLED
    )
    return [
        WorkflowEvent("failed", details=details, origin=WorkflowEventSource.FRAMEWORK),
        WorkflowEvent("status", state=WorkflowRunState.FAILED, origin=WorkflowEventSource.FRAMEWORK),
    ]


def finalize_events(
    events: Sequence[WorkflowEvent[Any]], *, run: WorkflowRun, include_status_events: bool
) -> FunctionalWorkflowRunResult:
    """The run result as core's finalizer builds it, plus the continuation token."""
    kept: list[WorkflowEvent[Any]] = []
    status_events: list[WorkflowEvent[Any]] = []
    for event in events:
        if event.type == "started":
            continue
        if event.type == "status":
            status_events.append(event)
            if not include_status_events:
                continue
        kept.append(event)
    return FunctionalWorkflowRunResult(kept, status_events, continuation_token=run.token)


def handle(
    run: WorkflowRun, core_kwargs: dict[str, Any], *, stream: bool, include_status_events: bool
) -> ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] | Awaitable[FunctionalWorkflowRunResult]:
    """The caller's ``ResponseStream`` or coroutine, either freeing the guard when dropped (AGENTS.md invariant 9)."""
    if not stream:
        return run.collect(core_kwargs, include_status_events, RunLease(run))
    response_stream: ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] = ResponseStream(
        run.stream(core_kwargs),
        finalizer=functools.partial(finalize_events, run=run, include_status_events=include_status_events),
        cleanup_hooks=[functools.partial(run.free_guard, run, True)],
    )
    weakref.finalize(response_stream, run.free_guard, run, True).atexit = False
    return response_stream
