"""Continuation authority as one strategy: who may resume a pause, decided in memory (this module).

:class:`FunctionalWorkflow` holds one authority object and calls it at five points of every run, in
this order; it never asks which implementation it holds:

1. ``accept_resume`` / ``accept_new_input`` (synchronous, inside ``run()``): authority, then the
   pending conflict, then correlation and answer types. Returns a :class:`ResumeTicket`.
2. ``before_core`` (before core starts): checks that need I/O (a token held in a continuation
   store), and the checkpoint storage core should use.
3. ``claim`` (right before resumed user code): spends the token; with a store, its atomic claim.
4. ``record_pause`` (once core saved a pause): issues the next continuation (with a store, records
   it there first).
5. ``abandon`` / ``abandon_async``: drops the pending continuation.

Points 2-4 and ``finish`` follow core's hook convention (``ResponseStream`` awaits a hook's result
only when it is awaitable): they return None when their work is done, or an awaitable the run must
await when it needs I/O. In memory nothing needs I/O, so a run in memory awaits nothing of its
authority. Their outcomes are left on the ticket (``chain``, ``issued``).

Two implementations: :class:`InMemoryAuthority` (here) and ``_store_authority.StoreAuthority``
(with a :class:`ContinuationStore`). A check is done once and its result passed on: the read-only
``verify`` / ``verify_async`` return a :class:`VerifiedContinuation`, which ``run()`` accepts in
place of the token, so a resume from another worker reads the store and the pause's checkpoint only
once before its claim.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agent_framework import CheckpointStorage, WorkflowEvent

from ._answers import convert_answer
from ._checkpoint_chain import RecordingCheckpointStorage
from ._continuation import Continuation, issue_continuation, known_spent, remember_spent, verify_token
from ._errors import ContinuationAuthorityError, PendingContinuationError, ResponseMismatchError
from ._expiry import delete_checkpoint, delete_checkpoint_soon

if TYPE_CHECKING:
    from ._store import ContinuationRecord, ContinuationStore


class VerifiedContinuation(Mapping[str, WorkflowEvent[Any]]):
    """The outcome of a successful token check: the pause's pending requests, and what was checked.

    Returned by :meth:`FunctionalWorkflow.verify_continuation_token` and
    :meth:`FunctionalWorkflow.verify_continuation_token_async`. It is a read-only mapping request
    id -> ``request_info`` event of the pending requests (so code that treats the result as that
    mapping keeps working), and it can be passed to ``run(responses=..., continuation_token=...)``
    of the same instance in place of the token: the run then trusts this check instead of reading
    the continuation store again. It is not a credential outside this process (it does not pickle
    to anything usable, and another instance ignores it), and the run still claims the pause
    atomically right before user code, so a verdict that went stale meanwhile loses that claim.

    Attributes:
        token: The continuation token that was checked (a plain dict).
        record: The store's record of the pause when it was checked in a continuation store, else None.
    """

    __slots__ = ("_authority", "_continuation", "_requests", "earlier_requests", "record", "token")

    def __init__(
        self,
        *,
        authority: object,
        token: Mapping[str, Any],
        requests: Mapping[str, WorkflowEvent[Any]],
        continuation: Continuation | None = None,
        record: ContinuationRecord | None = None,
        earlier_requests: Mapping[str, WorkflowEvent[Any]] | None = None,
    ) -> None:
        self._authority = authority
        self._continuation = continuation
        self._requests = dict(requests)
        self.earlier_requests: dict[str, WorkflowEvent[Any]] = dict(earlier_requests or {})
        self.token: dict[str, Any] = dict(token)
        self.record: ContinuationRecord | None = record

    def __getitem__(self, request_id: str) -> WorkflowEvent[Any]:
        return self._requests[request_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._requests)

    def __len__(self) -> int:
        return len(self._requests)

    def __repr__(self) -> str:
        return f"VerifiedContinuation(requests={sorted(self._requests)!r})"

    def __reduce__(self) -> Any:
        raise TypeError("A VerifiedContinuation is valid only in the process that checked it; send the token instead.")

    @property
    def held_here(self) -> bool:
        """True when the pause was held in this process's memory when it was checked."""
        return self._continuation is not None

    def known_requests(self) -> dict[str, WorkflowEvent[Any]]:
        """Every request of the run chain whose ``response_type`` is known: earlier ones, then pending."""
        return {**self.earlier_requests, **self._requests}


class ResumeTicket:
    """What one accepted run needs from its authority, from ``run()`` to its end (internal).

    A plain class whose fields default on the class and with no ``__init__``, so a ticket costs one
    small object and only the fields a run uses are set (one is made per run).

    Attributes:
        claimed: The in-memory continuation this run resumes (held ``claimed`` until spent).
        responses: The run's answers (a resume only).
        record: The store's record of the pause a remote resume restores.
        requests: Requests whose answers are checked: pending and earlier ones of the chain.
        remote_hash: Hash of a presented token this process does not hold, still to look up.
        claim_hash: Hash the store must claim right before user code (store only).
        storage: The checkpoint storage handed to core for this run (store only: a recorder).
        chain: Set by ``claim``: the requests of the run chain up to the resumed pause (kept on the
            next continuation), or None for a run that resumed nothing.
        issued: Set by ``record_pause``: the continuation of this run's pause.
    """

    claimed: Continuation | None = None
    responses: Mapping[str, Any] | None = None
    record: ContinuationRecord | None = None
    requests: Mapping[str, WorkflowEvent[Any]] = MappingProxyType({})
    remote_hash: str | None = None
    claim_hash: str | None = None
    storage: Any = None
    chain: Mapping[str, WorkflowEvent[Any]] | None = None
    issued: Continuation | None = None


def check_answers(
    responses: Mapping[str, Any],
    pending_ids: Any,
    requests: Mapping[str, WorkflowEvent[Any]],
) -> dict[str, Any]:
    """Correlate answers with the pause, then convert each known answer to its ``response_type``.

    Args:
        responses: The caller's answers by request id.
        pending_ids: The pause's pending request ids (any container of str).
        requests: Requests whose ``response_type`` is known: earlier rounds and the pending ones
            (earlier answers are passed again on a replay, and core checks every answer it reaches).

    Returns:
        The answers to hand to core: each known one converted (``_answers.convert_answer``: core's
        rule, then pydantic's), the others as given.

    Raises:
        ResponseMismatchError: No answer names a pending request, or an answer does not fit its
            request's ``response_type`` (core would reject it only after the token was spent).
    """
    for request_id in responses:
        if request_id in pending_ids:
            break
    else:
        raise ResponseMismatchError(
            "None of the responses answers a pending request. Key each answer by a request id of the "
            f"pause: {sorted(pending_ids)!r}. The continuation is still pending."
        )
    converted = dict(responses)
    for request_id, event in requests.items():
        if request_id in converted:
            converted[request_id] = convert_answer(converted[request_id], event.response_type, request_id)
    return converted


def raw_token(token: object) -> object:
    """The token a verdict carries, or ``token`` itself."""
    return token.token if type(token) is VerifiedContinuation else token


def verdict_of(authority: object, token: object) -> VerifiedContinuation | None:
    """``token`` when it is a verdict issued by ``authority`` (any other object gives None)."""
    if type(token) is VerifiedContinuation and token._authority is authority:  # pyright: ignore[reportPrivateUsage]
        return token
    return None


class InMemoryAuthority:
    """Continuation authority held in this process only: the token is valid on this instance.

    Args:
        on_reset: Called whenever the pending continuation is dropped for good (abandoned, or found
            stale), so the workflow can drop core's replay state too.
        checkpoint_storage: The instance's checkpoint storage (a run may name another).

    Keyword Args:
        keep_checkpoints: Never delete the checkpoints of a finished or re-paused run chain.
        ttl: Seconds a pause stays resumable (``_expiry.resolve_ttl``); past it, it is dropped on the
            next look and its checkpoint deleted.

    Attributes:
        conversation: Digest of the conversation this instance serves (``_session.conversation_of``),
            set by the agent for a session's instance; None outside a conversation.
    """

    __slots__ = (
        "_held_checkpoint_id",
        "_held_storage",
        "_on_reset",
        "checkpoint_storage",
        "conversation",
        "keep_checkpoints",
        "pending",
        "spent_hash",
        "ttl",
    )

    store: ContinuationStore | None = None

    def __init__(
        self,
        on_reset: Callable[[], None],
        checkpoint_storage: CheckpointStorage | None = None,
        *,
        keep_checkpoints: bool = False,
        ttl: float = 24 * 60 * 60.0,
    ) -> None:
        self._on_reset = on_reset
        self.ttl = ttl
        self.pending: Continuation | None = None
        # The conversation (agent session) this instance serves, set by the agent; None outside one.
        # In memory the instance itself is the conversation's; a store records it with each pause.
        self.conversation: str | None = None
        self.checkpoint_storage: CheckpointStorage | None = checkpoint_storage
        self.keep_checkpoints = keep_checkpoints
        self._held_checkpoint_id: str | None = None  # the checkpoint of the pause held in memory
        self._held_storage: CheckpointStorage | None = None  # and the storage it is in
        # hash() of the last secret spent here: telemetry tells "spent" from "bad token" (an int, not the text).
        self.spent_hash: int | None = None

    # ------------------------------------------------------------------ views

    @property
    def has_pending(self) -> bool:
        """True while a pause waits for a resume that no accepted run has claimed yet (and has not expired)."""
        pending = self.pending
        return pending is not None and not pending.claimed and not self.lapse()

    def pending_requests(self) -> Mapping[str, WorkflowEvent[Any]]:
        """The pending requests (empty when nothing unclaimed is pending)."""
        return self.pending.pending_requests if self.has_pending and self.pending is not None else {}

    def expires_at(self) -> float | None:
        """When the unclaimed pending pause expires (seconds since the epoch), or None when none is pending."""
        pending = self.pending
        return None if pending is None or pending.claimed else pending.issued_at + self.ttl

    def lapse(self, now: float | None = None) -> bool:
        """Drop the unclaimed pending pause once its TTL has passed (token, replay state, checkpoint).

        Returns:
            True when a pause expired and was dropped.
        """
        expires_at = self.expires_at()
        if expires_at is None or (time.time() if now is None else now) < expires_at:
            return False
        self.drop()
        return True

    def evict(self) -> None:
        """Release the pause of an instance the agent no longer keeps; in memory nothing else can resume it."""
        if self.has_pending:
            self.drop()

    # ------------------------------------------------------------------ read-only checks

    def verify(self, token: object) -> VerifiedContinuation:
        """Check ``token`` against the continuation held here; read-only.

        A :class:`VerifiedContinuation` is checked again by the token it carries.

        Raises:
            ContinuationAuthorityError: Nothing unclaimed is pending here, or the token is wrong.
        """
        self.lapse()
        continuation = verify_token(raw_token(token), self.pending)
        return VerifiedContinuation(
            authority=self,
            token=continuation.token(),
            requests=continuation.pending_requests,
            continuation=continuation,
            earlier_requests=continuation.earlier_requests,
        )

    def verify_now(self, token: object) -> VerifiedContinuation | None:
        """:meth:`verify`, or None when only an asynchronous check can decide (never, in memory).

        Raises:
            ContinuationAuthorityError: The token does not authorise a resume.
        """
        return self.verify(token)

    async def verify_async(self, token: object) -> VerifiedContinuation:
        """:meth:`verify`; with a store also for pauses held elsewhere (see ``StoreAuthority``)."""
        return self.verify(token)

    def known_stale(self, token: object) -> bool | None:
        """Whether ``token`` is known to resume nothing, without I/O; None when only the store can tell.

        In memory: True when this process spent or abandoned it in a conversation's instance
        (``_continuation.known_spent``), else False (a token this instance does not hold may be held
        by another instance in memory).
        """
        return known_spent(raw_token(token))

    async def is_stale(self, token: object) -> bool:
        """True only when ``token`` is known to be spent, abandoned or expired (in memory: spent here).

        A token this instance does not hold may be held by another instance in memory, so in memory
        only a token this process spent or abandoned is known to be gone.
        """
        return known_spent(raw_token(token))

    async def is_current(self, token: object) -> bool:
        """True when ``token`` still authorises a resume (read-only; a cheap check, no checkpoint read)."""
        try:
            self.verify(token)
        except ContinuationAuthorityError:
            return False
        return True

    # ------------------------------------------------------------------ 1. acceptance (synchronous)

    def accept_resume(
        self, token: object, responses: Mapping[str, Any], checkpoint_storage: CheckpointStorage | None
    ) -> ResumeTicket:
        """Accept a response-only resume: authority first, then correlation and answer types.

        Raises:
            ContinuationAuthorityError: The token does not authorise a resume (fixed message).
            ResponseMismatchError: The answers do not fit the pause (the token stays valid).
        """
        del checkpoint_storage
        self.lapse()
        continuation = verify_token(raw_token(token), self.pending)
        converted = check_answers(responses, continuation.pending_requests, continuation.known_requests())
        ticket = ResumeTicket()
        ticket.claimed, ticket.responses = continuation, converted
        return ticket

    def accept_new_input(self, checkpoint_storage: CheckpointStorage | None) -> ResumeTicket:
        """Accept a fresh run or a checkpoint restore: nothing may be pending.

        Raises:
            PendingContinuationError: A continuation is pending (it stays intact).
        """
        del checkpoint_storage
        if self.has_pending:
            raise PendingContinuationError()
        return ResumeTicket()

    def begin(self, ticket: ResumeTicket) -> None:
        """Mark the ticket's continuation claimed: the run that holds it was accepted."""
        if ticket.claimed is not None:
            ticket.claimed.claimed = True

    # ------------------------------------------------------------------ 2-4. inside the run

    async def check_conflict(self, verdict: VerifiedContinuation | None = None) -> None:
        """Refuse a resume of a pause held elsewhere while one is pending here (none exist in memory)."""

    def before_core(self, ticket: ResumeTicket, core_kwargs: dict[str, Any]) -> Awaitable[None] | None:
        """Route the run's checkpoints through a recorder (no I/O in memory, so None: nothing to await)."""
        storage = core_kwargs.get("checkpoint_storage")
        if storage is None:
            storage = self.checkpoint_storage
        if storage is not None and not self.keep_checkpoints:
            ticket.storage = core_kwargs["checkpoint_storage"] = RecordingCheckpointStorage(storage)
        return None

    def claim(self, ticket: ResumeTicket) -> Awaitable[None] | None:
        """Spend the resumed continuation right before user code; in memory synchronously (None).

        Leaves on ``ticket.chain`` the requests of the run chain up to the resumed pause, or None
        for a run that resumed nothing; the recorder learns the resumed pause's checkpoint.
        """
        if ticket.claimed is not None and type(ticket.storage) is RecordingCheckpointStorage:
            ticket.storage.resumed_checkpoint_id = self._held_checkpoint_id
        ticket.chain = self.spend(ticket)
        return None

    def spend(self, ticket: ResumeTicket) -> Mapping[str, WorkflowEvent[Any]] | None:
        """Spend the ticket's in-memory continuation; return the chain's requests so far (None: nothing resumed)."""
        continuation = ticket.claimed
        if continuation is None:
            return None
        ticket.claimed = None
        self._remember_spent(continuation)
        self.spent_hash = hash(continuation.secret)
        if self.pending is continuation:
            self.pending = None
        return continuation.known_requests()

    def release(self, ticket: ResumeTicket) -> bool:
        """Hand back a continuation whose run ended before user code; True when one was handed back."""
        continuation = ticket.claimed
        if continuation is None:
            return False
        ticket.claimed = None
        continuation.claimed = False
        return True

    def finish(self, ticket: ResumeTicket) -> Awaitable[None] | None:
        """A run finished cleanly: the deletion of its chain's checkpoints to await (none backs a token), or None."""
        if isinstance(ticket.storage, RecordingCheckpointStorage):
            return ticket.storage.drop_chain(keep=None)
        return None

    def record_pause(
        self,
        ticket: ResumeTicket,
        pending_requests: Mapping[str, WorkflowEvent[Any]],
        *,
        workflow_name: str,
        signature_hash: str,
    ) -> Awaitable[None] | None:
        """Issue the continuation of a saved pause, make it the pending one, and leave it on ``ticket.issued``.

        Its earlier requests are the chain's (``ticket.chain``). Returns the deletion of the chain's
        spent checkpoints to await (all but the new pause's), or None when there are none.
        """
        del workflow_name, signature_hash
        continuation = issue_continuation(pending_requests, ticket.chain)
        self.pending = continuation
        ticket.issued = continuation
        recorder = ticket.storage
        if not isinstance(recorder, RecordingCheckpointStorage) or recorder.last_saved_id is None:
            self._held_checkpoint_id = self._held_storage = None
            return None
        self._held_checkpoint_id, self._held_storage = recorder.last_saved_id, recorder.inner
        return recorder.drop_chain(keep=recorder.last_saved_id)

    # ------------------------------------------------------------------ 5. abandonment

    def require_sync(self) -> None:
        """Allow a synchronous abandonment (in memory nothing else needs updating)."""

    def check_abandon(self, token: object, *, force: bool) -> bool:
        """Check an abandonment synchronously; True when a local continuation is to be dropped.

        Raises:
            ContinuationAuthorityError: Without ``force``, a missing or wrong token.
        """
        if not force:
            self.lapse()
            verify_token(token, self.pending)
        return True  # the local continuation (or, with force, whatever is there) is what goes

    def abandon(self, token: object, *, force: bool) -> None:
        """Drop the pending continuation (the caller holds the run guard check)."""
        del token, force
        self.drop()

    async def abandon_async(self, token: object, *, force: bool) -> None:
        """:meth:`abandon`, awaiting the deletion of the pause's checkpoint (a store authority updates the store)."""
        held = self.take_held_checkpoint()
        self.abandon(token, force=force)
        if held is not None:
            await delete_checkpoint(*held)

    def drop(self) -> None:
        """Forget the pending continuation (remembered as spent), the replay state and the pause's checkpoint."""
        held = self.take_held_checkpoint()
        if self.pending is not None:
            self._remember_spent(self.pending)
        self.pending = None
        self._on_reset()
        if held is not None:
            delete_checkpoint_soon(*held)

    def take_held_checkpoint(self) -> tuple[CheckpointStorage, str] | None:
        """Hand over the pending pause's checkpoint for deletion (None with ``keep_checkpoints`` or none pending)."""
        if self.pending is None:
            return None  # a spent pause's checkpoint is its run's to delete (a failed run keeps it restorable)
        held = (self._held_storage, self._held_checkpoint_id)
        self._held_storage = self._held_checkpoint_id = None
        if self.keep_checkpoints or held[0] is None or held[1] is None:
            return None
        return (held[0], held[1])

    def _remember_spent(self, continuation: Continuation) -> None:
        """Note a spent or dropped token of a conversation (session copies may present it again).

        Only a conversation's instance notes it: a workflow used directly keeps nothing per token.
        """
        if self.conversation is not None:
            remember_spent(continuation.secret, self.ttl)
