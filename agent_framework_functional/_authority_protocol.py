"""The authority protocol: the points of a run where the strategy decides, and the values they share.

:class:`ResumeTicket` is what ``run()`` accepted, an immutable value every hook receives; each hook
of :class:`Authority` returns its outcome instead of leaving it on the ticket. A token check's
outcome is a :class:`VerifiedContinuation`, which ``run()`` accepts in place of the token.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agent_framework import CheckpointStorage, WorkflowEvent

from ._checkpoint_chain import RecordingCheckpointStorage

if TYPE_CHECKING:
    from ._continuation import Continuation
    from ._store import ContinuationRecord, ContinuationStore

Requests = Mapping[str, WorkflowEvent[Any]]
"""Request id -> ``request_info`` event."""


@dataclass(frozen=True, slots=True)
class ResumeTicket:
    """What ``run()`` accepted, handed to each hook of the run (internal, immutable).

    Attributes:
        continuation: The pause held here that this run resumes (reserved until spent or handed back).
        responses: The run's answers (a resume only), converted once their types are known.
        record: The store's record of a pause held elsewhere.
        requests: Requests whose answers are checked: pending and earlier ones of the chain.
        remote_hash: Hash of a presented token this process does not hold, still to look up.
        claim_hash: Hash the store claims right before user code (store only).
        recorder: The checkpoint storage proxy core saves through in this run, if any.
    """

    continuation: Continuation | None = None
    responses: Mapping[str, Any] | None = None
    record: ContinuationRecord | None = None
    requests: Requests | None = None
    remote_hash: str | None = None
    claim_hash: str | None = None
    recorder: RecordingCheckpointStorage | None = None

    @property
    def resumes(self) -> bool:
        """True when the run resumes a pause (here or from the store), so its token is spent."""
        return self.continuation is not None or self.claim_hash is not None

    def with_recorder(self, recorder: RecordingCheckpointStorage) -> ResumeTicket:
        """This ticket, with the run's checkpoint recorder."""
        return ResumeTicket(
            self.continuation, self.responses, self.record, self.requests, self.remote_hash, self.claim_hash, recorder
        )


NEW_INPUT = ResumeTicket()
"""The ticket of a fresh run or restore without a recorder (shared: tickets are immutable)."""


class VerifiedContinuation(Mapping[str, WorkflowEvent[Any]]):
    """The outcome of a successful token check: the pause's pending requests, and what was checked.

    A read-only mapping request id -> ``request_info`` event. Passed to ``run(continuation_token=...)``
    of the same instance it stands for the token (no second store read); it does not pickle.

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
        requests: Requests,
        continuation: Continuation | None = None,
        record: ContinuationRecord | None = None,
        earlier_requests: Requests | None = None,
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

    def issued_by(self, authority: object) -> bool:
        """True when ``authority`` made this verdict (another instance's verdict stands for nothing)."""
        return self._authority is authority

    def known_requests(self) -> dict[str, WorkflowEvent[Any]]:
        """Every request of the run chain whose ``response_type`` is known: earlier ones, then pending."""
        return {**self.earlier_requests, **self._requests}


def raw_token(token: object) -> object:
    """The token a verdict carries, or ``token`` itself."""
    return token.token if type(token) is VerifiedContinuation else token


class Authority(Protocol):
    """The authority strategy a workflow instance holds: in memory, or with a continuation store (internal).

    In a run's order: ``accept_*`` and ``reserve`` (synchronous, in ``run()``), then the coroutines
    ``before_core``, ``claim``, ``record_pause`` or ``finish``, and ``hand_back`` as the run ends.
    Implementations document only where they differ.
    """

    @property
    def conversation(self) -> str | None:
        """Digest of the conversation this instance is bound to (set by the agent), else None."""
        ...

    @conversation.setter
    def conversation(self, value: str | None) -> None: ...

    @property
    def store(self) -> ContinuationStore | None:
        """The continuation store, or None in memory."""
        ...

    @property
    def ttl(self) -> float:
        """Seconds a pause stays resumable."""
        ...

    @property
    def pending(self) -> Continuation | None:
        """The continuation held here (reserved while an accepted run resumes it)."""
        ...

    @property
    def spent_hash(self) -> int | None:
        """``hash()`` of the last secret spent here (telemetry tells "spent" from "bad token")."""
        ...

    @property
    def has_pending(self) -> bool:
        """True while a pause held here is unreserved and unexpired."""
        ...

    def pending_requests(self) -> Requests:
        """The requests of the pending pause (empty when nothing is pending)."""
        ...

    def expires_at(self) -> float | None:
        """When the unreserved pause held here expires (seconds since the epoch), or None."""
        ...

    def lapse(self, now: float | None = None) -> bool:
        """Discard the unreserved pause held here once its TTL has passed; True when one lapsed."""
        ...

    def evict(self) -> None:
        """Let go of the pause of an instance the agent no longer keeps."""
        ...

    def verify(self, token: object) -> VerifiedContinuation:
        """Check ``token`` (or a verdict's token) against the pause held here; read-only.

        Raises:
            ContinuationAuthorityError: Nothing unreserved is pending here, or the token is wrong.
        """
        ...

    def verify_now(self, token: object) -> VerifiedContinuation | None:
        """:meth:`verify` without I/O; None when only the store can decide.

        Raises:
            ContinuationAuthorityError: A malformed token, or a wrong one.
        """
        ...

    async def verify_async(self, token: object) -> VerifiedContinuation:
        """Check ``token`` here and, with a store, there; read-only.

        Raises:
            ContinuationAuthorityError: Not resumable by this workflow (one fixed message).
        """
        ...

    def known_stale(self, token: object) -> bool | None:
        """Whether ``token`` is known to resume nothing, without I/O (None: only the store can tell)."""
        ...

    async def is_stale(self, token: object) -> bool:
        """True only when ``token`` is known spent, abandoned or expired."""
        ...

    async def is_resumable(self, token: object) -> bool:
        """True while ``token`` still authorises a resume (read-only)."""
        ...

    async def check_conflict(self, verdict: VerifiedContinuation | None = None) -> None:
        """Refuse a remote resume while a pause held here is pending; a stale local copy is discarded.

        Raises:
            PendingContinuationError: The pause held here can still be claimed.
        """
        ...

    def accept_resume(
        self, token: object, responses: Mapping[str, Any], checkpoint_storage: CheckpointStorage | None
    ) -> ResumeTicket:
        """Accept a response-only resume: authority first, then correlation and answer types.

        Raises:
            ContinuationAuthorityError: The token does not authorise a resume (fixed message).
            ResponseMismatchError: The answers do not fit the pause (the token stays valid).
            ValueError: With a store, a per-run ``checkpoint_storage`` other than the instance's.
        """
        ...

    def accept_new_input(self, checkpoint_storage: CheckpointStorage | None) -> ResumeTicket:
        """Accept a fresh run or a checkpoint restore: nothing may be pending.

        Raises:
            PendingContinuationError: A continuation is pending (it stays intact).
            ValueError: With a store, a per-run ``checkpoint_storage`` other than the instance's.
        """
        ...

    def reserve(self, ticket: ResumeTicket) -> None:
        """Reserve the ticket's continuation for the run just accepted (no other call may accept it)."""
        ...

    async def before_core(self, ticket: ResumeTicket, core_kwargs: dict[str, Any]) -> ResumeTicket:
        """Prepare core's arguments (the checkpoint recorder; with a store, a remote resume's checks).

        Returns:
            The ticket the rest of the run uses.

        Raises:
            ContinuationAuthorityError, PendingContinuationError, ResponseMismatchError: A remote
                resume refused, in that order (AGENTS.md invariant 21).
            CheckpointRestoreConflictError: A restore lost to a claim made after it started.
        """
        ...

    async def claim(self, ticket: ResumeTicket) -> Requests | None:
        """Spend the resumed token right before user code (with a store, claim it there first).

        Returns:
            The run chain's requests so far, or None when the run resumes nothing.

        Raises:
            ContinuationAuthorityError: Another resume or an abandonment won the claim.
        """
        ...

    async def record_pause(
        self,
        ticket: ResumeTicket,
        chain: Requests | None,
        requests: Requests,
        *,
        workflow_name: str,
        signature_hash: str,
    ) -> Continuation:
        """Issue the continuation of a saved pause, hold it here, delete the chain's spent checkpoints.

        Raises:
            PauseNotSavedError: With a store, no checkpoint was saved in this run.
        """
        ...

    async def finish(self, ticket: ResumeTicket) -> None:
        """A run finished (no pause): delete its chain's checkpoints."""
        ...

    def hand_back(self, ticket: ResumeTicket) -> bool:
        """Undo the reserve of a run that ended before spending; True when one was handed back."""
        ...

    def require_sync(self) -> None:
        """Allow a synchronous abandonment, or raise ``ContinuationStoreAsyncError`` (a store)."""
        ...

    def check_abandon(self, token: object, *, force: bool) -> bool:
        """Check an abandonment without I/O; True when it concerns the pause held here.

        Raises:
            ContinuationAuthorityError: In memory without ``force``, a missing or wrong token.
        """
        ...

    def abandon(self, token: object, *, force: bool) -> None:
        """Discard the pause held here (the caller checked the run guard)."""
        ...

    async def abandon_async(self, token: object, *, force: bool) -> None:
        """Abandon the pause (with a store, there too) and delete its checkpoint.

        Raises:
            ContinuationAuthorityError: Without ``force``, the token no longer authorises it.
        """
        ...
