"""Functional workflow definition, decorator, and the continuation-authority state machine.

``FunctionalWorkflow`` wraps exactly one instance of core's ``agent_framework.FunctionalWorkflow`` by
composition and drives it through its public ``run(..., stream=True)``. Core keeps doing replay,
step caching and checkpointing; this module decides who may resume a pause and when.
"""

from __future__ import annotations

import functools
import inspect
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
from ._core_compat import check_response_types
from ._durable import ContinuationStore, DurableAuthority, DurableRun
from ._errors import ContinuationAuthorityError, PendingContinuationError, WorkflowRunningError
from ._streaming import stream_live

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
    # Requests of the pauses this run resumed (the chain so far): kept on the next continuation.
    earlier_requests: dict[str, WorkflowEvent[Any]] = field(default_factory=dict[str, WorkflowEvent[Any]])
    durable: DurableRun | None = None  # set only when the instance has a continuation store


class _RunLease:
    """Weak-reference target that lives exactly as long as a non-streaming run's awaitable (internal)."""

    __slots__ = ("__weakref__",)


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
        TypeError: If ``func`` is not an async function.
    """

    def __init__(self, func: WorkflowFunc, *, name: str | None = None, description: str | None = None) -> None:
        if not inspect.iscoroutinefunction(func):
            shown = getattr(func, "__name__", type(func).__name__)
            raise TypeError(f"@workflow needs an async function (async def ...), got {shown!r}.")
        self._core_definition = _CoreFunctionalWorkflowDefinition(func, name=name, description=description)
        self.func: WorkflowFunc = func
        self.name: str = self._core_definition.name
        self.description: str | None = description
        functools.update_wrapper(self, func)  # pyright: ignore[reportArgumentType]

    def build(
        self,
        *,
        checkpoint_storage: CheckpointStorage | None = None,
        continuation_store: ContinuationStore | None = None,
    ) -> FunctionalWorkflow:
        """Build a stateful workflow instance for one logical caller or session.

        Keyword Args:
            checkpoint_storage: Default core ``CheckpointStorage`` (for example
                ``InMemoryCheckpointStorage`` or ``FileCheckpointStorage``); a run may override it
                (not with a ``continuation_store``).
            continuation_store: Makes continuation tokens durable and usable from any process that
                shares this store and ``checkpoint_storage`` (see :class:`ContinuationStore`).
                Requires ``checkpoint_storage``.

        Returns:
            A new :class:`FunctionalWorkflow` with no pending continuation.

        Raises:
            ValueError: ``continuation_store`` without ``checkpoint_storage``.
            TypeError: ``continuation_store`` does not implement :class:`ContinuationStore`, or
                ``checkpoint_storage`` is not a core ``CheckpointStorage``.
        """
        return FunctionalWorkflow(self, checkpoint_storage=checkpoint_storage, continuation_store=continuation_store)


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

    Without a continuation store the token is process-local and in-memory. With one
    (``build(..., continuation_store=...)``, see :class:`ContinuationStore`) any process sharing the
    store and the checkpoint storage can resume the pause, and the store's atomic claim right before
    resumed user code makes exactly one resume run, in memory or elsewhere. If the resumed code
    fails, is cancelled, or its process is killed after the claim, the token stays spent (at most
    once: nobody can tell how much of the resumed code ran); recover with a checkpoint restore or a
    fresh run.

    To check a token without starting a run (for example before mapping chat answers to
    ``responses``), use the read-only :meth:`verify_continuation_token` or, for a pause that may be
    held by another process, :meth:`verify_continuation_token_async`.

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
        continuation_store: ContinuationStore | None = None,
    ) -> None:
        check_checkpoint_storage(checkpoint_storage, "checkpoint_storage")
        # Durable hook: None keeps the in-memory behaviour exactly; raises on a store without storage.
        self._durable = (
            DurableAuthority(continuation_store, checkpoint_storage) if continuation_store is not None else None
        )
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
    def continuation_store(self) -> ContinuationStore | None:
        """The continuation store given to :meth:`FunctionalWorkflowDefinition.build`, if any."""
        return self._durable.store if self._durable is not None else None

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

    # ------------------------------------------------------------------ token checks (read-only)

    def verify_continuation_token(self, token: object) -> Mapping[str, WorkflowEvent[Any]]:
        """Check that ``token`` authorises a resume of the continuation this instance holds in memory.

        Read-only: nothing is claimed, spent or changed, whatever the outcome. Use it to validate a
        token before looking at anything that depends on the pause, for example to map chat answers
        to ``responses`` by each request's ``response_type`` (DESIGN.md rule 2: authority before
        correlation). Acceptance is decided again by :meth:`run`, which also spends the token.

        With a continuation store this checks only the in-memory copy: a token of a pause this
        process never held is rejected here (use :meth:`verify_continuation_token_async`), and a
        held token that another process has already resumed still passes here and is rejected by
        the store's claim inside :meth:`run`.

        Args:
            token: Whatever the caller presented as a continuation token.

        Returns:
            Read-only mapping request id -> ``request_info`` event of the pending continuation.

        Raises:
            ContinuationAuthorityError: Nothing unclaimed is pending here, or the token is missing,
                malformed or wrong (one fixed message for every cause; constant-time compare).

        Examples:
            .. code-block:: python

                pending = wf.verify_continuation_token(token)
                responses = {request_id: True for request_id in pending}
                done = await wf.run(responses=responses, continuation_token=token)
        """
        continuation = verify_token(token, self._continuation)
        return MappingProxyType(dict(continuation.pending_requests))

    async def verify_continuation_token_async(self, token: object) -> Mapping[str, WorkflowEvent[Any]]:
        """Check ``token`` like :meth:`verify_continuation_token`, also for pauses held by other processes.

        Read-only: nothing is claimed, spent or changed, in this process or in the store. Without a
        continuation store this is :meth:`verify_continuation_token`. With one:

        * a token this instance holds in memory must pass the in-memory check, and the store must
          still accept it (``issued`` and unexpired), so a pause already resumed elsewhere fails;
        * any other token is looked up in the store by the hash of its secret and must belong to
          this workflow (name and signature hash) and be ``issued`` and unexpired; the pause's
          ``request_info`` events are then loaded from its checkpoint
          (``checkpoint.pending_request_info_events``), with their ``response_type``.

        The store's claim, right before resumed user code in :meth:`run`, still decides which
        resume runs: a token that passes here can lose that claim to another process.

        Args:
            token: Whatever the caller presented as a continuation token.

        Returns:
            Read-only mapping request id -> ``request_info`` event of the pause the token names.

        Raises:
            ContinuationAuthorityError: The token is missing, malformed, unknown, of another
                workflow or version, claimed, abandoned or expired (one fixed message).
            Exception: Whatever the store or the checkpoint storage raises when it cannot be read
                (for example when the pause's checkpoint was deleted); nothing changes.
        """
        durable = self._durable
        if durable is None:
            return self.verify_continuation_token(token)
        signature_hash = self._core.graph_signature_hash
        if durable.names_continuation(token, self._continuation):
            pending = self.verify_continuation_token(token)
            await durable.record_for_token(token, workflow_name=self.name, signature_hash=signature_hash)
            return pending
        record = await durable.record_for_token(token, workflow_name=self.name, signature_hash=signature_hash)
        return MappingProxyType(await durable.pending_requests(record))

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

        With a continuation store, a token this process does not hold (the pause happened in another
        process, or before a restart) is the one exception to "every check here": ``run`` checks
        only its shape synchronously, and the store lookup, which is asynchronous, happens inside
        the run (on the first ``await``, or the first iteration of the stream), still before any
        user code and in the same order: authority (the same :class:`ContinuationAuthorityError`
        and fixed message), then the pending conflict, then correlation. A resume that loses the
        store's claim to another process (or to an abandonment) also fails there, with the
        authority error; when streaming, that loss follows a ``failed`` event and ``FAILED`` status.

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
            TypeError: ``responses`` is not a mapping with string keys, ``checkpoint_id`` is not a
                string, or ``checkpoint_storage`` is not a core ``CheckpointStorage``.
            ContinuationAuthorityError: A response-only resume without valid authority (one fixed
                message for every cause).
            PendingContinuationError: New input or a checkpoint restore while a continuation is pending.
            WorkflowRunningError: The instance is already running.
            ValueError: With a continuation store, a per-run ``checkpoint_storage`` other than the
                instance's (every pause must be restorable by every worker).
        """
        claimed = self._accept(message, responses, continuation_token, checkpoint_id, checkpoint_storage)
        run = _ActiveRun(claimed=claimed)
        # Everything that can fail (copying the caller's responses, the store's checks) happens
        # before this instance's state changes, so a rejected call leaves it exactly as it was.
        core_kwargs: dict[str, Any] = {
            "message": message,
            "responses": dict(responses) if responses is not None else None,
            "checkpoint_id": checkpoint_id,
            "checkpoint_storage": checkpoint_storage,
            **kwargs,
        }
        if self._durable is not None:  # durable hook: a resume not held in memory is checked in the run
            remote = responses is not None and checkpoint_id is None and claimed is None
            run.durable = self._durable.start_run(
                claimed=claimed,
                remote_token=continuation_token if remote else None,
                responses=responses,
                checkpoint_storage=checkpoint_storage,
            )
        result: ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] | Awaitable[FunctionalWorkflowRunResult]
        if stream:
            response_stream: ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] = ResponseStream(
                self._drive(run, core_kwargs, live=True),
                finalizer=functools.partial(_finalize_events, run=run, include_status_events=include_status_events),
                # Runs on close(), also of a stream that was never iterated (its generator never ran).
                cleanup_hooks=[functools.partial(self._release_dropped_run, run)],
            )
            weakref.finalize(response_stream, self._release_dropped_run, run).atexit = False
            result = response_stream
        else:
            # Non-streaming: drain _drive directly; a ResponseStream layer would only add cost. The
            # lease lives only in the coroutine's frame, so an awaitable that is dropped, or closed
            # without being awaited, releases the run at once.
            lease = _RunLease()
            weakref.finalize(lease, self._release_dropped_run, run).atexit = False
            result = self._collect(run, core_kwargs, include_status_events, lease)
        if claimed is not None:
            claimed.claimed = True
        self._active = run
        return result

    async def _collect(
        self, run: _ActiveRun, core_kwargs: dict[str, Any], include_status_events: bool, lease: _RunLease
    ) -> FunctionalWorkflowRunResult:
        """Non-streaming run: drain :meth:`_drive` and build the result, without a ResponseStream."""
        # ``lease`` stays referenced by this frame until the run ends; never ``del`` it here.
        events = [event async for event in self._drive(run, core_kwargs, live=False)]
        return _finalize_events(events, run=run, include_status_events=include_status_events)

    def _accept(
        self,
        message: Any | None,
        responses: Mapping[str, Any] | None,
        continuation_token: Mapping[str, Any] | None,
        checkpoint_id: str | None,
        checkpoint_storage: CheckpointStorage | None = None,
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
        check_checkpoint_storage(checkpoint_storage, "checkpoint_storage")
        resume = responses is not None and checkpoint_id is None
        if not resume and continuation_token is not None:
            raise ValueError(
                "'continuation_token' is only used with 'responses' (a response-only resume); a fresh run "
                "or a checkpoint restore needs none. Drop the token from this call."
            )
        if (
            resume
            and self._durable is not None
            and not self._durable.names_continuation(continuation_token, self._continuation)
        ):
            # Durable hook: a token this process does not hold. Only its shape is checked here (run()
            # must stay synchronous); the store lookup, conflict and correlation happen inside the run.
            DurableAuthority.check_shape(continuation_token)
            continuation = None
        elif resume:
            continuation = verify_token(continuation_token, self._continuation)
            assert responses is not None
            if not any(request_id in continuation.pending_requests for request_id in responses):
                raise ValueError(
                    "None of the responses answers a pending request. Key each answer by a request id of the "
                    f"pause: {sorted(continuation.pending_requests)!r}. The continuation is still pending."
                )
            # Earlier rounds' answers too: core replays from the top and checks every answer it reaches.
            check_response_types(responses, continuation.known_requests())
        elif self.has_pending_continuation:
            raise PendingContinuationError()
        else:
            continuation = None
        if checkpoint_id is not None and checkpoint_storage is None and self._checkpoint_storage is None:
            raise ValueError(
                "Cannot restore a checkpoint without checkpoint storage. Pass checkpoint_storage=... to build() "
                "or to this run (the storage that saved the checkpoint)."
            )
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
            RuntimeError: The instance has a continuation store: abandoning must also update the
                store, so use :meth:`abandon_continuation_async`. Nothing changes.
        """
        if self._durable is not None:  # durable hook: the store can only be updated asynchronously
            raise RuntimeError(
                "This workflow instance records continuations in a continuation store, so abandoning must update "
                "the store too: call `await workflow.abandon_continuation_async(token)` (or force=True) instead."
            )
        if not force:
            verify_token(token, self._continuation)
        if self._active is not None:
            raise WorkflowRunningError(
                "Cannot abandon while a run is in progress. Wait for it to finish or close its stream, then retry."
            )
        self._continuation = None
        self._core = self._new_core()

    async def abandon_continuation_async(
        self,
        token: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
    ) -> None:
        """Abandon a pending continuation, in this process and in the continuation store.

        Without a continuation store this is :meth:`abandon_continuation`. With one, it works from
        any process that shares the store: the store marks the record ``abandoned`` atomically, so
        a concurrent resume (here or in another process) and this call cannot both succeed.

        * ``token`` held by this instance: the store must still accept it (``issued``, not
          expired); then the local continuation and replay state are cleared. If the store says it
          is gone (resumed elsewhere, abandoned, expired), the local copy is dropped as stale and
          the authority error is raised.
        * ``token`` of a pause this process does not hold: the record must belong to this
          workflow (name and signature) and be ``issued`` and unexpired; it is marked abandoned.
          This instance is not changed.
        * ``force=True`` (owner-only, never expose it to untrusted callers): clears this instance's
          continuation and marks it abandoned in the store, and also abandons the record of
          ``token`` if one is given, even if it has expired. Problems are ignored, not raised.

        Args:
            token: The continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Owner recovery without authority (for a lost or expired token).

        Raises:
            ContinuationAuthorityError: Without ``force``: the token is missing, malformed, unknown,
                of another workflow, already claimed or abandoned, or expired.
            WorkflowRunningError: A run of this instance holds the continuation being abandoned.
        """
        durable = self._durable
        if durable is None:
            self.abandon_continuation(token, force=force)
            return
        local = self._continuation
        is_local = durable.names_continuation(token, local)  # implies local is not None
        if (is_local or force) and self._active is not None:
            raise WorkflowRunningError(
                "Cannot abandon while a run is in progress. Wait for it to finish or close its stream, then retry."
            )
        if local is not None and (is_local or force):
            guard = _ActiveRun()  # hold the run guard across the store call: no run may start meanwhile
            self._active = guard
            try:
                accepted = await durable.abandon_local(local, force=force)
            finally:
                if self._active is guard:
                    self._active = None
            if self._continuation is local:
                self._continuation = None
                self._core = self._new_core()
            if not accepted and not force:
                raise ContinuationAuthorityError()
        if is_local or (force and token is None):
            return
        await durable.abandon_remote(
            token, force=force, workflow_name=self.name, signature_hash=self._core.graph_signature_hash
        )

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

    # Durable hooks: no-ops without a continuation store (see _durable.py for the protocol and order).

    async def _durable_before_core(self, run: _ActiveRun, core_kwargs: dict[str, Any]) -> None:
        """Before core starts: verify a resume this process does not hold; route checkpoints via the recorder."""
        if self._durable is None or run.durable is None:
            return
        await self._durable.before_core(
            run.durable,
            core_kwargs,
            workflow_name=self.name,
            signature_hash=self._core.graph_signature_hash,
            local_pending=self._continuation if self.has_pending_continuation else None,
            drop_stale=self._drop_stale_continuation,
        )

    def _drop_stale_continuation(self, continuation: Continuation) -> None:
        """Forget a local continuation the store says is gone (resumed or abandoned elsewhere, expired)."""
        if self._continuation is continuation and not continuation.claimed:
            self._continuation = None
            self._core = self._new_core()

    async def _claim_in_store(self, run: _ActiveRun) -> None:
        """Right before resumed user code: claim the pause in the store (exactly one process wins)."""
        if self._durable is None or run.durable is None or await self._durable.claim(run.durable):
            return
        # The store says the pause is gone (claimed elsewhere, abandoned or expired): so is ours.
        self._spend(run)
        raise ContinuationAuthorityError()

    async def _record_in_store(self, run: _ActiveRun, continuation: Continuation) -> None:
        """Record a saved pause in the store before its token is handed out (a failure means no token)."""
        if self._durable is None or run.durable is None:
            return
        await self._durable.record(
            run.durable, continuation, workflow_name=self.name, signature_hash=self._core.graph_signature_hash
        )

    async def _issue(self, run: _ActiveRun) -> None:
        """Issue the continuation of a saved pause (recorded in the store first, if there is one)."""
        continuation = issue_continuation(run.pending_requests, run.earlier_requests)
        await self._record_in_store(run, continuation)
        self._continuation = continuation
        run.token = continuation.token()

    def _spend(self, run: _ActiveRun) -> None:
        """Spend the claimed continuation: called right before the resumed user code runs."""
        if run.claimed is not None:
            run.earlier_requests = run.claimed.known_requests()
            if self._continuation is run.claimed:
                self._continuation = None
        run.claimed = None

    def _release_dropped_run(self, run: _ActiveRun) -> None:
        """Free the instance if a run's stream was closed or garbage-collected unfinished.

        Runs as the stream's cleanup hook (``close()``, ``async with``, end of consumption) and as
        its weak finalizer; a no-op once ``_end_run`` settled the run.
        """
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

    async def _drive(
        self, run: _ActiveRun, core_kwargs: dict[str, Any], live: bool = True
    ) -> AsyncIterable[WorkflowEvent[Any]]:
        """Run core's stream, spend the token before user code, and issue a new one on a saved pause."""
        if self._active is not run:
            return  # closed before it was iterated: its guard is released, so never call core
        completed = False
        try:
            await self._durable_before_core(run, core_kwargs)
            core_stream = self._core.run(stream=True, **core_kwargs)
            run.core_started = True
            held: list[WorkflowEvent[Any]] | None = []
            final_state: WorkflowRunState | None = None
            saw_failed = False
            # User code runs in a task bound to a live channel, so emit_update() reaches the caller
            # while the workflow runs, merged in order with core's events (_streaming.stream_live).
            live_events = stream_live(core_stream, source=self.name, live=live)
            try:
                async for event in live_events:
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
                        await self._claim_in_store(run)
                        self._spend(run)
                        for early in held:
                            yield early
                        held = None
                        continue
                    if (
                        event.type == "status"
                        and event.state == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
                        and self._active is run
                        and run.token is None
                    ):
                        # Core saved the pause (its checkpoint too) before this last status: issue the
                        # token before the caller sees the pause, so closing the stream on it keeps it.
                        await self._issue(run)
                    yield event
            except Exception as exc:
                if not saw_failed:
                    # Core raises from its pause handler when saving the pause checkpoint fails,
                    # without a failed event: give the caller the normal failure surface. Redact as
                    # core's own failed event does: message and traceback only with sensitive data on.
                    details = WorkflowErrorDetails.from_exception(
                        exc, include_sensitive_data=OBSERVABILITY_SETTINGS.SENSITIVE_DATA_ENABLED
                    )
                    yield WorkflowEvent("failed", details=details, origin=WorkflowEventSource.FRAMEWORK)
                    yield WorkflowEvent("status", state=WorkflowRunState.FAILED, origin=WorkflowEventSource.FRAMEWORK)
                raise
            finally:
                await live_events.aclose()  # cancels the workflow task if the stream was abandoned
                await core_stream.close()
            completed = final_state == WorkflowRunState.IDLE or run.token is not None
        finally:
            self._end_run(run, completed=completed)


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
