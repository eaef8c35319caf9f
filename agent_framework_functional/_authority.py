"""Continuation authority in memory (who may resume a pause this process holds), and a restore's checks.

``StoreAuthority`` wraps an :class:`InMemoryAuthority` and adds a store. A check is done once and its
verdict passed on (``VerifiedContinuation``, AGENTS.md invariant 22).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agent_framework import CheckpointStorage

from ._answers import check_answers
from ._authority_protocol import NEW_INPUT, Requests, ResumeTicket, VerifiedContinuation, raw_token
from ._checkpoint_chain import RecordingCheckpointStorage
from ._continuation import Continuation, issue_continuation, known_spent, matches, remember_spent, verify_token
from ._errors import ContinuationAuthorityError, PendingContinuationError
from ._expiry import delete_checkpoint, delete_checkpoint_soon
from ._step_cache import takes_offers

if TYPE_CHECKING:
    from ._store import ContinuationStore


class InMemoryAuthority:
    """The ``Authority`` held in this process only: the token is valid on this instance.

    ``on_reset`` resets replay state on discard; ``retention`` None keeps every checkpoint;
    ``identity`` is the ``(name, signature hash)`` a restored checkpoint must match.
    """

    __slots__ = (
        "_identity",
        "_on_reset",
        "_pause_checkpoint",
        "checkpoint_storage",
        "conversation",
        "pending",
        "retention",
        "spent_hash",
        "ttl",
    )

    store: ContinuationStore | None = None

    def __init__(
        self,
        on_reset: Callable[[], None],
        checkpoint_storage: CheckpointStorage | None = None,
        *,
        retention: float | None = 0.0,
        ttl: float = 24 * 60 * 60.0,
        identity: Callable[[], tuple[str, str]] | None = None,
    ) -> None:
        self._on_reset = on_reset
        self._identity = identity
        self.ttl = ttl
        self.pending: Continuation | None = None
        self.conversation: str | None = None
        self.checkpoint_storage: CheckpointStorage | None = checkpoint_storage
        self.retention = retention
        self._pause_checkpoint: tuple[CheckpointStorage, str] | None = None
        self.spent_hash: int | None = None

    @property
    def keep_checkpoints(self) -> bool:
        return self.retention is None

    @property
    def has_pending(self) -> bool:
        """A pending continuation, unreserved, that has not lapsed."""
        pending = self.pending
        return pending is not None and not pending.reserved and not self.lapse()

    def pending_requests(self) -> Requests:
        return self.pending.pending_requests if self.has_pending and self.pending is not None else {}

    def expires_at(self) -> float | None:
        pending = self.pending
        return None if pending is None or pending.reserved else pending.issued_at + self.ttl

    @property
    def pause_checkpoint_id(self) -> str | None:
        return None if self._pause_checkpoint is None else self._pause_checkpoint[1]

    def lapse(self, now: float | None = None) -> bool:
        """:meth:`discard` once :meth:`expires_at` has passed."""
        expires_at = self.expires_at()
        if expires_at is None or (time.time() if now is None else now) < expires_at:
            return False
        self.discard()
        return True

    def evict(self) -> None:
        """:meth:`discard` the pending pause: in memory nothing else can resume it."""
        if self.has_pending:
            self.discard()

    def verify(self, token: object) -> VerifiedContinuation:
        """Check ``token`` against the continuation held here."""
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
        return self.verify(token)

    async def verify_async(self, token: object) -> VerifiedContinuation:
        return self.verify(token)

    def known_stale(self, token: object) -> bool | None:
        """True when this process spent or abandoned ``token`` in a conversation, else False."""
        return known_spent(raw_token(token))

    async def is_stale(self, token: object) -> bool:
        return known_spent(raw_token(token))

    async def is_resumable(self, token: object) -> bool:
        try:
            self.verify(token)
        except ContinuationAuthorityError:
            return False
        return True

    async def check_conflict(self, verdict: VerifiedContinuation | None = None) -> None:
        """Nothing to refuse: in memory no pause is held elsewhere."""

    def accept_resume(
        self, token: object, responses: Mapping[str, Any], checkpoint_storage: CheckpointStorage | None
    ) -> ResumeTicket:
        """Check the token against the pause held here, then the answers (``check_answers``)."""
        del checkpoint_storage
        self.lapse()
        continuation = verify_token(raw_token(token), self.pending)
        converted = check_answers(responses, continuation.pending_requests, continuation.known_requests())
        return ResumeTicket(continuation, converted)

    def accept_new_input(self, checkpoint_storage: CheckpointStorage | None) -> ResumeTicket:
        """Refuse while a pause is pending; the shared ticket of new input."""
        del checkpoint_storage
        if self.has_pending:
            raise PendingContinuationError()
        return NEW_INPUT

    def reserve(self, ticket: ResumeTicket) -> None:
        if ticket.continuation is not None:
            ticket.continuation.reserved = True

    async def before_core(self, ticket: ResumeTicket, core_kwargs: dict[str, Any]) -> ResumeTicket:
        """Route the run's checkpoints through a recorder (with ``keep_checkpoints``: if needed); check a restore."""
        storage = core_kwargs.get("checkpoint_storage")
        if storage is None:
            storage = self.checkpoint_storage
        checkpoint_id = core_kwargs.get("checkpoint_id")
        if storage is None or (self.keep_checkpoints and checkpoint_id is None and not takes_offers(storage)):
            return ticket
        recorder = RecordingCheckpointStorage(storage, retention=self.retention)
        if checkpoint_id is not None and self._identity is not None:
            await check_restore(recorder, self._identity(), core_kwargs)
        core_kwargs["checkpoint_storage"] = recorder
        return ticket.with_recorder(recorder)

    async def claim(self, ticket: ResumeTicket) -> Requests | None:
        continuation = ticket.continuation
        if continuation is None:
            return None
        if ticket.recorder is not None:
            ticket.recorder.resumed_checkpoint_id = self.pause_checkpoint_id
        return self.spend(continuation)

    def spend(self, continuation: Continuation) -> Requests:
        """Spend ``continuation`` (no longer reserved or pending); return the chain's requests so far."""
        continuation.reserved = False
        self._remember_spent(continuation)
        self.spent_hash = hash(continuation.secret)
        if self.pending is continuation:
            self.pending = None
        return continuation.known_requests()

    def hand_back(self, ticket: ResumeTicket) -> bool:
        continuation = ticket.continuation
        if continuation is None or not continuation.reserved:
            return False
        continuation.reserved = False
        return True

    async def finish(self, ticket: ResumeTicket) -> None:
        if ticket.recorder is not None:
            await ticket.recorder.finish_chain()

    async def record_pause(self, ticket: ResumeTicket, chain: Requests | None, requests: Requests) -> Continuation:
        """Hold the new continuation with the checkpoint the run saved last (a pause without storage has none)."""
        continuation = issue_continuation(requests, chain)
        recorder = ticket.recorder
        saved = recorder.last_saved_id if recorder is not None else None
        self.hold(continuation, None if recorder is None or saved is None else (recorder.inner, saved))
        if recorder is not None and saved is not None:
            await recorder.delete_chain(keep=saved)
        return continuation

    def hold(self, continuation: Continuation, checkpoint: tuple[CheckpointStorage, str] | None) -> None:
        """Make ``continuation`` the pending one, with its pause's checkpoint (storage, id: deleted on discard)."""
        self.pending = continuation
        self._pause_checkpoint = checkpoint

    def require_sync(self) -> None:
        """Allowed in memory."""

    def check_abandon(self, token: object, *, force: bool) -> bool:
        """Verify the token unless ``force``; always True (a reserved pause's token passes: the guard refuses)."""
        if not force:
            self.lapse()
            if not matches(token, self.pending):
                raise ContinuationAuthorityError()
        return True

    def abandon(self, token: object, *, force: bool) -> None:
        del token, force
        self.discard()

    async def abandon_async(self, token: object, *, force: bool) -> None:
        checkpoint = self.take_pause_checkpoint()
        self.abandon(token, force=force)
        if checkpoint is not None:
            await delete_checkpoint(*checkpoint)

    def discard(self) -> None:
        """Forget the pending continuation (remembered as spent), the replay state and the pause's checkpoint."""
        checkpoint = self.take_pause_checkpoint()
        if self.pending is not None:
            self._remember_spent(self.pending)
        self.pending = None
        self._on_reset()
        if checkpoint is not None:
            delete_checkpoint_soon(*checkpoint)

    def take_pause_checkpoint(self) -> tuple[CheckpointStorage, str] | None:
        """Hand over the pending pause's checkpoint for deletion (None with ``keep_checkpoints`` or none pending)."""
        if self.pending is None:
            return None  # a spent pause's checkpoint is its run's to delete (a failed run keeps it restorable)
        checkpoint, self._pause_checkpoint = self._pause_checkpoint, None
        return None if self.keep_checkpoints else checkpoint

    def _remember_spent(self, continuation: Continuation) -> None:
        """Note a conversation's spent or discarded token (session copies may present it again)."""
        if self.conversation is not None:
            remember_spent(continuation.secret, self.ttl)


async def check_restore(
    recorder: RecordingCheckpointStorage, identity: tuple[str, str], core_kwargs: dict[str, Any]
) -> bool:
    """A restore's checks before anything changes, through the run's recorder (core reuses the load).

    Checkpoint identity, then answers ("The rules of run" in the docs, rule 4); only then may a store supersede the
    pause's token (AGENTS.md invariant 29). False when the load failed: core's restore raises that error.
    Raises ``ValueError`` (another workflow or version) or ``ResponseMismatchError``.
    """
    checkpoint_id: str = core_kwargs["checkpoint_id"]
    try:
        checkpoint = await recorder.load(checkpoint_id)
    except Exception as exc:
        recorder.failed_load = (checkpoint_id, exc)
        return False
    name, signature_hash = identity
    if checkpoint.workflow_name != name:
        raise ValueError(
            f"Checkpoint '{checkpoint_id}' was saved by workflow '{checkpoint.workflow_name}', not '{name}'. "
            "Restore it with the workflow that saved it; nothing was restored."
        )
    if checkpoint.graph_signature_hash != signature_hash:  # core's own check and message, made before anything changes
        raise ValueError(
            f"Checkpoint '{checkpoint_id}' was created by a different version of workflow '{name}' and is not "
            "compatible with the current version. The workflow's step structure may have changed since this "
            "checkpoint was saved; nothing was restored."
        )
    recorder.preloaded = checkpoint
    responses: Mapping[str, Any] | None = core_kwargs.get("responses")
    events = checkpoint.pending_request_info_events
    if responses and events:  # no answers (core ignores an empty mapping) or nothing pending: core decides
        core_kwargs["responses"] = check_answers(responses, events, events, unchanged="Nothing was restored.")
    return True
