"""The authority protocol: the points of a run where the strategy decides, and the ticket they share.

:class:`ResumeTicket` is what ``run()`` accepted, an immutable value every hook receives; each hook
of :class:`Authority` returns its outcome instead of leaving it on the ticket.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agent_framework import CheckpointStorage, WorkflowEvent

from ._checkpoint_chain import RecordingCheckpointStorage

if TYPE_CHECKING:
    from ._authority import VerifiedContinuation
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


class Authority(Protocol):
    """The authority strategy a workflow instance holds (internal; ``_authority``, ``_store_authority``).

    In a run's order: ``accept_*`` and ``reserve`` (synchronous, in ``run()``), then the coroutines
    ``before_core``, ``claim``, ``record_pause`` or ``finish``, and ``hand_back`` as the run ends.
    """

    @property
    def conversation(self) -> str | None: ...
    @conversation.setter
    def conversation(self, value: str | None) -> None: ...
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
