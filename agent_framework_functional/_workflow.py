"""FunctionalWorkflow: one workflow instance, its run guard, and the driving of core's engine.

It wraps one core ``agent_framework.FunctionalWorkflow`` by composition and drives it through its
public ``run(..., stream=True)``; core keeps replay, step caching and checkpointing. Its authority
strategy (``_authority`` / ``_store_authority``) decides who may resume, at fixed points of a run.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Awaitable, Mapping, Sequence
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, overload

from agent_framework import CheckpointStorage, ResponseStream, WorkflowEvent
from agent_framework import FunctionalWorkflow as _CoreFunctionalWorkflow

from ._abandon import ContinuationAbandonment
from ._authority import ResumeTicket, VerifiedContinuation
from ._core_compat import build_core, functional_workflows_experimental
from ._errors import ContinuationAuthorityError, WorkflowRunningError
from ._run import (
    FunctionalWorkflowRunResult,
    WorkflowRun,
    check_checkpoint_storage,
    check_run_arguments,
    finalize_events,
)
from ._store_authority import make_authority

if TYPE_CHECKING:
    from ._agent import FunctionalWorkflowAgent
    from ._definition import FunctionalWorkflowDefinition
    from ._store import ContinuationStore


class _RunLease:
    """Held only by a non-streaming run's coroutine frame: ``__del__`` frees the run if it never started (internal)."""

    __slots__ = ("_run", "_workflow")

    def __init__(self, workflow: FunctionalWorkflow, run: WorkflowRun) -> None:
        self._workflow, self._run = workflow, run

    def __del__(self) -> None:
        if self._workflow._active is self._run:  # pyright: ignore[reportPrivateUsage]
            self._workflow._release_dropped_run(self._run)  # pyright: ignore[reportPrivateUsage]


@functional_workflows_experimental
class FunctionalWorkflow(ContinuationAbandonment):
    """A functional workflow instance whose pauses can only be resumed with their continuation token.

    Build it with :meth:`FunctionalWorkflowDefinition.build`. It wraps one core ``FunctionalWorkflow``
    and adds continuation authority (README, "The rules"): a run that pauses on ``ctx.request_info``
    returns ``continuation_token``, opaque and single-use, which a response-only resume must present
    (spent right before the resumed code runs; every pause issues a new one, only once its checkpoint
    saved); one pending continuation per instance (new input or a restore meanwhile raises
    :class:`PendingContinuationError`; :meth:`abandon_continuation` clears it); a checkpoint restore
    needs no token (checkpoint ids are locators, so the host authorises access); one run at a time,
    and a dropped stream releases the instance.

    With a continuation store (``build(..., continuation_store=...)``) any process sharing the store
    and the checkpoint storage can resume the pause, and the store's atomic claim makes exactly one
    resume run. If resumed code fails, is cancelled or its process dies after the claim, the token
    stays spent (at most once); recover with a checkpoint restore or a fresh run. To check a token
    without a run, use :meth:`verify_continuation_token` (or ``..._async`` for pauses held elsewhere).

    Args:
        definition: The definition this instance runs.

    Keyword Args:
        checkpoint_storage: Default checkpoint storage for runs of this instance.
        continuation_store: Shares pauses across processes (see ``build``).
        continuation_ttl: How long a pause stays resumable (see ``build``); past it the pause is
            dropped on the next look (its token refused, its checkpoint deleted).

    Examples:
        .. code-block:: python

            wf = review.build(checkpoint_storage=InMemoryCheckpointStorage())
            paused = await wf.run("tea")
            request_id = paused.get_request_info_events()[0].request_id
            done = await wf.run(responses={request_id: "ok"}, continuation_token=paused.continuation_token)
            assert done.continuation_token is None
    """

    # __dict__: functools.update_wrapper gives the instance the function's name and docstring, as core's.
    __slots__ = ("__dict__", "__weakref__", "_active", "_authority", "_checkpoint_storage", "_core", "_definition")

    def __init__(
        self,
        definition: FunctionalWorkflowDefinition,
        *,
        checkpoint_storage: CheckpointStorage | None = None,
        continuation_store: ContinuationStore | None = None,
        continuation_ttl: float | timedelta | None = None,
    ) -> None:
        check_checkpoint_storage(checkpoint_storage, "checkpoint_storage")
        self._definition = definition
        self._checkpoint_storage = checkpoint_storage
        # Raises on a store that is not one, or a store without checkpoint storage.
        self._authority = make_authority(
            continuation_store,
            checkpoint_storage,
            self._reset_core,
            self._identity,
            definition.keep_checkpoints,
            continuation_ttl,
        )
        self._core = self._new_core()
        self._active: WorkflowRun | None = None
        functools.update_wrapper(self, definition.func)  # pyright: ignore[reportArgumentType]

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
    def graph_signature_hash(self) -> str:
        """Core's signature hash of the workflow function and the steps it reaches.

        Checkpoints record it; a checkpoint restores only into the same hash (core's rule), and a
        continuation store checks it before a resume from another worker.
        """
        return self._core.graph_signature_hash

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
        return self._authority.store

    @property
    def continuation_ttl(self) -> float:
        """Seconds a pause stays resumable: its token, the agent's live instance and its checkpoint.

        The continuation store's ``ttl_seconds`` with a store, else ``build(continuation_ttl=...)``
        (default 24 hours). README "Durable continuations" says what expires when.
        """
        return self._authority.ttl

    @property
    def has_pending_continuation(self) -> bool:
        """True while a paused run waits for a resume that no accepted run has claimed yet."""
        return self._authority.has_pending

    @property
    def pending_request_ids(self) -> frozenset[str]:
        """Request ids of the pending continuation (empty when none is pending or a resume claimed it)."""
        return frozenset(self._authority.pending_requests())

    @property
    def pending_requests(self) -> Mapping[str, WorkflowEvent[Any]]:
        """Read-only mapping request id -> ``request_info`` event of the pending continuation."""
        return MappingProxyType(dict(self._authority.pending_requests()))

    @property
    def is_running(self) -> bool:
        """True while a run holds this instance (from acceptance until its stream ends or is dropped)."""
        return self._active is not None

    # ------------------------------------------------------------------ token checks (read-only)

    def verify_continuation_token(self, token: object) -> VerifiedContinuation:
        """Check that ``token`` authorises a resume of the continuation this instance holds in memory.

        Read-only: nothing is claimed, spent or changed. Use it to check a token before looking at
        anything that depends on the pause (authority before correlation, AGENTS.md invariant 2);
        :meth:`run` decides acceptance again and spends the token. With a continuation store only the
        in-memory copy is checked (use :meth:`verify_continuation_token_async` for pauses held
        elsewhere; the store's claim in :meth:`run` still refuses a pause resumed elsewhere).

        Args:
            token: Whatever the caller presented as a continuation token.

        Returns:
            A :class:`VerifiedContinuation`: the read-only mapping request id -> ``request_info``
            event of the pending continuation, which :meth:`run` also accepts as ``continuation_token``.

        Raises:
            ContinuationAuthorityError: Nothing unclaimed is pending here, or the token is missing,
                malformed or wrong (one fixed message for every cause; constant-time compare).

        Examples:
            .. code-block:: python

                pending = wf.verify_continuation_token(token)
                done = await wf.run(responses={rid: True for rid in pending}, continuation_token=token)
        """
        try:
            return self._authority.verify(token)
        except ContinuationAuthorityError as exc:
            self._note_rejected(exc, token)
            raise

    async def verify_continuation_token_async(self, token: object) -> VerifiedContinuation:
        """Check ``token`` like :meth:`verify_continuation_token`, also for pauses held by other processes.

        Read-only, here and in the store. Without a continuation store this is
        :meth:`verify_continuation_token`. With one, a token held here must also still be ``issued``
        in the store; any other token is looked up by the hash of its secret, must belong to this
        workflow (name, signature hash and, for an agent session's instance, conversation) and be
        ``issued`` and unexpired, and the pause's ``request_info`` events are loaded from its
        checkpoint. The store's claim in :meth:`run` still decides which resume runs.

        Args:
            token: Whatever the caller presented as a continuation token.

        Returns:
            A :class:`VerifiedContinuation` of the pause the token names, with the store's record; pass
            it to :meth:`run` as ``continuation_token`` and the run reuses this check.

        Raises:
            ContinuationAuthorityError: The token is missing, malformed, unknown, of another
                workflow, version or conversation, claimed, abandoned or expired (one fixed message).
            Exception: Whatever the store or the checkpoint storage raises when it cannot be read
                (for example when the pause's checkpoint was deleted); nothing changes.
        """
        try:
            return await self._authority.verify_async(token)
        except ContinuationAuthorityError as exc:
            self._note_rejected(exc, token)
            raise

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
        resume, the token; a pending continuation blocks new input and restores; at least one
        response key must name a pending request, and each answer is converted to its
        ``response_type`` (JSON values too); the instance must not be running. The one exception:
        with a continuation store, a token this process does not hold is looked up in the store
        inside the run (first ``await`` or iteration), still before any user code and in the same
        order; a resume that loses the store's claim fails there too, with the authority error.

        Args:
            message: Input for a fresh run (the workflow function's message parameter).

        Keyword Args:
            stream: True for a ``ResponseStream`` of ``WorkflowEvent``; False for an awaitable result.
            responses: Answers keyed by request id. Without ``checkpoint_id`` this is a
                response-only resume and needs ``continuation_token``. Pass all answers so far on
                multi-round pauses (core replays from the top; extra keys are fine).
            continuation_token: The token from the paused run's result, or the
                :class:`VerifiedContinuation` that :meth:`verify_continuation_token` /
                :meth:`verify_continuation_token_async` of this instance returned for it (the run
                then reuses that check instead of reading the continuation store again).
            checkpoint_id: Restore this checkpoint (optionally with ``responses``); needs no token.
            checkpoint_storage: Checkpoint storage for this run, overriding the instance default.
            include_status_events: Non-streaming only: keep status events in the result list.
            **kwargs: Forwarded unchanged to core's ``run`` (available to steps as run kwargs).

        Returns:
            ``Awaitable[FunctionalWorkflowRunResult]`` or
            ``ResponseStream[WorkflowEvent, FunctionalWorkflowRunResult]``; the result's
            ``continuation_token`` is set only when the run ended paused.

        Raises:
            ValueError: Wrong argument shape (as core).
            ResponseMismatchError: No response key names a pending request, or an answer cannot be
                converted to its ``response_type`` (also a ``ValueError``; the message names the field);
                the continuation stays pending.
            TypeError: ``responses`` is not a mapping with string keys, ``checkpoint_id`` is not a
                string, or ``checkpoint_storage`` is not a core ``CheckpointStorage``.
            ContinuationAuthorityError: A response-only resume without valid authority (one fixed
                message for every cause).
            PendingContinuationError: New input or a checkpoint restore while a continuation is pending.
            WorkflowRunningError: The instance is already running.
            ValueError: With a continuation store, a per-run ``checkpoint_storage`` other than the
                instance's (every pause must be restorable by every worker).
        """
        try:
            ticket = self._accept(message, responses, continuation_token, checkpoint_id, checkpoint_storage)
        except Exception as exc:
            self._note_rejected(exc, continuation_token)
            raise
        run = self._new_run(ticket)
        # Everything that can fail (copying the caller's responses) happens before this instance's
        # state changes, so a rejected call leaves it exactly as it was.
        core_kwargs: dict[str, Any] = {
            "message": message,
            # A resume's answers as its authority converted them (each to its request's response_type).
            "responses": dict(ticket.responses or responses) if responses is not None else None,
            "checkpoint_id": checkpoint_id,
            "checkpoint_storage": checkpoint_storage,
            **kwargs,
        }
        result: ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] | Awaitable[FunctionalWorkflowRunResult]
        if stream:
            response_stream: ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] = ResponseStream(
                run.stream(core_kwargs),
                finalizer=functools.partial(finalize_events, run=run, include_status_events=include_status_events),
                # Runs on close(), also of a stream that was never iterated (its generator never ran).
                cleanup_hooks=[functools.partial(self._release_dropped_run, run)],
            )
            weakref.finalize(response_stream, self._release_dropped_run, run).atexit = False
            result = response_stream
        else:
            # Non-streaming: one coroutine drives core directly (no ResponseStream or generator layer).
            # The lease lives only in the coroutine's frame, so an awaitable that is dropped, or closed
            # without being awaited, releases the run at once.
            result = run.collect(core_kwargs, include_status_events, _RunLease(self, run))
        self._authority.begin(ticket)
        self._active = run
        return result

    def _accept(
        self,
        message: Any | None,
        responses: Mapping[str, Any] | None,
        continuation_token: Mapping[str, Any] | None,
        checkpoint_id: str | None,
        checkpoint_storage: CheckpointStorage | None,
    ) -> ResumeTicket:
        """Apply the acceptance checks in contract order; return the accepted run's ticket."""
        check_run_arguments(message, responses, checkpoint_id)
        if checkpoint_storage is not None:
            check_checkpoint_storage(checkpoint_storage, "checkpoint_storage")
        if responses is not None and checkpoint_id is None:
            ticket = self._authority.accept_resume(continuation_token, responses, checkpoint_storage)
        elif continuation_token is not None:
            raise ValueError(
                "'continuation_token' is only used with 'responses' (a response-only resume); a fresh run "
                "or a checkpoint restore needs none. Drop the token from this call."
            )
        else:
            ticket = self._authority.accept_new_input(checkpoint_storage)
        if checkpoint_id is not None and checkpoint_storage is None and self._checkpoint_storage is None:
            raise ValueError(
                "Cannot restore a checkpoint without checkpoint storage. Pass checkpoint_storage=... to build() "
                "or to this run (the storage that saved the checkpoint)."
            )
        if self._active is not None:
            raise WorkflowRunningError()
        return ticket

    # ------------------------------------------------------------------ agent

    def as_agent(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        context_providers: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> FunctionalWorkflowAgent:
        """Wrap this instance as a :class:`FunctionalWorkflowAgent` (a core ``BaseAgent``).

        ``name``, ``description`` (default: the workflow's), ``context_providers`` and ``**kwargs`` go to the agent.
        """
        from ._agent import FunctionalWorkflowAgent

        return FunctionalWorkflowAgent(
            self, name=name, description=description, context_providers=context_providers, **kwargs
        )

    # ------------------------------------------------------------------ internals

    def _new_core(self) -> _CoreFunctionalWorkflow:
        d = self._definition  # core's own build(), on the subclass that keeps long runs linear
        return build_core(d.func, name=d.name, description=d.description, checkpoint_storage=self._checkpoint_storage)

    def _reset_core(self) -> None:
        """Drop core's replay state by replacing the core instance (no core internals touched)."""
        self._core = self._new_core()

    def _identity(self) -> tuple[str, str]:
        """The workflow name and core's signature hash, which a stored record must match."""
        return self.name, self._core.graph_signature_hash

    def _new_run(self, ticket: ResumeTicket) -> WorkflowRun:
        name = self._definition.name
        return WorkflowRun(
            ticket, self._authority, self._core, name, is_current=self._holds_guard, settle=self._end_run
        )

    def _holds_guard(self, run: WorkflowRun) -> bool:
        return self._active is run

    def _release_dropped_run(self, run: WorkflowRun) -> None:
        """Free the instance if a run's stream was closed or garbage-collected unfinished.

        Runs as the stream's cleanup hook (``close()``, ``async with``, end of consumption) and as
        its weak finalizer; a no-op once ``_end_run`` settled the run.
        """
        if self._active is run:
            self._active = None
            if run.release(dropped=True):
                self._core = self._new_core()  # the dropped core stream is closed later by the loop

    def _end_run(self, run: WorkflowRun) -> None:
        """Settle the instance after a run's stream finished, failed, or was closed."""
        if self._active is run:  # else already released by the weak finalizer: a newer run may own it
            self._active = None
            if run.release(dropped=False):
                self._core = self._new_core()  # failed, cancelled or closed after user code: drop replay

    # Package-internal questions the agent asks (not public API).

    def pause_expires_at(self) -> float | None:
        """When the unclaimed pause expires (seconds since the epoch), or None when none waits."""
        return self._authority.expires_at()

    def lapse_pause(self, now: float | None = None) -> bool:
        """Drop the pause once its TTL has passed; True when one expired."""
        return self._authority.lapse(now)

    def evict_pause(self) -> None:
        """Let go of the pause of an instance the agent no longer keeps (in memory: dropped)."""
        self._authority.evict()

    def bind_conversation(self, conversation: str) -> None:
        """Bind this instance to a conversation digest (a store refuses another conversation's token)."""
        self._authority.conversation = conversation

    def verify_token_now(self, token: object) -> VerifiedContinuation | None:
        """The synchronous token check (None: only the store can decide); a refusal is counted."""
        try:
            return self._authority.verify_now(token)
        except ContinuationAuthorityError as exc:
            self._note_rejected(exc, token)
            raise

    def token_known_stale(self, token: object) -> bool | None:
        """Whether ``token`` is known to resume nothing, without I/O (None: only the store can tell)."""
        return self._authority.known_stale(token)

    async def token_is_stale(self, token: object) -> bool:
        """True only when ``token`` is known spent, abandoned or expired (a store read with a store)."""
        return await self._authority.is_stale(token)

    async def token_is_resumable(self, token: object) -> bool:
        """True while ``token`` still authorises a resume (read-only)."""
        return await self._authority.is_current(token)

    async def check_pause_conflict(self, verdict: VerifiedContinuation) -> None:
        """Refuse a resume of a pause kept elsewhere while one waits here (``PendingContinuationError``)."""
        await self._authority.check_conflict(verdict)
