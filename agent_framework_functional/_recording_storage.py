"""A checkpoint storage proxy that records what one durable run saved, so the run can clean up after itself.

``StoreAuthority`` hands core a :class:`RecordingCheckpointStorage` for every run of an instance with a
continuation store: the id of the pause's checkpoint goes into the store's record, the checkpoints of a
run chain that back no issued token are deleted once the run ended well (``drop_chain``), and a
remote resume learns from a failed load that a winner already finished the pause (``gone``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from agent_framework import CheckpointStorage, WorkflowCheckpoint


class RecordingCheckpointStorage:
    """Checkpoint storage proxy that remembers the id of the last checkpoint saved through it (internal)."""

    __slots__ = ("gone", "inner", "last_saved_id", "resumed_checkpoint_id", "saved_ids")

    def __init__(self, inner: CheckpointStorage) -> None:
        self.inner = inner
        self.last_saved_id: str | None = None
        self.saved_ids: list[str] = []
        # The checkpoint of the pause this run claimed (set by the claim): deleted once the run ends well.
        self.resumed_checkpoint_id: str | None = None
        # Set for a remote resume: raises the authority error when the pause was resumed meanwhile.
        self.gone: Callable[[], Awaitable[None]] | None = None

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        checkpoint_id = await self.inner.save(checkpoint)
        self.last_saved_id = checkpoint_id
        self.saved_ids.append(checkpoint_id)
        return checkpoint_id

    async def drop_chain(self, *, keep: str | None) -> None:
        """Delete the checkpoints this run saved (but ``keep``) and the one of the pause it resumed.

        Called when a run ended well: it paused again (``keep`` is the new pause's checkpoint, which
        backs the new token) or finished. None of the others backs an issued token any more. A
        failed delete is ignored: the checkpoint stays until the host deletes it.
        """
        doomed = [checkpoint_id for checkpoint_id in self.saved_ids if checkpoint_id != keep]
        if self.resumed_checkpoint_id is not None and self.resumed_checkpoint_id != keep:
            doomed.append(self.resumed_checkpoint_id)
        self.saved_ids, self.resumed_checkpoint_id = [], None
        for checkpoint_id in doomed:
            with contextlib.suppress(Exception):  # cleanup must never fail the run
                await self.inner.delete(checkpoint_id)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        try:
            return await self.inner.load(checkpoint_id)
        except Exception:
            if self.gone is not None:
                await self.gone()  # a winner finished and deleted it: this resume lost (authority error)
            raise

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return await self.inner.list_checkpoints(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: str) -> bool:
        return await self.inner.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return await self.inner.get_latest(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return await self.inner.list_checkpoint_ids(workflow_name=workflow_name)
