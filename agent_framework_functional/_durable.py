"""Durable continuation authority: the store protocol, its record, and the cross-process resume path.

With a :class:`ContinuationStore` given to ``build(..., continuation_store=...)``, every saved pause
is also recorded in the store (by the sha256 of its token's secret, never the secret), so that any
process with the same workflow definition, checkpoint storage and store can resume it, exactly once:

1. ``run(responses=..., continuation_token=...)`` with a token this process does not hold checks the
   token's shape synchronously (the same fixed authority error as in memory).
2. Inside the run, before any user code: look the record up by hash (non-mutating), verify the
   workflow name and signature hash, status ``issued`` and expiry; then the local pending conflict;
   then correlate the responses with the record's pending request ids.
3. Core restores the pause's checkpoint with the responses (``run(checkpoint_id=..., responses=...)``).
4. Right before the resumed user code runs (the moment the in-memory token is spent), the store
   claims the record atomically (``issued -> claimed``, exactly one winner). A loser gets the authority
   error and no user code runs. The in-memory fast path claims through the store at the same point,
   so an in-memory resume and a remote resume of one pause cannot both run.

``FunctionalWorkflow.verify_continuation_token_async`` runs step 2's authority checks without
correlating or claiming (read-only), and loads the pause's ``request_info`` events from its
checkpoint, so the agent can convert chat answers by ``response_type`` before it starts the resume.

Crash semantics: a process that dies after its claim leaves the record ``claimed``: the token is
spent (at most once), because no store can tell "claimed, then crashed before user code" from
"claimed, ran half the side effects, then crashed". The owner recovers with a checkpoint restore of
``record.checkpoint_id`` (find it with ``await store.get(continuation_token_hash(token))``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from agent_framework import CheckpointStorage, WorkflowCheckpoint, WorkflowEvent

from ._continuation import Continuation, presented_secret
from ._core_compat import check_response_types
from ._errors import ContinuationAuthorityError, PendingContinuationError

ContinuationStatus = Literal["issued", "claimed", "abandoned"]
"""Lifecycle of a stored continuation: ``issued`` (resumable) -> ``claimed`` or ``abandoned`` (final)."""

DEFAULT_TTL_SECONDS = 24 * 60 * 60.0
_DECOY = secrets.token_urlsafe(32).encode("ascii")
DEFAULT_RETENTION_SECONDS = 24 * 60 * 60.0


MAX_DURATION_SECONDS = 10 * 365 * 24 * 3600.0
"""Longest ``ttl`` or ``retention`` a store accepts (ten years): Redis expiry times must fit its range."""


def duration_seconds(value: float | timedelta, name: str) -> float:
    """Return ``value`` in seconds, checked for the stores' ``ttl`` / ``retention`` arguments.

    Args:
        value: Seconds, or a ``timedelta``.
        name: The argument's name, for the error message.

    Returns:
        The duration in seconds.

    Raises:
        ValueError: The duration is not a finite positive number up to :data:`MAX_DURATION_SECONDS`.
        TypeError: ``value`` is neither a number nor a ``timedelta``.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        seconds = float(value)
    else:
        raise TypeError(f"{name} must be a number of seconds or a timedelta, got {type(value).__name__}.")
    if not 0 < seconds <= MAX_DURATION_SECONDS:
        raise ValueError(f"{name} must be a positive, finite number of seconds (or timedelta) of at most ten years.")
    return seconds


@dataclass(frozen=True, slots=True)
class ContinuationRecord:
    """What a :class:`ContinuationStore` keeps about one issued continuation token.

    Attributes:
        token_hash: Hex sha256 of the token's secret (:func:`continuation_token_hash`). The secret
            itself is never stored, so a leaked store does not leak usable tokens.
        workflow_name: Name of the workflow that paused.
        signature_hash: Core's ``graph_signature_hash`` of that workflow (its code and steps); a
            process running a different version cannot resume the pause.
        checkpoint_id: Id of the checkpoint saved at the pause (the last one saved in that run).
        pending_request_ids: Request ids the pause waits for.
        created_at: When the token was issued, seconds since the epoch (the store's clock).
        expires_at: When the token stops being accepted (``created_at`` + the store's TTL).
        status: ``issued``, ``claimed`` (a resume took it: spent) or ``abandoned``.
    """

    token_hash: str
    workflow_name: str
    signature_hash: str
    checkpoint_id: str
    pending_request_ids: tuple[str, ...]
    created_at: float
    expires_at: float
    status: ContinuationStatus = "issued"

    def is_claimable(self, now: float) -> bool:
        """Return True when the record is ``issued`` and not expired at ``now``.

        Args:
            now: Seconds since the epoch, from the store's clock.

        Returns:
            Whether a resume may still claim this continuation.
        """
        return self.status == "issued" and now < self.expires_at


@runtime_checkable
class ContinuationStore(Protocol):
    """Durable home of continuation tokens shared by several processes (a small async protocol).

    Implementations: :class:`SQLiteContinuationStore` (one file, several processes on one machine)
    and :class:`RedisContinuationStore` (several machines). Give one to
    ``FunctionalWorkflowDefinition.build(checkpoint_storage=..., continuation_store=...)``.

    Rules every implementation keeps:

    * ``claim`` and ``abandon`` are atomic compare-and-set operations on ``status == "issued"``:
      among any number of concurrent callers (in any process) at most one gets True.
    * ``claimed`` and ``abandoned`` are final; nothing moves a record back to ``issued``.
    * Expiry is evaluated with :meth:`now`; an expired record is never claimed.
    """

    @property
    def ttl_seconds(self) -> float:
        """How long an issued token is accepted, in seconds."""
        ...

    def now(self) -> float:
        """Return the store's clock, seconds since the epoch (used for ``created_at`` and expiry)."""
        ...

    async def save(self, record: ContinuationRecord) -> None:
        """Record a freshly issued continuation (status ``issued``).

        Args:
            record: The record to insert; its ``token_hash`` must be new.
        """
        ...

    async def get(self, token_hash: str) -> ContinuationRecord | None:
        """Return the record for ``token_hash`` (any status), or None. Never mutates.

        Args:
            token_hash: Hex sha256 of the token's secret.

        Returns:
            The record, or None when the store has none (never saved, or already deleted).
        """
        ...

    async def claim(self, token_hash: str) -> bool:
        """Atomically move ``issued`` and unexpired -> ``claimed``; True only for the one winner.

        Args:
            token_hash: Hex sha256 of the token's secret.

        Returns:
            True when this call claimed the record; False when it is missing, not ``issued`` or expired.
        """
        ...

    async def abandon(self, token_hash: str, *, force: bool = False) -> bool:
        """Atomically move ``issued`` -> ``abandoned``; True when this call changed it.

        Args:
            token_hash: Hex sha256 of the token's secret.

        Keyword Args:
            force: Also abandon an expired record (owner recovery); otherwise expired records stay.

        Returns:
            True when this call abandoned the record; False when it is missing, not ``issued``, or
            expired (without ``force``).
        """
        ...


def hash_secret(secret: bytes) -> str:
    """Return the hex sha256 of a token secret: the only form in which a store sees a token."""
    return hashlib.sha256(secret).hexdigest()


def continuation_token_hash(token: Mapping[str, Any]) -> str:
    """Return the hash under which a :class:`ContinuationStore` records ``token``.

    Hosts use it to inspect a pause, for example to find the checkpoint of a token whose resume
    crashed after its claim: ``record = await store.get(continuation_token_hash(token))`` and then
    ``await wf.run(checkpoint_id=record.checkpoint_id, responses=...)``.

    Args:
        token: A continuation token mapping as returned by a paused run.

    Returns:
        The hex sha256 of the token's secret.

    Raises:
        ContinuationAuthorityError: If ``token`` is not a well-shaped continuation token.
    """
    secret = presented_secret(token)
    if secret is None:
        raise ContinuationAuthorityError()
    return hash_secret(secret)


class _RecordingCheckpointStorage:
    """Checkpoint storage proxy that remembers the id of the last checkpoint saved through it."""

    def __init__(self, inner: CheckpointStorage) -> None:
        self.inner = inner
        self.last_saved_id: str | None = None

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        checkpoint_id = await self.inner.save(checkpoint)
        self.last_saved_id = checkpoint_id
        return checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        return await self.inner.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return await self.inner.list_checkpoints(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: str) -> bool:
        return await self.inner.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return await self.inner.get_latest(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return await self.inner.list_checkpoint_ids(workflow_name=workflow_name)


@dataclass(eq=False, slots=True)
class DurableRun:
    """Durable bookkeeping of one run (internal).

    Attributes:
        storage: The checkpoint storage proxy handed to core for this run.
        claim_hash: Hash of the token this run must claim right before user code, if any.
        remote_hash: Hash of a presented token this process does not hold (a remote resume).
        responses: The responses of a remote resume, correlated inside the run.
    """

    storage: _RecordingCheckpointStorage
    claim_hash: str | None = None
    remote_hash: str | None = None
    responses: Mapping[str, Any] | None = None


class DurableAuthority:
    """The durable side of one workflow instance: store calls at the hook points (internal).

    Args:
        store: The continuation store.
        checkpoint_storage: The instance's checkpoint storage (required).

    Raises:
        TypeError: ``store`` does not implement :class:`ContinuationStore`.
        ValueError: No checkpoint storage: a durable resume restores the pause's checkpoint.
    """

    def __init__(self, store: ContinuationStore, checkpoint_storage: CheckpointStorage | None) -> None:
        if not isinstance(store, ContinuationStore):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                "continuation_store must implement ContinuationStore (ttl_seconds, now, save, get, claim, "
                "abandon), for example SQLiteContinuationStore or RedisContinuationStore."
            )
        if checkpoint_storage is None:
            raise ValueError(
                "A continuation_store needs checkpoint_storage as well: a resume in another process restores "
                "the pause's checkpoint. Pass checkpoint_storage=... (shared by every worker) to build()."
            )
        self.store = store
        self.checkpoint_storage = checkpoint_storage

    # ------------------------------------------------------------------ synchronous checks (in run())

    @staticmethod
    def check_shape(presented: object) -> None:
        """Raise the authority error unless ``presented`` is a well-shaped token (no store access)."""
        if presented_secret(presented) is None:
            raise ContinuationAuthorityError()

    @staticmethod
    def names_continuation(presented: object, continuation: Continuation | None) -> bool:
        """Return True when ``presented`` carries the secret of ``continuation`` (constant-time compare)."""
        secret = presented_secret(presented)
        expected = continuation.secret if continuation is not None else _DECOY
        matches = hmac.compare_digest(secret if secret is not None else b"", expected)
        return matches and secret is not None and continuation is not None

    def start_run(
        self,
        *,
        claimed: Continuation | None,
        remote_token: Mapping[str, Any] | None,
        responses: Mapping[str, Any] | None,
        checkpoint_storage: CheckpointStorage | None,
    ) -> DurableRun:
        """Prepare the durable side of an accepted run; raise before any state changes.

        Raises:
            ContinuationAuthorityError: A remote token of the wrong shape.
            ValueError: A per-run ``checkpoint_storage`` other than the instance's.
        """
        remote_hash: str | None = None
        if remote_token is not None:
            remote_hash = continuation_token_hash(remote_token)
        if checkpoint_storage is not None and checkpoint_storage is not self.checkpoint_storage:
            raise ValueError(
                "With a continuation_store every pause must be saved in the checkpoint storage given to build(), "
                "so that any worker can restore it. Drop checkpoint_storage from this run."
            )
        return DurableRun(
            storage=_RecordingCheckpointStorage(self.checkpoint_storage),
            claim_hash=hash_secret(claimed.secret) if claimed is not None else remote_hash,
            remote_hash=remote_hash,
            responses=responses if remote_hash is not None else None,
        )

    # ------------------------------------------------------------------ hooks inside the run

    async def before_core(
        self,
        run: DurableRun,
        core_kwargs: dict[str, Any],
        *,
        workflow_name: str,
        signature_hash: str,
        local_pending: Continuation | None,
        drop_stale: Callable[[Continuation], None],
    ) -> None:
        """Before core starts: route checkpoints through the recorder; verify a remote resume.

        Order (the in-memory contract, across processes): authority (record found, same workflow
        name and signature, ``issued``, not expired), then the local pending conflict, then
        correlation of the responses. Nothing here mutates the store.

        Raises:
            ContinuationAuthorityError: The record is missing, of another workflow or version,
                claimed, abandoned or expired.
            PendingContinuationError: This instance holds another pending continuation that the store
                still has ``issued`` (a stale local copy is dropped instead).
            ValueError: No response names a pending request of the pause, or an answer does not fit
                its request's ``response_type`` (the token stays valid).
        """
        core_kwargs["checkpoint_storage"] = run.storage
        if run.remote_hash is None:
            return
        record = await self.claimable_record(
            run.remote_hash, workflow_name=workflow_name, signature_hash=signature_hash
        )
        if local_pending is not None:
            if await self.is_live(local_pending):
                raise PendingContinuationError()
            drop_stale(local_pending)  # resumed or abandoned elsewhere, or expired: not a conflict
        assert run.responses is not None
        if not any(request_id in record.pending_request_ids for request_id in run.responses):
            raise ValueError(
                "None of the responses answers a pending request. Key each answer by a request id of the "
                f"pause: {sorted(record.pending_request_ids)!r}. The continuation is still pending."
            )
        # Answers of the wrong type would only fail in the replayed code, after the claim: check them
        # against the pause's requests (read from its checkpoint) while the token is still unspent.
        check_response_types(run.responses, await self.pending_requests(record))
        core_kwargs["checkpoint_id"] = record.checkpoint_id

    async def claimable_record(self, token_hash: str, *, workflow_name: str, signature_hash: str) -> ContinuationRecord:
        """Look a token's record up (non-mutating) and check that a resume of this workflow may claim it.

        Raises:
            ContinuationAuthorityError: No record, another workflow name or signature (version), or
                the record is claimed, abandoned or expired (fixed message for every cause).
        """
        record = await self.store.get(token_hash)
        if (
            record is None
            or record.workflow_name != workflow_name
            or record.signature_hash != signature_hash
            or not record.is_claimable(self.store.now())
        ):
            raise ContinuationAuthorityError()
        return record

    async def record_for_token(self, token: object, *, workflow_name: str, signature_hash: str) -> ContinuationRecord:
        """:meth:`claimable_record` for a presented token (any object); read-only.

        Raises:
            ContinuationAuthorityError: A malformed token, or any reason of :meth:`claimable_record`.
        """
        secret = presented_secret(token)
        if secret is None:
            raise ContinuationAuthorityError()
        return await self.claimable_record(
            hash_secret(secret), workflow_name=workflow_name, signature_hash=signature_hash
        )

    async def pending_requests(self, record: ContinuationRecord) -> dict[str, WorkflowEvent[Any]]:
        """Load the ``request_info`` events of a recorded pause from its checkpoint (non-mutating).

        Returns:
            Request id -> event, for the record's pending request ids, in the record's order.

        Raises:
            Exception: Whatever the checkpoint storage raises when the checkpoint cannot be loaded.
        """
        checkpoint = await self.checkpoint_storage.load(record.checkpoint_id)
        events = checkpoint.pending_request_info_events
        return {request_id: events[request_id] for request_id in record.pending_request_ids if request_id in events}

    async def claim(self, run: DurableRun) -> bool:
        """Claim the resumed pause in the store right before user code; True when allowed to run."""
        if run.claim_hash is None:
            return True
        claim_hash, run.claim_hash = run.claim_hash, None
        return await self.store.claim(claim_hash)

    async def record(
        self,
        run: DurableRun,
        continuation: Continuation,
        *,
        workflow_name: str,
        signature_hash: str,
    ) -> None:
        """Record a saved pause before its token is handed out.

        Raises:
            RuntimeError: No checkpoint was saved in this run (the pause cannot be restored elsewhere).
            Exception: Whatever the store raises; the run then returns no token.
        """
        checkpoint_id = run.storage.last_saved_id
        if checkpoint_id is None:
            raise RuntimeError(
                "The pause was not checkpointed, so it cannot be recorded in the continuation store. "
                "Check the checkpoint storage given to build()."
            )
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
            )
        )

    # ------------------------------------------------------------------ abandonment

    async def abandon_remote(
        self,
        token: Mapping[str, Any] | None,
        *,
        force: bool,
        workflow_name: str,
        signature_hash: str,
    ) -> None:
        """Abandon a pause this process does not hold, by its token.

        Raises:
            ContinuationAuthorityError: Without ``force``: malformed token, no such record, another
                workflow or version, or the record is not ``issued`` or has expired.
        """
        secret = presented_secret(token)
        if secret is None:
            if force:
                return
            raise ContinuationAuthorityError()
        token_hash = hash_secret(secret)
        record = await self.store.get(token_hash)
        if (
            record is None
            or record.workflow_name != workflow_name
            or record.signature_hash != signature_hash
            or not (force or record.is_claimable(self.store.now()))
        ):
            if force:
                return
            raise ContinuationAuthorityError()
        if not await self.store.abandon(token_hash, force=force) and not force:
            raise ContinuationAuthorityError()

    async def is_live(self, continuation: Continuation) -> bool:
        """True while the store still has this in-memory continuation ``issued`` and unexpired (read-only)."""
        record = await self.store.get(hash_secret(continuation.secret))
        return record is not None and record.is_claimable(self.store.now())

    async def abandon_local(self, continuation: Continuation, *, force: bool) -> bool:
        """Mark the in-memory continuation abandoned in the store; True when the store agreed."""
        return await self.store.abandon(hash_secret(continuation.secret), force=force)
