"""Continuation authority with a ContinuationStore: resume a pause from any worker, exactly once.

The store implementation of the authority strategy (``_authority``). Every saved pause is recorded
in the store (by the sha256 of its token's secret) before its token is handed out; then:

1. A resume with a token this process does not hold checks the token's shape synchronously (the same
   fixed authority error as in memory); a :class:`VerifiedContinuation` carries the record and requests.
2. Inside the run, before any user code: the record by hash (non-mutating; skipped for a verdict), its
   workflow name, signature hash, status ``issued`` and expiry; the local pending conflict (a local copy
   the store says is gone is stale, not a conflict); the responses against the pause's requests.
3. Core restores the pause's checkpoint with the responses (``run(checkpoint_id=..., responses=...)``).
4. Right before the resumed user code runs, the store claims the record atomically (``issued ->
   claimed``, one winner; a loser gets the authority error). The in-memory fast path claims through the
   store at the same point, so an in-memory and a remote resume of one pause cannot both run.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, cast

from agent_framework import CheckpointStorage, WorkflowEvent

from ._authority import InMemoryAuthority, ResumeTicket, VerifiedContinuation, check_answers, raw_token, verdict_of
from ._checkpoint_chain import RecordingCheckpointStorage
from ._continuation import Continuation, hash_secret, issue_continuation, known_spent, matches, presented_secret
from ._errors import (
    CheckpointRestoreConflictError,
    ContinuationAuthorityError,
    ContinuationStoreAsyncError,
    PauseNotSavedError,
    PendingContinuationError,
)
from ._expiry import delete_checkpoint, resolve_ttl
from ._response_types import describe_requests, resolve_type
from ._store import ContinuationRecord, ContinuationStore


class StoreAuthority(InMemoryAuthority):
    """Continuation authority shared through a :class:`ContinuationStore` (internal).

    Keeps the in-memory fast path for pauses this process holds and adds the store at each hook.

    Args:
        store: The continuation store.
        checkpoint_storage: The instance's checkpoint storage (required).
        on_reset: As for :class:`InMemoryAuthority`.
        identity: Returns the workflow's ``(name, signature hash)``, which a record must match.

    Raises:
        TypeError: ``store`` does not implement :class:`ContinuationStore`.
        ValueError: No checkpoint storage: a durable resume restores the pause's checkpoint.
    """

    __slots__ = ("_identity", "store")

    def __init__(
        self,
        store: ContinuationStore,
        checkpoint_storage: CheckpointStorage | None,
        on_reset: Callable[[], None],
        identity: Callable[[], tuple[str, str]],
        *,
        keep_checkpoints: bool = False,
    ) -> None:
        if not isinstance(store, ContinuationStore):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                "continuation_store must implement ContinuationStore (ttl_seconds, now, save, get, claim, "
                "release, abandon, supersede), for example SQLiteContinuationStore or RedisContinuationStore."
            )
        if checkpoint_storage is None:
            raise ValueError(
                "A continuation_store needs checkpoint_storage as well: a resume in another process restores "
                "the pause's checkpoint. Pass checkpoint_storage=... (shared by every worker) to build()."
            )
        super().__init__(on_reset, checkpoint_storage, keep_checkpoints=keep_checkpoints, ttl=store.ttl_seconds)
        self.store: ContinuationStore = store  # pyright: ignore[reportIncompatibleVariableOverride]
        self.checkpoint_storage: CheckpointStorage = checkpoint_storage  # pyright: ignore[reportIncompatibleVariableOverride]
        self._identity = identity

    # ------------------------------------------------------------------ read-only checks

    def verify_now(self, token: object) -> VerifiedContinuation | None:
        """:meth:`verify` for a token held here; None for a well-shaped token only the store can check.

        Raises:
            ContinuationAuthorityError: A malformed token, or a verdict of another instance.
        """
        try:
            return self.verify(token)
        except ContinuationAuthorityError:
            if presented_secret(raw_token(token)) is None:
                raise
        return None

    async def verify_async(self, token: object) -> VerifiedContinuation:
        """Check ``token`` here and in the store; read-only (one store read, one checkpoint read at most).

        A token this instance holds must pass the in-memory check and the store must still accept it
        (so a pause already resumed elsewhere fails); any other token is looked up in the store and
        the pause's ``request_info`` events are loaded from its checkpoint.

        Raises:
            ContinuationAuthorityError: Malformed, unknown, another workflow or version, claimed,
                abandoned or expired (one fixed message).
            Exception: Whatever the store or the checkpoint storage raises when it cannot be read.
        """
        token = raw_token(token)
        if matches(token, self.pending):
            verdict = self.verify(token)
            verdict.record = await self._claimable_record(token)
            return verdict
        record = await self._claimable_record(token)
        requests = await self._pause_requests(record)
        return VerifiedContinuation(
            authority=self,
            token=cast("Mapping[str, Any]", token),
            requests=requests,
            record=record,
            earlier_requests=earlier_requests(record, requests),
        )

    def known_stale(self, token: object) -> bool | None:
        """True when this process spent or abandoned ``token``; else None: the store decides."""
        return True if known_spent(raw_token(token)) else None

    async def is_stale(self, token: object) -> bool:
        """True when the store no longer has ``token``'s pause ``issued`` (spent, abandoned, expired, unknown).

        A token this process holds in memory is judged by the store too, as any other.
        """
        return not await self.is_current(token)

    async def is_current(self, token: object) -> bool:
        """True while the store still has ``token``'s pause ``issued`` and unexpired (no checkpoint read)."""
        try:
            await self._claimable_record(token)
        except ContinuationAuthorityError:
            return False
        return True

    async def _claimable_record(self, token: object) -> ContinuationRecord:
        secret = presented_secret(token)
        if secret is None:
            raise ContinuationAuthorityError()
        return await self._record(hash_secret(secret))

    async def _record(self, token_hash: str, *, allow_expired: bool = False) -> ContinuationRecord:
        """The record of ``token_hash`` if this workflow may act on it (the one record check).

        Raises:
            ContinuationAuthorityError: No record, another workflow or version, another conversation
                (both this instance and the record name one), not ``issued``, or expired (unless
                ``allow_expired``).
        """
        record = await self.store.get(token_hash)
        name, signature_hash = self._identity()
        if (
            record is None
            or not record.belongs_to(name, signature_hash)
            or not _same_conversation(record.conversation, self.conversation)
            or record.status != "issued"
            or not (allow_expired or record.is_claimable(self.store.now()))
        ):
            raise ContinuationAuthorityError()
        return record

    async def _pause_requests(
        self, record: ContinuationRecord, recorder: CheckpointStorage | None = None
    ) -> dict[str, WorkflowEvent[Any]]:
        """The ``request_info`` events of a recorded pause, from its checkpoint (non-mutating).

        Raises:
            ContinuationAuthorityError: The checkpoint is gone: the pause was resumed or abandoned meanwhile.
        """
        try:
            checkpoint = await self.checkpoint_storage.load(record.checkpoint_id)
        except Exception:
            await self._record(record.token_hash)  # raises the authority error once the pause is gone
            raise
        if isinstance(recorder, RecordingCheckpointStorage):  # the run's recorder: core's restore reuses this load
            recorder.preloaded = checkpoint
        events = checkpoint.pending_request_info_events
        return {request_id: events[request_id] for request_id in record.pending_request_ids if request_id in events}

    # ------------------------------------------------------------------ 1. acceptance (synchronous)

    def accept_resume(
        self, token: object, responses: Mapping[str, Any], checkpoint_storage: CheckpointStorage | None
    ) -> ResumeTicket:
        """Accept a resume: in memory for a pause held here; else check the shape and defer to the run.

        Raises:
            ContinuationAuthorityError: A malformed token or a wrong held token.
            ResponseMismatchError: The answers do not fit a pause held here or named by a verdict.
            ValueError: A per-run ``checkpoint_storage`` other than the instance's.
        """
        storage = self._run_storage(checkpoint_storage)
        verdict = verdict_of(self, token)
        if verdict is not None and verdict.record is not None and not verdict.held_here:
            # Checked in the store by verify_continuation_token_async: its record and requests are reused.
            token_hash = verdict.record.token_hash
            ticket = ResumeTicket()
            ticket.responses = responses
            ticket.record = verdict.record
            ticket.requests = verdict.known_requests()
            ticket.remote_hash = ticket.claim_hash = token_hash
        elif matches(raw_token(token), self.pending):
            ticket = super().accept_resume(token, responses, None)
            assert ticket.claimed is not None
            ticket.claim_hash = hash_secret(ticket.claimed.secret)
        else:
            secret = presented_secret(raw_token(token))
            if secret is None:
                raise ContinuationAuthorityError()
            token_hash = hash_secret(secret)
            ticket = ResumeTicket()
            ticket.responses = responses
            ticket.remote_hash = ticket.claim_hash = token_hash
        ticket.storage = storage
        return ticket

    def accept_new_input(self, checkpoint_storage: CheckpointStorage | None) -> ResumeTicket:
        """As in memory, with the checkpoint recorder every durable run uses.

        Raises:
            PendingContinuationError: A continuation is pending (it stays intact).
            ValueError: A per-run ``checkpoint_storage`` other than the instance's.
        """
        storage = self._run_storage(checkpoint_storage)
        ticket = super().accept_new_input(None)
        ticket.storage = storage
        return ticket

    def _run_storage(self, checkpoint_storage: CheckpointStorage | None) -> RecordingCheckpointStorage:
        if checkpoint_storage is not None and checkpoint_storage is not self.checkpoint_storage:
            raise ValueError(
                "With a continuation_store every pause must be saved in the checkpoint storage given to build(), "
                "so that any worker can restore it. Drop checkpoint_storage from this run."
            )
        return RecordingCheckpointStorage(self.checkpoint_storage, keep=self.keep_checkpoints)

    # ------------------------------------------------------------------ 2-4. inside the run

    async def before_core(self, ticket: ResumeTicket, core_kwargs: dict[str, Any]) -> None:
        """Route checkpoints through the recorder; check a remote resume (authority, conflict, answers).

        Raises:
            ContinuationAuthorityError: The record is missing, of another workflow or version,
                claimed, abandoned or expired.
            PendingContinuationError: This instance holds another pending continuation that the
                store still has ``issued`` (a stale local copy is dropped instead).
            ResponseMismatchError: The answers do not fit the pause (the token stays valid).
        """
        core_kwargs["checkpoint_storage"] = ticket.storage
        if ticket.remote_hash is None:
            checkpoint_id = core_kwargs.get("checkpoint_id")
            if checkpoint_id is not None and not await self.store.supersede(checkpoint_id, since=self.store.now()):
                raise CheckpointRestoreConflictError()
            return
        record = ticket.record
        if record is None:
            record = await self._record(ticket.remote_hash)
        await self.check_conflict()
        if ticket.record is None:
            pending = await self._pause_requests(record, ticket.storage)
            requests = {**earlier_requests(record, pending), **pending}
        else:
            requests = ticket.requests
        assert ticket.responses is not None
        ticket.responses = check_answers(ticket.responses, record.pending_request_ids, requests)
        core_kwargs["responses"] = ticket.responses
        ticket.record = record
        ticket.requests = requests
        core_kwargs["checkpoint_id"] = record.checkpoint_id
        if isinstance(ticket.storage, RecordingCheckpointStorage):
            token_hash = record.token_hash

            async def gone() -> None:
                await self._record(token_hash)

            ticket.storage.gone = gone

    async def claim(self, ticket: ResumeTicket) -> None:
        """Claim the pause in the store right before user code, then spend it here (``ticket.chain``).

        Raises:
            ContinuationAuthorityError: The store says the pause is gone (claimed elsewhere,
                abandoned or expired); the local copy, if any, is spent too.
        """
        claim_hash, ticket.claim_hash = ticket.claim_hash, None
        if claim_hash is not None and not await self._claim_or_hand_back(claim_hash):
            self.spend(ticket)
            raise ContinuationAuthorityError()
        held = ticket.claimed is not None
        earlier = self.spend(ticket)
        if claim_hash is not None and isinstance(ticket.storage, RecordingCheckpointStorage):
            resumed = ticket.record.checkpoint_id if ticket.record is not None else None
            ticket.storage.resumed_checkpoint_id = self._held_checkpoint_id if held else resumed
        if earlier is None and ticket.record is not None:
            earlier = dict(ticket.requests)
        ticket.chain = earlier

    async def _claim_or_hand_back(self, claim_hash: str) -> bool:
        """The store's claim, which cancellation cannot split from its outcome.

        The claim runs shielded: a caller cancelled while it waits (for SQLite's write lock, for
        Redis's reply) still learns whether it won, and a won claim is handed back atomically
        (``release``: ``claimed`` -> ``issued``, only for this claimer) before the cancellation
        goes on, so a cancelled resume never leaves the token spent with no user code run. The
        local continuation is handed back when the run settles (``release``), so both views agree.

        Raises:
            asyncio.CancelledError: The caller was cancelled; the claim, if won, was handed back.
        """
        claimer = secrets.token_hex(16)
        claim = asyncio.ensure_future(self.store.claim(claim_hash, claimer=claimer))
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            if await _outcome(claim) is True:
                await _outcome(asyncio.ensure_future(self.store.release(claim_hash, claimer)))
            raise

    async def record_pause(
        self,
        ticket: ResumeTicket,
        pending_requests: Mapping[str, WorkflowEvent[Any]],
        *,
        workflow_name: str,
        signature_hash: str,
    ) -> None:
        """Record a saved pause in the store, then issue its continuation on ``ticket.issued`` (a failure: no token).

        Raises:
            PauseNotSavedError: No checkpoint was saved in this run.
            Exception: Whatever the store raises; the run then returns no token.
        """
        checkpoint_id = ticket.storage.last_saved_id if ticket.storage is not None else None
        if checkpoint_id is None:
            raise PauseNotSavedError()
        continuation = issue_continuation(pending_requests, ticket.chain)
        now = self.store.now()
        await self.store.save(
            ContinuationRecord(
                token_hash=hash_secret(continuation.secret),
                workflow_name=workflow_name,
                signature_hash=signature_hash,
                checkpoint_id=checkpoint_id,
                pending_request_ids=tuple(continuation.pending_requests),
                created_at=now,
                expires_at=now + self.store.ttl_seconds,
                response_types=describe_requests(continuation.known_requests()),
                conversation=self.conversation,
            )
        )
        self.pending = continuation
        self._held_checkpoint_id, self._held_storage = checkpoint_id, self.checkpoint_storage
        if isinstance(ticket.storage, RecordingCheckpointStorage):
            await ticket.storage.drop_chain(keep=checkpoint_id)
        ticket.issued = continuation

    async def check_conflict(self, verdict: VerifiedContinuation | None = None) -> None:
        """Refuse a resume of a pause held elsewhere while this instance holds a live pending one.

        A local copy that the store says is gone (resumed or abandoned elsewhere, expired) is stale:
        it is dropped, not a conflict. A verdict of a pause held here never conflicts.

        Raises:
            PendingContinuationError: The local pending continuation is still ``issued`` in the store.
        """
        local = self.pending if self.has_pending else None
        if local is None or (verdict is not None and verdict.held_here):
            return
        if await self._is_live(local):
            raise PendingContinuationError()
        if self.pending is local:
            self.drop()

    async def _is_live(self, continuation: Continuation) -> bool:
        record = await self.store.get(hash_secret(continuation.secret))
        return record is not None and record.is_claimable(self.store.now())

    def evict(self) -> None:
        """Nothing to release: the pause stays in the store, resumable from any worker (this one included)."""

    # ------------------------------------------------------------------ 5. abandonment

    def require_sync(self) -> None:
        """Refuse a synchronous abandonment: the store can only be updated asynchronously.

        Raises:
            ContinuationStoreAsyncError: Always; nothing changes.
        """
        raise ContinuationStoreAsyncError()

    def check_abandon(self, token: object, *, force: bool) -> bool:
        """True when the abandonment concerns the local continuation (token held here, or ``force``)."""
        return force or matches(token, self.pending)

    async def abandon_async(self, token: object, *, force: bool) -> None:
        """Abandon in the store and here (a held token), or in the store only (a pause held elsewhere).

        Raises:
            ContinuationAuthorityError: Without ``force``: the store no longer accepts the token.
        """
        local = self.pending
        is_local = matches(token, local)
        if local is not None and (is_local or force):
            accepted = await self.store.abandon(hash_secret(local.secret), force=force)
            if self.pending is local:
                held = self.take_held_checkpoint()
                self.drop()
                if held is not None:
                    await delete_checkpoint(*held)
            if not accepted and not force:
                raise ContinuationAuthorityError()
        if is_local or (force and token is None):
            return
        secret = presented_secret(token)
        try:
            if secret is None:
                raise ContinuationAuthorityError()
            record = await self._record(hash_secret(secret), allow_expired=force)
            if not await self.store.abandon(record.token_hash, force=force):
                raise ContinuationAuthorityError()
            if not self.keep_checkpoints:  # the abandoned pause's checkpoint backs nothing any more
                await delete_checkpoint(self.checkpoint_storage, record.checkpoint_id)
        except ContinuationAuthorityError:
            if not force:
                raise


async def _outcome(operation: Awaitable[bool]) -> bool | None:
    """Wait for a shielded store operation despite further cancellations; None when it failed.

    A store that fails here cannot be asked again: the token then stays spent (at most once).
    """
    task = asyncio.ensure_future(operation)
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue
        except Exception:
            break
    return None if task.cancelled() or task.exception() is not None else task.result()


def earlier_requests(
    record: ContinuationRecord, pending: Mapping[str, WorkflowEvent[Any]]
) -> dict[str, WorkflowEvent[Any]]:
    """The earlier rounds' requests a record names, as ``request_info`` events carrying only their type.

    Their answers are checked like the pending ones before the claim (core would check them only
    on the replay, after the token was spent). A type that does not resolve in this process (its
    module is not imported) is left to core's check.
    """
    events: dict[str, WorkflowEvent[Any]] = {}
    for request_id, text in (record.response_types or {}).items():
        response_type = None if request_id in pending else resolve_type(text)
        if response_type is not None:
            events[request_id] = WorkflowEvent.request_info(request_id, "", None, response_type)
    return events


def _same_conversation(recorded: str | None, here: str | None) -> bool:
    """A session's instance acts only on its own conversation's pauses (or unbound ones, older records).

    An instance outside a conversation (a workflow used directly, an agent called without a session)
    may act on any pause whose token it presents: the token alone is its authority.
    """
    return recorded is None or here is None or recorded == here


def make_authority(
    store: ContinuationStore | None,
    checkpoint_storage: CheckpointStorage | None,
    on_reset: Callable[[], None],
    identity: Callable[[], tuple[str, str]],
    keep_checkpoints: bool = False,
    ttl: float | timedelta | None = None,
) -> InMemoryAuthority:
    """The authority strategy for a workflow instance: in memory, or with ``store`` when one is given.

    Raises:
        TypeError: ``store`` does not implement :class:`ContinuationStore`; ``ttl`` is not a duration.
        ValueError: ``store`` without ``checkpoint_storage``; ``ttl`` differs from the store's.
    """
    if store is None:
        return InMemoryAuthority(
            on_reset, checkpoint_storage, keep_checkpoints=keep_checkpoints, ttl=resolve_ttl(ttl, None)
        )
    if isinstance(store, ContinuationStore):  # pyright: ignore[reportUnnecessaryIsInstance]
        resolve_ttl(ttl, store)  # raises when the two disagree
    return StoreAuthority(store, checkpoint_storage, on_reset, identity, keep_checkpoints=keep_checkpoints)
