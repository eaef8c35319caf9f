"""The workflow: ``@workflow`` makes a definition, ``build()`` an instance (``FunctionalWorkflow``).

An instance wraps one core ``FunctionalWorkflow``, accepts each call (``accept_run``), runs it in a ``WorkflowRun``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, overload

from agent_framework import CheckpointStorage, ResponseStream, WorkflowEvent
from agent_framework import FunctionalWorkflow as _CoreFunctionalWorkflow
from agent_framework import FunctionalWorkflowDefinition as _CoreFunctionalWorkflowDefinition

from ._authority_protocol import NEW_INPUT, ResumeTicket, VerifiedContinuation, accept_run, check_checkpoint_storage
from ._continuation import request_tag
from ._core_compat import build_core, functional_workflows_experimental
from ._errors import WorkflowRunningError
from ._expiry import DEFAULT_CHECKPOINT_RETENTION, resolve_retention
from ._run import FunctionalWorkflowRunResult, WorkflowRun, handle
from ._store_authority import make_authority
from ._telemetry import continuation_abandoned, note_refusal

if TYPE_CHECKING:
    from ._agent import FunctionalWorkflowAgent  # the one way back to the agent layer (as_agent)
    from ._store import ContinuationStore


@functional_workflows_experimental
class FunctionalWorkflow:
    """A functional workflow instance whose pauses can only be resumed with their continuation token.

    Made by :meth:`FunctionalWorkflowDefinition.build`; one pending continuation and one run at a time
    ("The rules of run" in the docs). With a continuation store any process sharing it can resume a pause, once.
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
        strategy = (continuation_store, checkpoint_storage, self._reset_core, self._identity)
        self._authority = make_authority(*strategy, definition.checkpoint_retention, continuation_ttl)
        self._core = self._new_core()
        self._active: WorkflowRun | None = None
        functools.update_wrapper(self, definition.func)  # pyright: ignore[reportArgumentType]

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
        """Core's signature hash of the workflow function and the steps it reaches (checkpoints carry it)."""
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
        """Seconds a pause stays resumable: the store's ``ttl_seconds``, else ``build(continuation_ttl=...)``."""
        return self._authority.ttl

    @property
    def has_pending_continuation(self) -> bool:
        """True while a paused run waits for a resume that no accepted run has reserved yet."""
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

    def verify_continuation_token(self, token: object) -> VerifiedContinuation:
        """Check, read-only, that ``token`` authorises a resume of the pause held in this process.

        Returns:
            A :class:`VerifiedContinuation`, which :meth:`run` also accepts as ``continuation_token``.

        Raises:
            ContinuationAuthorityError: Nothing unreserved is pending here, or a wrong token (one message).
        """
        with self._refusal_counted(token):
            return self._authority.verify(token)

    async def verify_continuation_token_async(self, token: object) -> VerifiedContinuation:
        """Check ``token`` like :meth:`verify_continuation_token`, also for pauses held by other processes.

        Read-only; the store's claim in :meth:`run` still decides which resume runs.

        Returns:
            A :class:`VerifiedContinuation` with the store's record.

        Raises:
            ContinuationAuthorityError: The token does not authorise a resume (one fixed message).
            Exception: Whatever the store or the checkpoint storage raises when it cannot be read.
        """
        with self._refusal_counted(token):
            return await self._authority.verify_async(token)

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

        A rejected call raises at the call site (also with ``stream=True``) and changes nothing; a token
        only a store holds is checked inside the run, before any user code ("The rules of run" in the docs).

        Args:
            message: Input for a fresh run. At least one of ``message``, ``responses`` or ``checkpoint_id``.

        Keyword Args:
            stream: True for a ``ResponseStream`` of events; False for an awaitable result.
            responses: Answers keyed by request id (all so far); without ``checkpoint_id`` needs a token.
            continuation_token: The paused run's token, or a :class:`VerifiedContinuation` for it.
            checkpoint_id: Restore this checkpoint; no token.
            checkpoint_storage: Checkpoint storage for this run, overriding the instance default.
            include_status_events: Non-streaming only: keep status events in the result list.
            **kwargs: Forwarded unchanged to core's ``run``.

        Returns:
            An awaitable ``FunctionalWorkflowRunResult`` or a ``ResponseStream``; its
            ``continuation_token`` is set only when the run ended paused.

        Raises:
            ValueError: Wrong argument shape (as core); with a store, another ``checkpoint_storage``.
            TypeError: ``responses``, ``checkpoint_id`` or ``checkpoint_storage`` of the wrong type.
            ContinuationAuthorityError: A response-only resume without valid authority (one fixed message).
            ResponseMismatchError: An answer names no pending request or misfits its ``response_type``.
            PendingContinuationError: New input or a checkpoint restore while a continuation is pending.
            WorkflowRunningError: The instance is already running.
        """
        with self._refusal_counted(continuation_token):
            ticket = accept_run(
                self._authority,
                message,
                responses,
                continuation_token,
                checkpoint_id,
                checkpoint_storage,
                default_storage=self._checkpoint_storage,
                running=self._active is not None,
            )
        run = self._new_run(ticket)
        # Everything that can fail happens before this instance's state changes (invariant 1).
        core_kwargs: dict[str, Any] = {
            "message": message,
            # A resume's answers as its authority converted them (each to its request's response_type).
            "responses": dict(ticket.responses or responses) if responses is not None else None,
            "checkpoint_id": checkpoint_id,
            "checkpoint_storage": checkpoint_storage,
            **kwargs,
        }
        result = handle(run, core_kwargs, stream=stream, include_status_events=include_status_events)
        self._authority.reserve(ticket)
        self._active = run
        return result

    def abandon_continuation(self, token: Mapping[str, Any] | None = None, *, force: bool = False) -> None:
        """Discard the pending continuation, its replay state and checkpoint; fresh runs are allowed again.

        Args:
            token: The current continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Clear without a token; owner-only recovery, never for untrusted callers.

        Raises:
            ContinuationAuthorityError: Without ``force``, a missing or wrong token, or nothing pending.
            WorkflowRunningError: A run is in progress (including an accepted resume).
            ContinuationStoreAsyncError: The instance has a continuation store (use the async method).
        """
        self._authority.require_sync()
        request_ids = self._checked_abandon(token, force)
        self._authority.abandon(token, force=force)
        continuation_abandoned(self.name, token, forced=force, request_ids=request_ids or (), counted=bool(request_ids))

    async def abandon_continuation_async(self, token: Mapping[str, Any] | None = None, *, force: bool = False) -> None:
        """Abandon a pending continuation here and in the store; a concurrent resume and this cannot both succeed.

        Args:
            token: The continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Owner-only recovery without a token (lost or expired); problems are ignored.

        Raises:
            ContinuationAuthorityError: Without ``force``: the token does not authorise the abandonment.
            WorkflowRunningError: A run of this instance holds the continuation being abandoned.
        """
        local = self._checked_abandon(token, force)
        guard = None
        if local is not None:  # held here: hold the run guard across the store call, so no run starts
            guard = self._active = self._new_run(NEW_INPUT)
        try:
            with self._refusal_counted(token):
                await self._authority.abandon_async(token, force=force)
        finally:
            if guard is not None and self._active is guard:
                self._active = None
        # Counted as pending here when it was held here, or (a pause held elsewhere) issued elsewhere.
        counted = bool(local) or (local is None and not force)
        continuation_abandoned(self.name, token, forced=force, request_ids=local or (), counted=counted)

    def _checked_abandon(self, token: object, force: bool) -> frozenset[str] | None:
        """The checks both abandon methods share; the pending request ids held here (None: held elsewhere)."""
        with self._refusal_counted(token):
            local = self._authority.check_abandon(token, force=force)
            if local and self._active is not None:
                raise WorkflowRunningError(
                    "Cannot abandon while a run is in progress. Wait for it to finish or close its stream, then retry."
                )
        return frozenset(self._authority.pending_requests()) if local else None

    def as_agent(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        context_providers: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> FunctionalWorkflowAgent:
        """Wrap this instance as a :class:`FunctionalWorkflowAgent`; the arguments go to the agent."""
        from ._agent import FunctionalWorkflowAgent

        return FunctionalWorkflowAgent(
            self, name=name, description=description, context_providers=context_providers, **kwargs
        )

    @contextlib.contextmanager
    def _refusal_counted(self, token: object) -> Generator[None, None, None]:
        """Count a refused call by its reason (telemetry only), then let its error go on."""
        try:
            yield
        except Exception as exc:
            note_refusal(self.name, exc, self._authority, token)
            raise

    def _new_core(self) -> _CoreFunctionalWorkflow:
        d = self._definition  # core's own build(), on the subclass that keeps long runs linear
        return build_core(d.func, name=d.name, description=d.description, checkpoint_storage=self._checkpoint_storage)

    def _reset_core(self) -> None:
        """Reset core's replay state by replacing the core instance (no core internals touched)."""
        self._core = self._new_core()

    def _identity(self) -> tuple[str, str]:
        """The workflow name and core's signature hash, which a stored record must match."""
        return self.name, self._core.graph_signature_hash

    def _new_run(self, ticket: ResumeTicket) -> WorkflowRun:
        args = (ticket, self._authority, self._core, self._definition.name)
        return WorkflowRun(*args, holds_guard=self._holds_guard, free_guard=self._free_guard)

    def _holds_guard(self, run: WorkflowRun) -> bool:
        return self._active is run

    def _free_guard(self, run: WorkflowRun, dropped: bool) -> None:
        """Free the guard after a run ended or was dropped (only the run holding it: AGENTS.md invariant 8)."""
        if self._active is run:  # else already freed: a newer run may own the instance
            self._active = None
            if run.end(dropped=dropped):
                self._core = self._new_core()

    # Package-internal questions the agent asks (not public API).

    def pending_tag(self) -> str | None:
        """The tag the agent adds to the pending pause's request ids (``_continuation.request_tag``), or None."""
        pending = self._authority.pending
        return request_tag(pending.secret) if pending is not None and self._authority.has_pending else None

    def pause_expires_at(self) -> float | None:
        """When the unreserved pause expires (seconds since the epoch), or None when none waits."""
        return self._authority.expires_at()

    def lapse_pause(self, now: float | None = None) -> bool:
        """Discard the pause once its TTL has passed; True when one expired."""
        return self._authority.lapse(now)

    def evict_pause(self) -> None:
        """Let go of the pause of an instance the agent no longer keeps (in memory: dropped)."""
        self._authority.evict()

    def bind_conversation(self, conversation: str) -> None:
        """Bind this instance to a conversation digest (a store refuses another conversation's token)."""
        self._authority.conversation = conversation

    def verify_token_now(self, token: object) -> VerifiedContinuation | None:
        """The synchronous token check (None: only the store can decide); a refusal is counted."""
        with self._refusal_counted(token):
            return self._authority.verify_now(token)

    def token_known_stale(self, token: object) -> bool | None:
        """Whether ``token`` is known to resume nothing, without I/O (None: only the store can tell)."""
        return self._authority.known_stale(token)

    async def token_is_stale(self, token: object) -> bool:
        """True only when ``token`` is known spent, abandoned or expired (a store read with a store)."""
        return await self._authority.is_stale(token)

    async def token_is_resumable(self, token: object) -> bool:
        """True while ``token`` still authorises a resume (read-only)."""
        return await self._authority.is_resumable(token)

    async def check_pause_conflict(self, verdict: VerifiedContinuation) -> None:
        """Refuse a resume of a pause held elsewhere while one waits here (``PendingContinuationError``)."""
        await self._authority.check_conflict(verdict)


WorkflowFunc = Callable[..., Awaitable[Any]]


@functional_workflows_experimental
class FunctionalWorkflowDefinition:
    """Stateless workflow definition made by :func:`workflow`; :meth:`build` makes one instance per caller.

    Raises:
        ValueError: More than one non-``RunContext`` parameter; ``checkpoint_retention`` negative or over ten years.
        TypeError: ``func`` is not an async function; ``checkpoint_retention`` is not a duration.
    """

    def __init__(
        self,
        func: WorkflowFunc,
        *,
        name: str | None = None,
        description: str | None = None,
        checkpoint_retention: float | timedelta | None = DEFAULT_CHECKPOINT_RETENTION,
    ) -> None:
        if not inspect.iscoroutinefunction(func):
            shown = getattr(func, "__name__", type(func).__name__)
            raise TypeError(f"@workflow needs an async function (async def ...), got {shown!r}.")
        self._core_definition = _CoreFunctionalWorkflowDefinition(func, name=name, description=description)
        self.func: WorkflowFunc = func
        self.name: str = self._core_definition.name
        self.description: str | None = description
        self.checkpoint_retention: float | None = resolve_retention(checkpoint_retention)
        functools.update_wrapper(self, func)  # pyright: ignore[reportArgumentType]

    def build(
        self,
        *,
        checkpoint_storage: CheckpointStorage | None = None,
        continuation_store: ContinuationStore | None = None,
        continuation_ttl: float | timedelta | None = None,
    ) -> FunctionalWorkflow:
        """Build a workflow instance (no pending continuation) for one caller or session.

        Keyword Args:
            checkpoint_storage: Default core ``CheckpointStorage``; a run may override it (not with a store).
            continuation_store: Makes tokens durable across processes (needs ``checkpoint_storage``).
            continuation_ttl: How long a pause stays resumable (default 24 hours); with a store, its ``ttl``.

        Raises:
            ValueError: A store without ``checkpoint_storage``; a bad ``continuation_ttl`` or not the store's.
            TypeError: A store or ``checkpoint_storage`` that does not implement its protocol.
        """
        return FunctionalWorkflow(
            self,
            checkpoint_storage=checkpoint_storage,
            continuation_store=continuation_store,
            continuation_ttl=continuation_ttl,
        )


@overload
def workflow(func: WorkflowFunc, /) -> FunctionalWorkflowDefinition: ...


@overload
def workflow(
    *,
    name: str | None = None,
    description: str | None = None,
    checkpoint_retention: float | timedelta | None = DEFAULT_CHECKPOINT_RETENTION,
) -> Callable[[WorkflowFunc], FunctionalWorkflowDefinition]: ...


@functional_workflows_experimental
def workflow(
    func: WorkflowFunc | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    checkpoint_retention: float | timedelta | None = DEFAULT_CHECKPOINT_RETENTION,
) -> FunctionalWorkflowDefinition | Callable[[WorkflowFunc], FunctionalWorkflowDefinition]:
    """Turn an async function (core's functional workflow) into a :class:`FunctionalWorkflowDefinition`.

    Replay hazard: on resume the function runs again from the top; a ``@step``'s body does not, code
    outside steps does. Keep side effects in steps.

    Args:
        func: The async function (bare ``@workflow``); its non-``RunContext`` parameter receives ``message``.

    Keyword Args:
        name: Workflow name; defaults to the function's name.
        description: Optional description.
        checkpoint_retention: How long a finished run's checkpoints are kept (default 24 hours; 0: deleted at
            the finish; None: kept; "The rules of run" in the docs).

    Returns:
        A definition (bare ``@workflow``) or a decorator that makes one.

    Raises:
        ValueError: More than one non-``RunContext`` parameter; a bad ``checkpoint_retention``.
        TypeError: ``func`` is not an async function; ``checkpoint_retention`` is not a duration.

    Examples:
        .. code-block:: python

            @workflow(name="review")
            async def review(topic: str, ctx: RunContext) -> str:
                return await ctx.request_info({"topic": topic}, response_type=str)
    """
    options: dict[str, Any] = {"name": name, "description": description, "checkpoint_retention": checkpoint_retention}
    if func is not None:
        return FunctionalWorkflowDefinition(func, **options)

    def decorator(fn: WorkflowFunc) -> FunctionalWorkflowDefinition:
        return FunctionalWorkflowDefinition(fn, **options)

    return decorator
