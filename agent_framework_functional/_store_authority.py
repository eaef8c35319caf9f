"""Continuation authority with a ContinuationStore: resume a pause from any worker, exactly once.

A pause is recorded before its token is handed out. A token held elsewhere is checked in the run before
user code (AGENTS.md invariant 21); right before user code the store claims the record, one winner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, cast

from agent_framework import CheckpointStorage

from ._answers import check_answers
from ._authority import InMemoryAuthority, VerifiedContinuation, check_restore, raw_token
from ._authority_protocol import Authority, Requests, ResumeTicket
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
from ._store import ContinuationRecord, ContinuationStore, is_continuation_store
from ._store_records import StoreRecords, earlier_requests


class StoreAuthority:
    """The ``Authority`` shared through a store: wraps an :class:`InMemoryAuthority` (pauses held here).

    Raises ``TypeError`` for a non-store, ``ValueError`` without checkpoint storage.
    """

    __slots__ = ("checkpoint_storage", "memory", "records", "store")

    def __init__(
        self,
        store: ContinuationStore,
        checkpoint_storage: CheckpointStorage | None,
        on_reset: Callable[[], None],
        identity: Callable[[], tuple[str, str]],
        *,
        retention: float | None = 0.0,
    ) -> None:
        if not is_continuation_store(store):
            raise TypeError(
                "continuation_store must implement ContinuationStore (ttl_seconds, now, save, get, claim, "
                "release, abandon, supersede), for example SQLiteContinuationStore or RedisContinuationStore."
            )
        if checkpoint_storage is None:
            raise ValueError(
                "A continuation_store needs checkpoint_storage as well: a resume in another process restores "
                "the pause's checkpoint. Pass checkpoint_storage=... (shared by every worker) to build()."
            )
        self.memory = InMemoryAuthority(on_reset, checkpoint_storage, retention=retention, ttl=store.ttl_seconds)
        self.store: ContinuationStore = store
        self.checkpoint_storage: CheckpointStorage = checkpoint_storage
        self.records = StoreRecords(store, checkpoint_storage, identity, self.memory)

    @property
    def ttl(self) -> float:
        return self.memory.ttl

    @property
    def conversation(self) -> str | None:
        return self.memory.conversation

    @conversation.setter
    def conversation(self, value: str | None) -> None:
        self.memory.conversation = value

    @property
    def pending(self) -> Continuation | None:
        return self.memory.pending

    @property
    def spent_hash(self) -> int | None:
        return self.memory.spent_hash

    @property
    def has_pending(self) -> bool:
        return self.memory.has_pending

    def pending_requests(self) -> Requests:
        return self.memory.pending_requests()

    def expires_at(self) -> float | None:
        return self.memory.expires_at()

    def lapse(self, now: float | None = None) -> bool:  # the store expires its record itself
        return self.memory.lapse(now)

    def evict(self) -> None:
        """Nothing to discard: the pause stays in the store, resumable from any worker."""

    def verify(self, token: object) -> VerifiedContinuation:  # the store is not read
        return self.memory.verify(token)

    def verify_now(self, token: object) -> VerifiedContinuation | None:
        """:meth:`verify` for a token held here; None for a well-formed token only the store can check."""
        try:
            return self.memory.verify(token)
        except ContinuationAuthorityError:
            if presented_secret(raw_token(token)) is None:
                raise
        return None

    async def verify_async(self, token: object) -> VerifiedContinuation:
        """One store read and, for a pause held elsewhere, one checkpoint read (its requests)."""
        token = raw_token(token)
        if matches(token, self.memory.pending):
            verdict = self.memory.verify(token)
            verdict.record = await self.records.claimable(token)
            return verdict
        record = await self.records.claimable(token)
        requests = await self.records.pause_requests(record)
        return VerifiedContinuation(
            authority=self,
            token=cast("Mapping[str, Any]", token),
            requests=requests,
            record=record,
            earlier_requests=earlier_requests(record, requests),
        )

    def known_stale(self, token: object) -> bool | None:
        return True if known_spent(raw_token(token)) else None

    async def is_stale(self, token: object) -> bool:
        return not await self.is_resumable(token)

    async def is_resumable(self, token: object) -> bool:
        try:
            await self.records.claimable(token)
        except ContinuationAuthorityError:
            return False
        return True

    def accept_resume(
        self, token: object, responses: Mapping[str, Any], checkpoint_storage: CheckpointStorage | None
    ) -> ResumeTicket:
        """A verdict's record, else the memory's check for a pause held here, else the token's shape only."""
        recorder = self._recorder(checkpoint_storage)
        verdict = token if type(token) is VerifiedContinuation and token.issued_by(self) else None
        if verdict is not None and verdict.record is not None and not verdict.held_here:
            # Checked in the store by verify_continuation_token_async: its record and requests are reused.
            token_hash = verdict.record.token_hash
            return ResumeTicket(
                None, responses, verdict.record, verdict.known_requests(), token_hash, token_hash, recorder
            )
        if matches(raw_token(token), self.memory.pending):
            local = self.memory.accept_resume(token, responses, None)
            assert local.continuation is not None
            claim_hash = hash_secret(local.continuation.secret)
            return ResumeTicket(local.continuation, local.responses, claim_hash=claim_hash, recorder=recorder)
        secret = presented_secret(raw_token(token))
        if secret is None:
            raise ContinuationAuthorityError()
        token_hash = hash_secret(secret)
        return ResumeTicket(responses=responses, remote_hash=token_hash, claim_hash=token_hash, recorder=recorder)

    def accept_new_input(self, checkpoint_storage: CheckpointStorage | None) -> ResumeTicket:
        recorder = self._recorder(checkpoint_storage)
        return self.memory.accept_new_input(None).with_recorder(recorder)

    def reserve(self, ticket: ResumeTicket) -> None:
        self.memory.reserve(ticket)

    def _recorder(self, checkpoint_storage: CheckpointStorage | None) -> RecordingCheckpointStorage:
        if checkpoint_storage is not None and checkpoint_storage is not self.checkpoint_storage:
            raise ValueError(
                "With a continuation_store every pause must be saved in the checkpoint storage given to build(), "
                "so that any worker can restore it. Drop checkpoint_storage from this run."
            )
        recorder = RecordingCheckpointStorage(self.checkpoint_storage, retention=self.memory.retention)
        recorder.joint = self.records.joint
        return recorder

    async def before_core(self, ticket: ResumeTicket, core_kwargs: dict[str, Any]) -> ResumeTicket:
        """Check a remote resume; a restore is checked, then supersedes the pause's token (AGENTS.md invariant 29)."""
        core_kwargs["checkpoint_storage"] = recorder = ticket.recorder
        if ticket.remote_hash is not None:
            return await self._accept_remote(ticket, ticket.remote_hash, core_kwargs)
        checkpoint_id = core_kwargs.get("checkpoint_id")
        if checkpoint_id is not None:
            assert recorder is not None
            since = self.store.now()  # a claim made while the checks read the checkpoint wins over this restore
            checked = await check_restore(recorder, self.records.identity(), core_kwargs)
            if checked and not await self.store.supersede(checkpoint_id, since=since):
                raise CheckpointRestoreConflictError()
        return ticket

    async def _accept_remote(self, ticket: ResumeTicket, remote_hash: str, core_kwargs: dict[str, Any]) -> ResumeTicket:
        """Check a pause held elsewhere: authority, conflict, answers, in that order; read-only."""
        if ticket.record is not None:
            record, read = ticket.record, None
        else:  # with a joint store: the record and its checkpoint in one round trip
            record, read = await self.records.get_paused(remote_hash)
        await self.check_conflict(resumed=record)
        requests = ticket.requests or {}
        if ticket.record is None:
            pending = await self.records.pause_requests(record, ticket.recorder, read)
            requests = {**earlier_requests(record, pending), **pending}
        assert ticket.responses is not None
        responses = core_kwargs["responses"] = check_answers(ticket.responses, record.pending_request_ids, requests)
        core_kwargs["checkpoint_id"] = record.checkpoint_id
        if ticket.recorder is not None:
            token_hash = record.token_hash

            async def gone() -> None:
                await self.records.get(token_hash)

            ticket.recorder.gone = gone
        return ResumeTicket(None, responses, record, requests, remote_hash, ticket.claim_hash, ticket.recorder)

    async def claim(self, ticket: ResumeTicket) -> Requests | None:
        """Claim in the store, then spend the copy held here (also when the claim is lost)."""
        local, claim_hash = ticket.continuation, ticket.claim_hash
        if claim_hash is not None and not await self.records.claim(claim_hash):
            if local is not None:
                self.memory.spend(local)
            raise ContinuationAuthorityError()
        chain = self.memory.spend(local) if local is not None else None
        if claim_hash is not None and ticket.recorder is not None:
            resumed = ticket.record.checkpoint_id if ticket.record is not None else None
            ticket.recorder.resumed_checkpoint_id = self.memory.pause_checkpoint_id if local is not None else resumed
        if chain is None and ticket.record is not None:
            chain = dict(ticket.requests or {})
        return chain

    def hand_back(self, ticket: ResumeTicket) -> bool:
        return self.memory.hand_back(ticket)

    async def finish(self, ticket: ResumeTicket) -> None:
        await self.memory.finish(ticket)

    async def record_pause(self, ticket: ResumeTicket, chain: Requests | None, requests: Requests) -> Continuation:
        """Save the record in the store first: a failed save issues no token."""
        recorder = ticket.recorder
        checkpoint_id = recorder.last_saved_id if recorder is not None else None
        if recorder is None or checkpoint_id is None:
            raise PauseNotSavedError()
        continuation = issue_continuation(requests, chain)
        pause = recorder.take_joint_pause()  # its checkpoint's save, kept for the record's statement
        if pause is None:  # the run's earlier checkpoints go whatever the record's save does
            await recorder.delete_superseded(keep=checkpoint_id)
        await self.records.save(continuation, checkpoint_id, pause)
        if pause is not None:  # after the joint statement: the earlier checkpoints share the segment it continues
            await recorder.delete_superseded(keep=checkpoint_id)
        self.memory.hold(continuation, (self.checkpoint_storage, checkpoint_id))
        await recorder.delete_chain(keep=checkpoint_id)  # the resumed pause's checkpoint, if any
        return continuation

    async def check_conflict(
        self, verdict: VerifiedContinuation | None = None, *, resumed: ContinuationRecord | None = None
    ) -> None:
        """Refuse while the pause held here is still claimable in the store (a verdict for it passes).

        A later pause of this conversation resumed instead orphans it: abandoned (AGENTS.md invariant 45).
        """
        memory = self.memory
        local = memory.pending if memory.has_pending else None
        if local is None or (verdict is not None and verdict.held_here):
            return
        record = await self.records.still_claimable(local)
        later = verdict.record if verdict is not None else resumed
        if record is not None and _superseded(record, later, memory.conversation) and memory.pending is local:
            await self._abandon_local(force=True)
        elif record is not None:
            raise PendingContinuationError()
        elif memory.pending is local:
            memory.discard()

    def require_sync(self) -> None:
        raise ContinuationStoreAsyncError()

    def check_abandon(self, token: object, *, force: bool) -> bool:
        return force or matches(token, self.memory.pending)

    def abandon(self, token: object, *, force: bool) -> None:  # unreachable: require_sync refuses first
        self.memory.abandon(token, force=force)

    async def abandon_async(self, token: object, *, force: bool) -> None:
        """In the store and here (a pause held here), or in the store only (held elsewhere)."""
        is_local = matches(token, self.memory.pending)
        if is_local or force:
            await self._abandon_local(force=force)
        if not is_local and not (force and token is None):
            await self.records.abandon(token, force=force, keep_checkpoint=self.memory.keep_checkpoints)

    async def _abandon_local(self, *, force: bool) -> None:
        local = self.memory.pending
        if local is None:
            return
        accepted = await self.store.abandon(hash_secret(local.secret), force=force)
        if self.memory.pending is local:
            checkpoint = self.memory.take_pause_checkpoint()
            self.memory.discard()
            if checkpoint is not None:
                await delete_checkpoint(*checkpoint)
        if not accepted and not force:
            raise ContinuationAuthorityError()


def _superseded(record: ContinuationRecord, later: ContinuationRecord | None, conversation: str | None) -> bool:
    """``later`` is a pause of ``conversation`` issued after ``record`` (both on the store's clock)."""
    return (
        later is not None
        and conversation is not None
        and later.conversation == conversation
        and record.conversation == conversation
        and later.created_at > record.created_at
    )


def make_authority(
    store: ContinuationStore | None,
    checkpoint_storage: CheckpointStorage | None,
    on_reset: Callable[[], None],
    identity: Callable[[], tuple[str, str]],
    retention: float | None = 0.0,
    ttl: float | timedelta | None = None,
) -> Authority:
    """The authority strategy for a workflow instance: in memory, or with ``store`` when one is given.

    Raises ``TypeError`` (not a store; ``ttl`` not a duration) or ``ValueError`` (no storage; ``ttl`` mismatch).
    """
    if store is None:
        return InMemoryAuthority(
            on_reset,
            checkpoint_storage,
            retention=retention,
            ttl=resolve_ttl(ttl, None),
            identity=identity,
        )
    if is_continuation_store(store):
        resolve_ttl(ttl, store)  # raises when the two disagree
    return StoreAuthority(store, checkpoint_storage, on_reset, identity, retention=retention)
