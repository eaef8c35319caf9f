"""One run of a workflow instance: drives core's stream, spends the token before user code, issues one on a pause.

:class:`WorkflowRun` is the bookkeeping of the run that holds an instance's run guard, and the one
place that drives core's ``run(stream=True)``, in either mode: :meth:`WorkflowRun.stream` (an async
generator merged with live updates) or :meth:`WorkflowRun.collect` (one coroutine, no generator
layer, for non-streaming runs). Both call the same :meth:`WorkflowRun.observe` on every event:

* core yields ``started`` and the first ``status`` before it calls user code; they are held, the
  authority claims (spends) the token, and only then are they released to the caller;
* on the ``IDLE_WITH_PENDING_REQUESTS`` status (core saved the pause and its checkpoint) the
  authority issues the next continuation before that status reaches the caller;
* when core raises without a ``failed`` event (its pause handler failing to save), the caller gets
  the normal failure surface (:func:`failure_surface`).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from agent_framework import FunctionalWorkflow as _CoreFunctionalWorkflow
from agent_framework import (
    WorkflowErrorDetails,
    WorkflowEvent,
    WorkflowEventSource,
    WorkflowRunResult,
    WorkflowRunState,
)
from agent_framework.observability import OBSERVABILITY_SETTINGS

from ._authority import InMemoryAuthority, ResumeTicket
from ._continuation import FunctionalWorkflowContinuationToken
from ._core_compat import core_event_stream
from ._errors import ContinuationAuthorityError
from ._live import LiveCollector, live_channel, stream_live
from ._telemetry import (
    SPENT,
    continuation_issued,
    continuation_rejected,
    continuation_spent,
    continuation_started,
    counted_refusal,
)

# What the driving loop does with one event of core's stream (see WorkflowRun.observe).
_EMIT, _HOLD, _CLAIM, _ISSUE = 0, 1, 2, 3
_PAUSED = WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
_STR_ONLY = frozenset({str})
_RESPONSES_SHAPE = "'responses' must be a mapping from request id (str) to the answer for that request."


class FunctionalWorkflowRunResult(WorkflowRunResult):
    """Core's ``WorkflowRunResult`` plus the continuation token of a paused run.

    Args:
        events: Data-plane events of the run, as core collects them.
        status_events: Status events of the run (core's status timeline).

    Keyword Args:
        continuation_token: The token that authorises a response-only resume, or None when the
            run did not end paused (finished, or failed).
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


class WorkflowRun:
    """The one run that holds an instance's run guard, and its driving of core (internal).

    A plain class whose state fields default on the class: one is made per run, and a plain run
    sets only the fields it uses.

    Args:
        ticket: What the authority accepted for this run.
        authority: The instance's authority strategy.
        core: The core instance this run drives.
        name: The workflow name (source of live events).
        is_current: True while this run still holds the instance's guard.
        settle: Called once when the run's driving ends (the instance settles its state).
    """

    core_started = False
    token: FunctionalWorkflowContinuationToken | None = None
    # Requests of this run's pause; handed to its continuation (not copied) when it is issued.
    pending_requests: dict[str, WorkflowEvent[Any]] | None = None
    # Streaming: core yields "started" and "in progress" before it calls user code; they are held
    # until the token is spent, so no event reaches the caller before that. None once released.
    held: list[WorkflowEvent[Any]] | None = None
    final_state: WorkflowRunState | None = None
    saw_failed = False
    span: Any = None  # the span this run reports continuation events to (_telemetry.continuation_started)

    def __init__(
        self,
        ticket: ResumeTicket,
        authority: InMemoryAuthority,
        core: _CoreFunctionalWorkflow,
        name: str,
        *,
        is_current: Callable[[WorkflowRun], bool],
        settle: Callable[[WorkflowRun], None],
    ) -> None:
        self.ticket = ticket
        self.authority = authority
        self.core = core
        self.name = name
        self.is_current = is_current
        self.settle = settle

    def release(self, *, dropped: bool) -> bool:
        """Settle the authority when the run lets go of the guard; True when core's replay state must go.

        A run that never reached user code hands its continuation back untouched. A dropped stream
        (closed or collected unfinished) whose core run started leaves core mid-run; a run that failed,
        was cancelled or closed after user code leaves replay state that must not be resumed. A run
        that finished cleanly or ended paused with a token keeps it.
        """
        handed_back = self.ticket.claimed is not None and self.authority.release(self.ticket)
        if dropped:
            return self.core_started
        if handed_back or not self.core_started:
            return False
        return self.final_state != WorkflowRunState.IDLE and self.token is None

    def record_request(self, event: WorkflowEvent[Any]) -> None:
        """Keep a ``request_info`` event of this run's pause (by its request id)."""
        request_id = event.request_id
        if request_id:
            if self.pending_requests is None:
                self.pending_requests = {}
            self.pending_requests[request_id] = event

    def observe(self, event: WorkflowEvent[Any]) -> int:
        """Streaming: record what one core event says about the run; return what the loop does with it."""
        kind = event.type
        held = self.held
        if kind == "status":
            state = event.state
            self.final_state = state
            if held is not None:
                held.append(event)
                return _CLAIM
            if state == _PAUSED and self.token is None and self.is_current(self):
                # Core saved the pause (its checkpoint too) before this last status: issue the token
                # before the caller sees the pause, so closing the stream on it keeps the pause.
                return _ISSUE
            return _EMIT
        if kind == "failed":
            self.saw_failed = True
        elif kind == "request_info":
            self.record_request(event)
        if held is not None:
            held.append(event)
            return _HOLD
        return _EMIT

    def claim(self) -> Awaitable[None] | None:
        """Right before user code: spend the token (with a store, claim it); None when nothing is to await."""
        ticket = self.ticket
        continuation, claim_hash = ticket.claimed, ticket.claim_hash
        pending = self.authority.claim(ticket)
        if continuation is None and claim_hash is None:
            return pending  # a fresh run or a restore: nothing spent
        if pending is None:
            continuation_spent(self.name, continuation, ticket.record, claim_hash, self.span)
            return None
        return self._spent_after(pending, continuation, claim_hash)

    async def _spent_after(self, claiming: Awaitable[None], continuation: Any, claim_hash: str | None) -> None:
        try:
            await claiming
        except ContinuationAuthorityError:
            continuation_rejected(self.name, SPENT)  # another resume (or an abandonment) won the claim
            raise
        continuation_spent(self.name, continuation, self.ticket.record, claim_hash, self.span)

    def issue(self) -> Awaitable[None] | None:
        """Issue the continuation of a saved pause (recorded in the store first, if there is one)."""
        pending = self.authority.record_pause(
            self.ticket,
            self.pending_requests or {},
            workflow_name=self.name,
            signature_hash=self.core.graph_signature_hash,
        )
        if pending is not None:
            return self._token_after(pending)
        self.token = self.ticket.issued.token()  # pyright: ignore[reportOptionalMemberAccess]
        continuation_issued(self.name, self.ticket.issued, self.span)  # pyright: ignore[reportArgumentType]
        return None

    async def _token_after(self, recording: Awaitable[None]) -> None:
        await recording
        self.token = self.ticket.issued.token()  # pyright: ignore[reportOptionalMemberAccess]
        continuation_issued(self.name, self.ticket.issued, self.span)  # pyright: ignore[reportArgumentType]

    async def stream(self, core_kwargs: dict[str, Any]) -> AsyncIterable[WorkflowEvent[Any]]:
        """Streaming run: core's events merged with live updates, the token spent before user code."""
        if not self.is_current(self):
            return  # closed before it was iterated: its guard is released, so never call core
        self.held = []
        self.span = continuation_started(self.name, self.ticket, core_kwargs["checkpoint_id"])
        try:
            pending = self.authority.before_core(self.ticket, core_kwargs)
            if pending is not None:
                await counted_refusal(pending, self.name)  # a store's checks: a refusal is counted
            core_stream = self.core.run(stream=True, **core_kwargs)
            self.core_started = True
            # User code runs in a task bound to a live channel, so emit_update() reaches the caller
            # while the workflow runs, merged in order with core's events (_live.stream_live).
            live_events = stream_live(core_stream, source=self.name)
            try:
                async for event in live_events:
                    action = self.observe(event)
                    if action == _HOLD:
                        continue
                    if action == _CLAIM:
                        pending = self.claim()
                        if pending is not None:
                            await pending
                        held, self.held = self.held or [], None
                        for early in held:
                            yield early
                        continue
                    if action == _ISSUE:
                        pending = self.issue()
                        if pending is not None:
                            await pending
                    yield event
                if self.final_state == WorkflowRunState.IDLE:
                    pending = self.authority.finish(self.ticket)
                    if pending is not None:
                        await pending
            except Exception as exc:
                if not self.saw_failed:
                    for failure in failure_surface(exc):
                        yield failure
                raise
            finally:
                await live_events.aclose()  # cancels the workflow task if the stream was abandoned
                await core_stream.close()
        finally:
            self.settle(self)

    async def collect(
        self, core_kwargs: dict[str, Any], include_status_events: bool, lease: object
    ) -> FunctionalWorkflowRunResult:
        """Non-streaming run: the token spent before user code, then core's own non-streaming collection.

        Core yields ``started`` and its first status before it calls user code. Those are pulled
        here, the authority claims (spends) the token, and then core's ``get_final_response()``
        runs the rest exactly as core's ``run(stream=False)`` does: its loop pulls the stream (user
        code runs in the first of those pulls) and its finalizer builds the result. Nobody reads
        before this returns, so the token of a pause is issued once core's stream has ended (core
        saved the pause and its checkpoint before its last status). The live collector is bound for
        the run (core's workflow task copies it); a run that emitted live updates gets them merged
        into the result in production order (:func:`_merge_live`). Core's ``ResponseStream`` closes
        itself when it ends or raises, so it is closed here only when a claim fails.
        """
        # ``lease`` stays referenced by this frame until the run ends; never ``del`` it here.
        if not self.is_current(self):
            return FunctionalWorkflowRunResult([], [])
        collector = LiveCollector(self.name)
        bound = live_channel.set(collector)  # LiveCollector.bind / unbind / close, inlined: one per run
        self.span = continuation_started(self.name, self.ticket, core_kwargs["checkpoint_id"])
        try:
            pending = self.authority.before_core(self.ticket, core_kwargs)
            if pending is not None:
                await counted_refusal(pending, self.name)  # a store's checks: a refusal is counted
            # Core's own non-streaming stream (ctx.is_streaming() False), not run(stream=True).
            core_stream = core_event_stream(self.core, include_status_events=include_status_events, **core_kwargs)
            self.core_started = True
            pull = core_stream.__anext__
            try:
                while (await pull()).type != "status":  # "started", then the first status: user code is next
                    pass
            except StopAsyncIteration:
                pass  # no status at all: nothing ran, core's result says so
            else:
                pending = self.claim()
                try:
                    if pending is not None:
                        await pending
                except BaseException:
                    await core_stream.close()
                    raise
            result = await core_stream.get_final_response()
            collector.closed = True  # core's stream ended: later updates are refused, as in a streaming run
            state = self.final_state = result.get_final_state()
            if state == _PAUSED:
                if self.is_current(self):
                    for event in result:
                        if event.type == "request_info":
                            self.record_request(event)
                    pending = self.issue()
                    if pending is not None:
                        await pending
            elif state == WorkflowRunState.IDLE:
                pending = self.authority.finish(self.ticket)
                if pending is not None:
                    await pending
        finally:
            live_channel.reset(bound)
            collector.closed = True
            self.settle(self)
        events: list[WorkflowEvent[Any]] = result
        if collector.entries:  # something was emitted: merge it in
            events = _merge_live(result, collector, include_status_events)
        return FunctionalWorkflowRunResult(events, result.status_timeline(), continuation_token=self.token)


def _merge_live(
    result: WorkflowRunResult, collector: LiveCollector, include_status_events: bool
) -> list[WorkflowEvent[Any]]:
    """Core's result events with the live updates of a non-streaming run merged in production order.

    Every live entry carries the events core collected before it (they go first, and are skipped
    when core's result has them again), so the entries go right after what core yielded before user
    code (its first status, when status events are included), followed by core's remaining events.
    """
    head = 1 if include_status_events and result and result[0].type == "status" else 0
    events: list[WorkflowEvent[Any]] = list(result[:head])
    events.extend(collector.drain())
    events.extend(event for event in result[head:] if collector.is_new(event))
    return events


def failure_surface(exc: Exception) -> list[WorkflowEvent[Any]]:
    """The failed event and FAILED status core omits when saving the pause checkpoint fails.

    Redacted as core's own failed event is: message and traceback only with sensitive data on.
    """
    details = WorkflowErrorDetails.from_exception(
        exc, include_sensitive_data=OBSERVABILITY_SETTINGS.SENSITIVE_DATA_ENABLED
    )
    return [
        WorkflowEvent("failed", details=details, origin=WorkflowEventSource.FRAMEWORK),
        WorkflowEvent("status", state=WorkflowRunState.FAILED, origin=WorkflowEventSource.FRAMEWORK),
    ]


def finalize_events(
    events: Sequence[WorkflowEvent[Any]],
    *,
    run: WorkflowRun,
    include_status_events: bool,
) -> FunctionalWorkflowRunResult:
    """Build the run result the way core's finalizer does, plus the continuation token."""
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


def check_run_arguments(message: Any, responses: Any, checkpoint_id: Any) -> None:
    """Reject a ``run(...)`` argument shape core would reject, before any authority check.

    Raises:
        ValueError: ``message`` with ``responses`` or ``checkpoint_id``, or none of the three.
        TypeError: ``responses`` is not a mapping with ``str`` keys, or ``checkpoint_id`` not a ``str``.
    """
    if message is not None and responses is not None:
        raise ValueError("Cannot provide both 'message' and 'responses'. Use one or the other.")
    if message is not None and checkpoint_id is not None:
        raise ValueError("Cannot provide both 'message' and 'checkpoint_id'. Use one or the other.")
    if message is None and responses is None and checkpoint_id is None:
        raise ValueError(
            "Must provide at least one of: 'message' (new run), 'responses' with 'continuation_token' "
            "(resume a pause), or 'checkpoint_id' (restore a checkpoint)."
        )
    if responses is not None:
        if not isinstance(responses, Mapping):
            raise TypeError(_RESPONSES_SHAPE)
        keys = cast("Mapping[Any, Any]", responses)
        # Key types collected in C; only keys that are not exactly str are checked one by one.
        if not set(map(type, keys)) <= _STR_ONLY and not all(isinstance(key, str) for key in keys):
            raise TypeError(_RESPONSES_SHAPE)
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise TypeError("'checkpoint_id' must be the string id returned by the checkpoint storage.")


def check_checkpoint_storage(storage: object, name: str) -> None:
    """Reject an argument that is not a core ``CheckpointStorage`` (None is allowed).

    Raises:
        TypeError: ``storage`` lacks the protocol's ``save``/``load`` methods.
    """
    if storage is not None and not all(callable(getattr(storage, method, None)) for method in ("save", "load")):
        raise TypeError(
            f"'{name}' must be a core CheckpointStorage (for example InMemoryCheckpointStorage() or "
            f"FileCheckpointStorage(path)), got {type(storage).__name__}."
        )
