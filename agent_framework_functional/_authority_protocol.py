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
    ``InMemoryAuthority`` documents each point; ``StoreAuthority`` where a store changes it.
    Refusals, each at its point: ``verify*``, ``accept_resume``, ``check_abandon`` and ``abandon_async``
    raise ``ContinuationAuthorityError`` (``accept_resume`` then ``ResponseMismatchError``);
    ``accept_new_input`` and ``check_conflict`` ``PendingContinuationError``. With a store:
    ``before_core`` a remote resume's refusals in that order (AGENTS.md invariant 21) or
    ``CheckpointRestoreConflictError``, ``claim`` ``ContinuationAuthorityError`` (another claim won),
    ``record_pause`` ``PauseNotSavedError``, ``require_sync`` ``ContinuationStoreAsyncError``.
    """

    conversation: str | None  # digest of the conversation this instance is bound to (set by the agent)

    @property
    def store(self) -> ContinuationStore | None: ...
    @property
    def ttl(self) -> float: ...
    @property
    def pending(self) -> Continuation | None: ...
    @property
    def spent_hash(self) -> int | None: ...
    @property
    def has_pending(self) -> bool: ...
    def pending_requests(self) -> Requests: ...
    def expires_at(self) -> float | None: ...
    def lapse(self, now: float | None = None) -> bool: ...
    def evict(self) -> None: ...
    def verify(self, token: object) -> VerifiedContinuation: ...
    def verify_now(self, token: object) -> VerifiedContinuation | None: ...
    async def verify_async(self, token: object) -> VerifiedContinuation: ...
    def known_stale(self, token: object) -> bool | None: ...
    async def is_stale(self, token: object) -> bool: ...
    async def is_resumable(self, token: object) -> bool: ...
    async def check_conflict(self, verdict: VerifiedContinuation | None = None) -> None: ...
    def accept_resume(
        self, token: object, responses: Mapping[str, Any], checkpoint_storage: CheckpointStorage | None
    ) -> ResumeTicket: ...
    def accept_new_input(self, checkpoint_storage: CheckpointStorage | None) -> ResumeTicket: ...
    def reserve(self, ticket: ResumeTicket) -> None: ...
    async def before_core(self, ticket: ResumeTicket, core_kwargs: dict[str, Any]) -> ResumeTicket: ...
    async def claim(self, ticket: ResumeTicket) -> Requests | None: ...
    async def record_pause(
        self,
        ticket: ResumeTicket,
        chain: Requests | None,
        requests: Requests,
        *,
        workflow_name: str,
        signature_hash: str,
    ) -> Continuation: ...
    async def finish(self, ticket: ResumeTicket) -> None: ...
    def hand_back(self, ticket: ResumeTicket) -> bool: ...
    def require_sync(self) -> None: ...
    def check_abandon(self, token: object, *, force: bool) -> bool: ...
    def abandon(self, token: object, *, force: bool) -> None: ...
    async def abandon_async(self, token: object, *, force: bool) -> None: ...
