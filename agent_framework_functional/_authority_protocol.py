"""The authority protocol, the values its points share, and the acceptance of one ``run()`` call.

:class:`ResumeTicket` (immutable) is what ``run()`` accepted; each hook returns its outcome instead of
leaving it on the ticket. A token check yields a :class:`VerifiedContinuation`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from agent_framework import CheckpointStorage, WorkflowEvent

from ._checkpoint_chain import RecordingCheckpointStorage
from ._errors import WorkflowRunningError

if TYPE_CHECKING:
    from ._continuation import Continuation
    from ._store import ContinuationRecord, ContinuationStore

Requests = Mapping[str, WorkflowEvent[Any]]
"""Request id -> ``request_info`` event."""

_STR_ONLY = frozenset({str})
_RESPONSES_SHAPE = "'responses' must be a mapping from request id (str) to the answer for that request."


@dataclass(frozen=True, slots=True)
class ResumeTicket:
    """What ``run()`` accepted, handed to each hook of the run (internal, immutable)."""

    continuation: Continuation | None = None  # the pause held here this run resumes (reserved until spent)
    responses: Mapping[str, Any] | None = None  # a resume's answers, converted once their types are known
    record: ContinuationRecord | None = None  # the store's record of a pause held elsewhere
    requests: Requests | None = None  # requests whose answers are checked: pending and earlier ones of the chain
    remote_hash: str | None = None  # hash of a presented token this process does not hold, still to look up
    claim_hash: str | None = None  # hash the store claims right before user code (store only)
    recorder: RecordingCheckpointStorage | None = None  # the proxy core saves this run's checkpoints through

    @property
    def resumes(self) -> bool:
        """True when the run resumes a pause (here or from the store), so its token is spent."""
        return self.continuation is not None or self.claim_hash is not None

    def with_recorder(self, recorder: RecordingCheckpointStorage) -> ResumeTicket:
        return ResumeTicket(
            self.continuation, self.responses, self.record, self.requests, self.remote_hash, self.claim_hash, recorder
        )


NEW_INPUT = ResumeTicket()
"""The ticket of a fresh run or restore without a recorder (shared: tickets are immutable)."""


class VerifiedContinuation(Mapping[str, WorkflowEvent[Any]]):
    """A successful token check: a read-only mapping request id -> ``request_info`` event of the pause.

    The same instance's ``run(continuation_token=...)`` takes it as the token (no second store read).
    It does not pickle.

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

    In a run's order: ``accept_*``, ``reserve`` (in ``run()``), then ``before_core``, ``claim``,
    ``record_pause`` or ``finish``, and ``hand_back`` as the run ends (AGENTS.md glossary).
    Refusals: ``verify*``, ``accept_resume``, ``check_abandon`` and ``abandon_async``
    raise ``ContinuationAuthorityError`` (``accept_resume`` then ``ResponseMismatchError``);
    ``accept_new_input`` and ``check_conflict`` ``PendingContinuationError``. With a store:
    ``before_core`` a remote resume's refusals in that order (AGENTS.md invariant 21) or
    ``CheckpointRestoreConflictError``, ``claim`` ``ContinuationAuthorityError`` (another claim won),
    ``record_pause`` ``PauseNotSavedError``, ``require_sync`` ``ContinuationStoreAsyncError``.
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
    async def record_pause(self, ticket: ResumeTicket, chain: Requests | None, requests: Requests) -> Continuation: ...
    async def finish(self, ticket: ResumeTicket) -> None: ...
    def hand_back(self, ticket: ResumeTicket) -> bool: ...
    def require_sync(self) -> None: ...
    def check_abandon(self, token: object, *, force: bool) -> bool: ...
    def abandon(self, token: object, *, force: bool) -> None: ...
    async def abandon_async(self, token: object, *, force: bool) -> None: ...


def accept_run(
    authority: Authority,
    message: Any | None,
    responses: Mapping[str, Any] | None,
    continuation_token: Mapping[str, Any] | None,
    checkpoint_id: str | None,
    checkpoint_storage: CheckpointStorage | None,
    *,
    default_storage: CheckpointStorage | None,
    running: bool,
) -> ResumeTicket:
    """The synchronous checks of one ``run()`` call, in contract order, that make its ticket and change nothing.

    Argument shape, then the authority's verdict (token first: AGENTS.md invariant 2), then the run guard.
    """
    check_run_arguments(message, responses, checkpoint_id)
    if checkpoint_storage is not None:
        check_checkpoint_storage(checkpoint_storage, "checkpoint_storage")
    if responses is not None and checkpoint_id is None:
        ticket = authority.accept_resume(continuation_token, responses, checkpoint_storage)
    elif continuation_token is not None:
        raise ValueError(
            "'continuation_token' is only used with 'responses' (a response-only resume); a fresh run "
            "or a checkpoint restore needs none. Drop the token from this call."
        )
    else:
        ticket = authority.accept_new_input(checkpoint_storage)
    if checkpoint_id is not None and checkpoint_storage is None and default_storage is None:
        raise ValueError(
            "Cannot restore a checkpoint without checkpoint storage. Pass checkpoint_storage=... to build() "
            "or to this run (the storage that saved the checkpoint)."
        )
    if running:
        raise WorkflowRunningError()
    return ticket


def check_run_arguments(message: Any, responses: Any, checkpoint_id: Any) -> None:
    """Reject a ``run(...)`` argument shape core would reject, before any authority check."""
    if message is not None and responses is not None:
        raise ValueError("Cannot provide both 'message' and 'responses'. Use one or the other.")
    if message is not None and checkpoint_id is not None:
        raise ValueError("Cannot provide both 'message' and 'checkpoint_id'. Use one or the other.")
    if message is None and responses is None and checkpoint_id is None:
        raise ValueError(
            "Must provide at least one of: 'message' (new run), 'responses' with 'continuation_token' "
            "(resume a pause), or 'checkpoint_id' (restore a checkpoint)."
        )
    if responses is not None:
        if not isinstance(responses, Mapping):
            raise TypeError(_RESPONSES_SHAPE)
        keys = cast("Mapping[Any, Any]", responses)
        # Key types collected in C; only keys that are not exactly str are checked one by one.
        if not set(map(type, keys)) <= _STR_ONLY and not all(isinstance(key, str) for key in keys):
            raise TypeError(_RESPONSES_SHAPE)
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise TypeError("'checkpoint_id' must be the string id returned by the checkpoint storage.")


def check_checkpoint_storage(storage: object, name: str) -> None:
    """Reject an argument that is not a core ``CheckpointStorage`` (None is allowed) with ``TypeError``."""
    if storage is not None and not all(callable(getattr(storage, method, None)) for method in ("save", "load")):
        raise TypeError(
            f"'{name}' must be a core CheckpointStorage (for example InMemoryCheckpointStorage() or "
            f"FileCheckpointStorage(path)), got {type(storage).__name__}."
        )
