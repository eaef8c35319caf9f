"""Functional workflow definition, decorator, and the continuation-authority state machine.

``FunctionalWorkflow`` wraps exactly one instance of core's ``agent_framework.FunctionalWorkflow`` by
composition and drives it through its public ``run(..., stream=True)``. Core keeps doing replay,
step caching and checkpointing; this module decides who may resume a pause and when.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, overload

from agent_framework import (
    CheckpointStorage,
    ResponseStream,
    WorkflowErrorDetails,
    WorkflowEvent,
    WorkflowEventSource,
    WorkflowRunResult,
    WorkflowRunState,
)
from agent_framework import FunctionalWorkflow as _CoreFunctionalWorkflow
from agent_framework import FunctionalWorkflowDefinition as _CoreFunctionalWorkflowDefinition
from agent_framework.observability import OBSERVABILITY_SETTINGS

from ._continuation import (
    Continuation,
    FunctionalWorkflowContinuationToken,
    issue_continuation,
    verify_token,
)
from ._errors import PendingContinuationError, WorkflowRunningError

if TYPE_CHECKING:
    from ._agent import FunctionalWorkflowAgent

WorkflowFunc = Callable[..., Awaitable[Any]]


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


@dataclass(eq=False, slots=True)
class _ActiveRun:
    """Bookkeeping of the one run that holds an instance's run guard (internal)."""

    claimed: Continuation | None = None
    core_started: bool = False
    token: FunctionalWorkflowContinuationToken | None = None
    pending_requests: dict[str, WorkflowEvent[Any]] = field(default_factory=dict[str, WorkflowEvent[Any]])


class FunctionalWorkflowDefinition:
    """Stateless workflow definition produced by :func:`workflow`; call :meth:`build` per caller.

    Wraps core's ``FunctionalWorkflowDefinition`` (which validates the function's signature: at
    most one parameter besides the ``RunContext``).

    Args:
        func: The async workflow function. Its first non-``RunContext`` parameter receives the
            ``message`` of :meth:`FunctionalWorkflow.run`.

    Keyword Args:
        name: Workflow name; defaults to ``func.__name__``.
        description: Optional human-readable description.

    Raises:
        ValueError: If the function declares more than one non-``RunContext`` parameter (core's rule).
        TypeError: If ``func`` is not callable.
    """

    def __init__(self, func: WorkflowFunc, *, name: str | None = None, description: str | None = None) -> None:
        if not callable(func):
            raise TypeError(f"@workflow needs an async function, got {type(func).__name__}.")
        self._core_definition = _CoreFunctionalWorkflowDefinition(func, name=name, description=description)
        self.func: WorkflowFunc = func
        self.name: str = self._core_definition.name
        self.description: str | None = description
        functools.update_wrapper(self, func)  # pyright: ignore[reportArgumentType]

    def build(self, *, checkpoint_storage: CheckpointStorage | None = None) -> FunctionalWorkflow:
        """Build a stateful workflow instance for one logical caller or session.

        Keyword Args:
            checkpoint_storage: Default core ``CheckpointStorage`` (for example
                ``InMemoryCheckpointStorage`` or ``FileCheckpointStorage``); a run may override it.

        Returns:
            A new :class:`FunctionalWorkflow` with no pending continuation.
        """
        return FunctionalWorkflow(self, checkpoint_storage=checkpoint_storage)


@overload
def workflow(func: WorkflowFunc, /) -> FunctionalWorkflowDefinition: ...


@overload
def workflow(
    *, name: str | None = None, description: str | None = None
) -> Callable[[WorkflowFunc], FunctionalWorkflowDefinition]: ...


def workflow(
    func: WorkflowFunc | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> FunctionalWorkflowDefinition | Callable[[WorkflowFunc], FunctionalWorkflowDefinition]:
    """Turn an async function into a :class:`FunctionalWorkflowDefinition`, bare or with options.

    The function is core's functional workflow: plain Python control flow, ``@step`` for cached
    and checkpointed work, ``ctx.request_info(...)`` to pause for a human.

    Replay hazard: on resume the function runs again from the top. A ``@step``'s body does not run
    again (its cached result is returned), but code outside steps does, so keep side effects in
    steps, and pass all answers so far when a workflow pauses more than once.

    Args:
        func: The async function (bare ``@workflow`` form).

    Keyword Args:
        name: Workflow name; defaults to the function's name.
        description: Optional description (shown by the agent adapter).

    Returns:
        A definition (bare form) or a decorator that makes one.

    Raises:
        ValueError: If the function declares more than one non-``RunContext`` parameter.

    Examples:
        .. code-block:: python

            from agent_framework_functional import RunContext, step, workflow


            @step
            async def draft(topic: str) -> str:
                return f"A short post about {topic}."


            @workflow(name="review")
            async def review(topic: str, ctx: RunContext) -> str:
                text = await draft(topic)
                feedback = await ctx.request_info({"draft": text}, response_type=str)
                return f"{text} ({feedback})"


            wf = review.build()
            paused = await wf.run("tea")
            done = await wf.run(
                responses={"auto::0": "ship it"}, continuation_token=paused.continuation_token
            )
    """
    if func is not None:
        return FunctionalWorkflowDefinition(func, name=name, description=description)

    def decorator(fn: WorkflowFunc) -> FunctionalWorkflowDefinition:
        return FunctionalWorkflowDefinition(fn, name=name, description=description)

    return decorator


class FunctionalWorkflow:
    """A functional workflow instance whose pauses can only be resumed with their continuation token.

    Build it with :meth:`FunctionalWorkflowDefinition.build`. It wraps one core
    ``FunctionalWorkflow`` and adds continuation authority (DESIGN.md, "FunctionalWorkflow contract"):

    * A run that pauses on ``ctx.request_info(...)`` returns ``continuation_token``, an opaque,
      single-use mapping. A response-only resume (``responses`` without ``checkpoint_id``) must
      present it; it is spent right before the resumed user code runs, and every pause issues a
      new one. A token is issued only when the pause's checkpoint (if storage is configured) saved.
    * One pending continuation per instance: new input or a checkpoint restore while it is pending
      raises :class:`PendingContinuationError`; :meth:`abandon_continuation` clears it.
    * Checkpoint restore (``checkpoint_id``) needs no token: checkpoint ids are locators, not
      credentials, so the host (or its storage adapter) must authorise access and isolate tenants.
    * One run at a time; a stream that is dropped (garbage-collected) unfinished releases the
      instance, and a stream that was never iterated leaves the pending continuation intact.

    The token is process-local and in-memory. If the resumed code fails or is cancelled, the token
    stays spent (at most once); recover with a checkpoint restore or a fresh run.

    Args:
        definition: The definition this instance runs.

    Keyword Args:
        checkpoint_storage: Default checkpoint storage for runs of this instance.

    Examples:
        .. code-block:: python

            wf = review.build(checkpoint_storage=InMemoryCheckpointStorage())
            paused = await wf.run("tea")
            request_id = paused.get_request_info_events()[0].request_id
            done = await wf.run(responses={request_id: "ok"}, continuation_token=paused.continuation_token)
            assert done.continuation_token is None
    """

    def __init__(
        self,
        definition: FunctionalWorkflowDefinition,
        *,
        checkpoint_storage: CheckpointStorage | None = None,
    ) -> None:
        self._definition = definition
        self._checkpoint_storage = checkpoint_storage
        self._core = self._new_core()
        self._continuation: Continuation | None = None
        self._active: _ActiveRun | None = None

    # ------------------------------------------------------------------ read-only views

    @property
    def name(self) -> str:
        """The workflow name."""
        return self._definition.name

    @property
    def description(self) -> str | None:
        """The workflow description, if any."""
        return self._definition.description

    @property
    def definition(self) -> FunctionalWorkflowDefinition:
        """The definition this instance was built from."""
        return self._definition

    @property
    def checkpoint_storage(self) -> CheckpointStorage | None:
        """The default checkpoint storage given to :meth:`FunctionalWorkflowDefinition.build`."""
        return self._checkpoint_storage

    @property
    def has_pending_continuation(self) -> bool:
        """True while a paused run waits for a resume that no accepted run has claimed yet."""
        return self._continuation is not None and not self._continuation.claimed

    @property
    def pending_request_ids(self) -> frozenset[str]:
        """Request ids of the pending continuation (empty when none is pending or a resume claimed it)."""
        if not self.has_pending_continuation:
            return frozenset()
        assert self._continuation is not None
        return frozenset(self._continuation.pending_requests)

    @property
    def pending_requests(self) -> Mapping[str, WorkflowEvent[Any]]:
        """Read-only mapping request id -> ``request_info`` event of the pending continuation."""
        if not self.has_pending_continuation:
            return MappingProxyType({})
        assert self._continuation is not None
        return MappingProxyType(dict(self._continuation.pending_requests))

    @property
    def is_running(self) -> bool:
        """True while a run holds this instance (from acceptance until its stream ends or is dropped)."""
        return self._active is not None

    # ------------------------------------------------------------------ run

    @overload
    def run(
        self,
        message: Any | None = None,
        *,
        stream: Literal[True],
        responses: Mapping[str, Any] | None = None,
        continuation_token: Mapping[str, Any] | None = None,
        checkpoint_id: str | None = None,
        checkpoint_storage: CheckpointStorage | None = None,
        include_status_events: bool = False,
        **kwargs: Any,
    ) -> ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult]: ...

    @overload
    def run(
        self,
        message: Any | None = None,
        *,
        stream: Literal[False] = ...,
        responses: Mapping[str, Any] | None = None,
        continuation_token: Mapping[str, Any] | None = None,
        checkpoint_id: str | None = None,
        checkpoint_storage: CheckpointStorage | None = None,
        include_status_events: bool = False,
        **kwargs: Any,
    ) -> Awaitable[FunctionalWorkflowRunResult]: ...

    def run(
        self,
        message: Any | None = None,
        *,
        stream: bool = False,
        responses: Mapping[str, Any] | None = None,
        continuation_token: Mapping[str, Any] | None = None,
        checkpoint_id: str | None = None,
        checkpoint_storage: CheckpointStorage | None = None,
        include_status_events: bool = False,
        **kwargs: Any,
    ) -> ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] | Awaitable[FunctionalWorkflowRunResult]:
        """Start, resume, or restore a run, as core's ``run`` does, with continuation authority.

        Every check happens here, synchronously, so a rejected call raises at the call site (also
        with ``stream=True``) and changes nothing. In order: argument shape; for a response-only
        resume, the token (before anything about the responses is looked at); a pending
        continuation blocks new input and checkpoint restores; at least one response key must
        name a pending request; the instance must not be running.

        Args:
            message: Input for a fresh run (the workflow function's message parameter).

        Keyword Args:
            stream: True for a ``ResponseStream`` of ``WorkflowEvent``; False for an awaitable result.
            responses: Answers keyed by request id. Without ``checkpoint_id`` this is a
                response-only resume and needs ``continuation_token``. Pass all answers so far on
                multi-round pauses (core replays from the top; extra keys are fine).
            continuation_token: The token from the paused run's result.
            checkpoint_id: Restore this checkpoint (optionally with ``responses``); needs no token.
            checkpoint_storage: Checkpoint storage for this run, overriding the instance default.
            include_status_events: Non-streaming only: keep status events in the result list.
            **kwargs: Forwarded unchanged to core's ``run`` (available to steps as run kwargs).

        Returns:
            ``Awaitable[FunctionalWorkflowRunResult]`` or
            ``ResponseStream[WorkflowEvent, FunctionalWorkflowRunResult]``; the result's
            ``continuation_token`` is set only when the run ended paused.

        Raises:
            ValueError: Wrong argument shape (as core), or no response key names a pending request.
            TypeError: ``responses`` is not a mapping with string keys.
            ContinuationAuthorityError: A response-only resume without valid authority (one fixed
                message for every cause).
            PendingContinuationError: New input or a checkpoint restore while a continuation is pending.
            WorkflowRunningError: The instance is already running.
        """
        claimed = self._accept(message, responses, continuation_token, checkpoint_id)
        run = _ActiveRun(claimed=claimed)
        # Everything that can fail (copying the caller's responses) happens before the state changes.
        core_kwargs: dict[str, Any] = {
            "message": message,
            "responses": dict(responses) if responses is not None else None,
            "checkpoint_id": checkpoint_id,
            "checkpoint_storage": checkpoint_storage,
            **kwargs,
        }
        response_stream: ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] = ResponseStream(
            self._drive(run, core_kwargs),
            finalizer=functools.partial(_finalize_events, run=run, include_status_events=include_status_events),
            # Runs on close(), also of a stream that was never iterated (its generator never ran).
            cleanup_hooks=[functools.partial(self._release_dropped_run, run)],
        )
        finalizer = weakref.finalize(response_stream, self._release_dropped_run, run)
        finalizer.atexit = False
        if claimed is not None:
            claimed.claimed = True
        self._active = run
        if stream:
            return response_stream
        return response_stream.get_final_response()

    def _accept(
        self,
        message: Any | None,
        responses: Mapping[str, Any] | None,
        continuation_token: Mapping[str, Any] | None,
        checkpoint_id: str | None,
    ) -> Continuation | None:
        """Apply the acceptance checks in contract order; return the continuation a resume claims."""
        if message is not None and responses is not None:
            raise ValueError("Cannot provide both 'message' and 'responses'. Use one or the other.")
        if message is not None and checkpoint_id is not None:
            raise ValueError("Cannot provide both 'message' and 'checkpoint_id'. Use one or the other.")
        if message is None and responses is None and checkpoint_id is None:
            raise ValueError(
                "Must provide at least one of: 'message' (new run), 'responses' with 'continuation_token' "
                "(resume a pause), or 'checkpoint_id' (restore a checkpoint)."
            )
        if responses is not None and not (
            isinstance(responses, Mapping) and all(isinstance(key, str) for key in responses)  # pyright: ignore[reportUnknownVariableType,reportUnnecessaryIsInstance]
        ):
            raise TypeError("'responses' must be a mapping from request id (str) to the answer for that request.")
        if checkpoint_id is not None and not isinstance(checkpoint_id, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError("'checkpoint_id' must be the string id returned by the checkpoint storage.")
        resume = responses is not None and checkpoint_id is None
        if not resume and continuation_token is not None:
            raise ValueError(
                "'continuation_token' is only used with 'responses' (a response-only resume); a fresh run "
                "or a checkpoint restore needs none. Drop the token from this call."
            )
        if resume:
            continuation = verify_token(continuation_token, self._continuation)
            assert responses is not None
            if not any(request_id in continuation.pending_requests for request_id in responses):
                raise ValueError(
                    "None of the responses answers a pending request. Key each answer by a request id of the "
                    f"pause: {sorted(continuation.pending_requests)!r}. The continuation is still pending."
                )
        elif self.has_pending_continuation:
            raise PendingContinuationError()
        else:
            continuation = None
        if self._active is not None:
            raise WorkflowRunningError()
        return continuation

    # ------------------------------------------------------------------ abandonment

    def abandon_continuation(
        self,
        token: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
    ) -> None:
        """Drop the pending continuation and all replay state, so fresh runs are allowed again.

        Clears the retained message, step cache, state and pending request ids by replacing the
        wrapped core instance with a fresh one (DESIGN.md: no core internals are touched).
        Checkpoints already saved in storage are not deleted.

        Args:
            token: The current continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Clear without a token. Owner-only recovery for a lost token: hosts must never
                expose this to untrusted callers, since it lets anyone discard a pending review.

        Raises:
            ContinuationAuthorityError: Without ``force``, when the token is missing or wrong, or
                nothing is pending. Nothing changes.
            WorkflowRunningError: A run is in progress (including an accepted resume).
        """
        if not force:
            verify_token(token, self._continuation)
        if self._active is not None:
            raise WorkflowRunningError(
                "Cannot abandon while a run is in progress. Wait for it to finish or close its stream, then retry."
            )
        self._continuation = None
        self._core = self._new_core()

    # ------------------------------------------------------------------ agent

    def as_agent(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        **kwargs: Any,
    ) -> FunctionalWorkflowAgent:
        """Wrap this instance as a :class:`FunctionalWorkflowAgent` (a core ``BaseAgent``).

        Args:
            name: Agent name; defaults to the workflow name.

        Keyword Args:
            description: Agent description; defaults to the workflow description.
            **kwargs: Passed to :class:`FunctionalWorkflowAgent` (for example ``id``,
                ``context_providers``); unknown names raise ``TypeError`` there.

        Returns:
            An agent bound to this workflow instance.
        """
        from ._agent import FunctionalWorkflowAgent

        return FunctionalWorkflowAgent(self, name=name, description=description, **kwargs)

    # ------------------------------------------------------------------ internals

    def _new_core(self) -> _CoreFunctionalWorkflow:
        return self._definition._core_definition.build(checkpoint_storage=self._checkpoint_storage)  # pyright: ignore[reportPrivateUsage]

    def _spend(self, run: _ActiveRun) -> None:
        """Spend the claimed continuation: called right before the resumed user code runs."""
        if run.claimed is not None and self._continuation is run.claimed:
            self._continuation = None
        run.claimed = None

    def _release_dropped_run(self, run: _ActiveRun) -> None:
        """Weak finalizer and cleanup hook of a run's stream: free the instance if it ended unfinished."""
        if self._active is not run:
            return
        if run.claimed is not None:
            run.claimed.claimed = False  # never reached user code: the continuation stays valid
            run.claimed = None
        if run.core_started:
            # The dropped core stream is only closed later by the event loop; do not wait for it.
            self._core = self._new_core()
        self._active = None

    def _end_run(self, run: _ActiveRun, *, completed: bool) -> None:
        """Settle the instance after a run's stream finished, failed, or was closed."""
        if self._active is not run:
            return  # already released by the weak finalizer; a newer run may own the instance
        if run.claimed is not None:
            # Ended before the resumed user code: hand the continuation back untouched.
            run.claimed.claimed = False
            run.claimed = None
        elif run.token is None and not completed and run.core_started:
            # Failed, cancelled or closed after user code ran: drop core's replay state.
            self._core = self._new_core()
        self._active = None

    async def _drive(self, run: _ActiveRun, core_kwargs: dict[str, Any]) -> AsyncIterable[WorkflowEvent[Any]]:
        """Run core's stream, spend the token before user code, and issue a new one on a saved pause."""
        if self._active is not run:
            return  # closed before it was iterated: its guard is released, so never call core
        completed = False
        try:
            core_stream = self._core.run(stream=True, **core_kwargs)
            run.core_started = True
            held: list[WorkflowEvent[Any]] | None = []
            final_state: WorkflowRunState | None = None
            saw_failed = False
            try:
                async for event in core_stream:
                    if event.type == "status":
                        final_state = event.state
                    elif event.type == "failed":
                        saw_failed = True
                    elif event.type == "request_info" and event.request_id:
                        run.pending_requests[event.request_id] = event
                    if held is not None:
                        # Core yields "started" and "in progress" before it calls user code; hold
                        # them so the token is spent before any event can reach the caller.
                        held.append(event)
                        if event.type != "status":
                            continue
                        self._spend(run)
                        for early in held:
                            yield early
                        held = None
                        continue
                    yield event
            except Exception as exc:
                if not saw_failed:
                    # Core raises from its pause handler when saving the pause checkpoint fails,
                    # without a failed event: give the caller the normal failure surface.
                    # Redacted exactly as core redacts its own failed events.
                    details = WorkflowErrorDetails.from_exception(
                        exc, include_sensitive_data=OBSERVABILITY_SETTINGS.SENSITIVE_DATA_ENABLED
                    )
                    yield WorkflowEvent("failed", details=details, origin=WorkflowEventSource.FRAMEWORK)
                    yield WorkflowEvent(
                        "status", state=WorkflowRunState.FAILED, origin=WorkflowEventSource.FRAMEWORK
                    )
                raise
            finally:
                await core_stream.close()
            if final_state == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS and self._active is run:
                continuation = issue_continuation(run.pending_requests)
                self._continuation = continuation
                run.token = continuation.token()
            completed = final_state == WorkflowRunState.IDLE or run.token is not None
        finally:
            self._end_run(run, completed=completed)


def _finalize_events(
    events: Sequence[WorkflowEvent[Any]],
    *,
    run: _ActiveRun,
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
