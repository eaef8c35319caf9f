"""A continuation store's records as one workflow instance may act on them (check, save, claim, abandon)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from agent_framework import CheckpointStorage, WorkflowCheckpoint, WorkflowEvent

from ._continuation import Continuation, hash_secret, presented_secret
from ._errors import ContinuationAuthorityError
from ._expiry import delete_checkpoint
from ._response_types import describe_requests, resolve_type
from ._store import ContinuationRecord, ContinuationStore, JointPause, JointStore

if TYPE_CHECKING:
    from ._authority import InMemoryAuthority
    from ._checkpoint_chain import RecordingCheckpointStorage


class StoreRecords:
    """The store, the checkpoint storage, and the identity and ``memory.conversation`` a record must match."""

    __slots__ = ("checkpoint_storage", "identity", "joint", "memory", "store")

    def __init__(
        self,
        store: ContinuationStore,
        checkpoint_storage: CheckpointStorage,
        identity: Callable[[], tuple[str, str]],
        memory: InMemoryAuthority,
    ) -> None:
        self.store = store
        self.checkpoint_storage = checkpoint_storage
        self.identity = identity
        self.memory = memory
        # A store and storage on one database (``_store.JointStore``), asked for once per instance.
        # A proxy's ``joint`` (through ``__getattr__``) would bypass the proxy: only a class's own counts.
        joins = isinstance(store, JointStore) and hasattr(type(store), "joint")
        self.joint = store.joint(checkpoint_storage) if joins else None

    async def claimable(self, token: object, *, allow_expired: bool = False) -> ContinuationRecord:
        """:meth:`get` for a presented token."""
        secret = presented_secret(token)
        if secret is None:
            raise ContinuationAuthorityError()
        return await self.get(hash_secret(secret), allow_expired=allow_expired)

    async def get(self, token_hash: str, *, allow_expired: bool = False) -> ContinuationRecord:
        """The record of ``token_hash`` if this workflow may act on it, else ``ContinuationAuthorityError``."""
        return self._checked(await self.store.get(token_hash), allow_expired=allow_expired)

    def _checked(self, record: ContinuationRecord | None, *, allow_expired: bool) -> ContinuationRecord:
        name, signature_hash = self.identity()
        here = self.memory.conversation  # a bound instance acts only on its own conversation's (or unbound) pauses
        if (
            record is None
            or not record.belongs_to(name, signature_hash)
            or (record.conversation is not None and here is not None and record.conversation != here)
            or record.status != "issued"
            or not (allow_expired or record.is_claimable(self.store.now()))
        ):
            raise ContinuationAuthorityError()
        return record

    async def get_paused(self, token_hash: str) -> tuple[ContinuationRecord, Callable[[], WorkflowCheckpoint] | None]:
        """:meth:`get`, and what decodes the checkpoint (after the record passed) when a ``Joint`` read both."""
        if self.joint is None:
            return await self.get(token_hash), None
        record, read = await self.joint.read(token_hash)
        return self._checked(record, allow_expired=False), read

    async def pause_requests(
        self,
        record: ContinuationRecord,
        recorder: RecordingCheckpointStorage | None = None,
        read: Callable[[], WorkflowCheckpoint] | None = None,
    ) -> dict[str, WorkflowEvent[Any]]:
        """The ``request_info`` events of a recorded pause, from its checkpoint (authority error once it is gone)."""
        try:
            checkpoint = read() if read is not None else await self.checkpoint_storage.load(record.checkpoint_id)
        except Exception:
            await self.get(record.token_hash)  # raises the authority error once the pause is gone
            raise
        if recorder is not None:  # the run's recorder: core's restore reuses this load
            recorder.preloaded = checkpoint
        events = checkpoint.pending_request_info_events
        return {request_id: events[request_id] for request_id in record.pending_request_ids if request_id in events}

    async def save(self, continuation: Continuation, checkpoint_id: str, pause: JointPause | None = None) -> None:
        """Record a saved pause; with ``pause`` (the recorder's joint save) record and checkpoint in one statement."""
        workflow_name, signature_hash = self.identity()
        now = self.store.now()
        record = ContinuationRecord(
            token_hash=hash_secret(continuation.secret),
            workflow_name=workflow_name,
            signature_hash=signature_hash,
            checkpoint_id=checkpoint_id,
            pending_request_ids=tuple(continuation.pending_requests),
            created_at=now,
            expires_at=now + self.store.ttl_seconds,
            response_types=describe_requests(continuation.known_requests()),
            conversation=self.memory.conversation,
        )
        await (self.store.save(record) if pause is None else pause.write(record))

    async def still_claimable(self, continuation: Continuation) -> ContinuationRecord | None:
        """``continuation``'s record while the store has it claimable (any conversation, no identity check)."""
        record = await self.store.get(hash_secret(continuation.secret))
        return record if record is not None and record.is_claimable(self.store.now()) else None

    async def claim(self, claim_hash: str) -> bool:
        """The store's claim, shielded (AGENTS.md invariant 28); on cancellation a won claim is released first."""
        claimer = secrets.token_hex(16)
        claim = asyncio.ensure_future(self.store.claim(claim_hash, claimer=claimer))
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            if await _outcome(claim) is True:
                await _outcome(asyncio.ensure_future(self.store.release(claim_hash, claimer)))
            raise

    async def abandon(self, token: object, *, force: bool, keep_checkpoint: bool) -> None:
        """Abandon the record of a pause held elsewhere and delete its checkpoint (``force``: errors ignored)."""
        try:
            record = await self.claimable(token, allow_expired=force)
            if not await self.store.abandon(record.token_hash, force=force):
                raise ContinuationAuthorityError()
            if not keep_checkpoint:  # the abandoned pause's checkpoint backs nothing any more
                await delete_checkpoint(self.checkpoint_storage, record.checkpoint_id)
        except ContinuationAuthorityError:
            if not force:
                raise


async def _outcome(operation: Awaitable[bool]) -> bool | None:
    """Wait for a shielded store operation despite further cancellations; None when it failed (then spent)."""
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
    """The earlier rounds' requests a record names, as type-only events: their answers are checked before the claim."""
    events: dict[str, WorkflowEvent[Any]] = {}
    for request_id, text in (record.response_types or {}).items():
        response_type = None if request_id in pending else resolve_type(text)
        if response_type is not None:
            events[request_id] = WorkflowEvent.request_info(request_id, "", None, response_type)
    return events
