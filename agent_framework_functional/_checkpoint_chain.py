"""The checkpoint recorder: core never deletes checkpoints, so a run chain deletes its spent ones itself.

Those that back no token go when it pauses again; at the finish they stay ``checkpoint_retention`` (AGENTS.md
invariant 30).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agent_framework import CheckpointStorage, WorkflowCheckpoint

from ._expiry import checkpoint_deletions, delete_checkpoints, retain_checkpoints, sweep_retained
from ._step_cache import StepCacheOffer, implements, owns, takes_offers
from ._store import Joint, JointPause, StepSaveBuffer


class RecordingCheckpointStorage:
    """Checkpoint storage proxy that remembers what one run saved through ``inner``.

    ``retention`` 0: deleted at the finish; None: every checkpoint kept (:meth:`delete_chain` deletes nothing).
    """

    __slots__ = (
        "buffer",
        "failed_load",
        "gone",
        "inner",
        "joint",
        "joint_pause",
        "keep",
        "last_saved_id",
        "offer",
        "offered",
        "preloaded",
        "resumed_checkpoint_id",
        "retention",
        "saved_ids",
    )

    def __init__(self, inner: CheckpointStorage, *, retention: float | None = 0.0) -> None:
        sweep_retained()  # each run with checkpoint storage deletes what is past its retention
        self.inner = inner
        # A storage that stores each step result once takes the run's offers (checked once per run).
        self.offered = inner if takes_offers(inner) else None
        # The step-cache offer of the save core is about to make (set by ``_core_compat.offering``).
        self.offer: StepCacheOffer | None = None
        self.retention = retention
        self.keep = retention is None
        # A storage that buffers step saves, for a run that deletes its chain when it ends (checked once here).
        buffers = implements(inner, StepSaveBuffer) and owns(inner, "save_buffered", beside="save")
        self.buffer = inner if not self.keep and buffers else None
        self.last_saved_id: str | None = None
        self.saved_ids: list[str] = []
        # The checkpoint of the pause this run claimed (set by the claim): deleted once the run ends well.
        self.resumed_checkpoint_id: str | None = None
        # Set for a remote resume: raises the authority error when the pause was resumed meanwhile.
        self.gone: Callable[[], Awaitable[None]] | None = None
        # The pause's checkpoint a remote resume loaded before core's run: core's restore of that id takes it (once).
        self.preloaded: WorkflowCheckpoint | None = None
        # A restore's load that failed before core's run (id, error): core's load raises it (core's failure surface).
        self.failed_load: tuple[str, Exception] | None = None
        # Set by ``StoreAuthority`` (``_store.JointStore``): a pause's save waits in ``joint_pause`` for its record.
        self.joint: Joint | None = None
        self.joint_pause: JointPause | None = None

    @property
    def drops_final_checkpoint(self) -> bool:
        """True when a finished run's checkpoints are deleted at once: core need not save a clean finish's."""
        return self.retention == 0

    def save(self, checkpoint: WorkflowCheckpoint) -> Coroutine[Any, Any, str]:
        offer, self.offer = self.offer, None  # taken at the call: core builds the checkpoint, then calls this
        return self._save(checkpoint, offer)

    async def _save(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        pause = None
        if self.joint is not None and checkpoint.pending_request_info_events and not self.keep:
            pause = self.joint_pause = await self.joint.plan_pause(checkpoint, offer)
        if pause is not None:
            checkpoint_id = pause.checkpoint_id
        elif self.buffer is not None:
            checkpoint_id = await self.buffer.save_buffered(checkpoint, offer)
        elif self.offered is not None:
            checkpoint_id = await self.offered.save_with_offer(checkpoint, offer)
        else:
            checkpoint_id = await self.inner.save(checkpoint)
        self.last_saved_id = checkpoint_id
        self.saved_ids.append(checkpoint_id)
        return checkpoint_id

    def take_joint_pause(self) -> JointPause | None:
        """The pause's checkpoint save, to write with its record (None: saved already)."""
        pause, self.joint_pause = self.joint_pause, None
        return pause

    async def flush(self) -> None:
        """The run ended: save a joint pause no record took alone, write a buffer's step saves (before a failure)."""
        pause = self.take_joint_pause()
        if pause is not None:
            await pause.write_alone()
        if self.buffer is not None and self.saved_ids:
            await self.buffer.write_buffered(list(self.saved_ids))

    async def delete_chain(self, *, keep: str | None) -> None:
        """Delete the checkpoints this run saved (but ``keep``) and the resumed pause's; failures are ignored."""
        resumed, self.resumed_checkpoint_id = self.resumed_checkpoint_id, None
        await self.delete_superseded(keep=keep, resumed=resumed)

    async def finish_chain(self) -> None:
        """The run finished: keep its chain's checkpoints for the retention (0: now); ids stay for :meth:`flush`."""
        sweep_retained()
        if self.retention == 0:
            await self.delete_chain(keep=None)
            return
        resumed, self.resumed_checkpoint_id = self.resumed_checkpoint_id, None
        if self.retention is not None:
            kept = [checkpoint_id for checkpoint_id in (resumed, *self.saved_ids) if checkpoint_id is not None]
            retain_checkpoints(self.inner, kept, self.retention)

    async def delete_superseded(self, *, keep: str | None, resumed: str | None = None) -> None:
        """Delete the checkpoints this run saved before its pause ``keep`` (nothing references them any more)."""
        saved, self.saved_ids = self.saved_ids, []
        doomed = [
            checkpoint_id for checkpoint_id in (*saved, resumed) if checkpoint_id is not None and checkpoint_id != keep
        ]
        if doomed and not self.keep:  # failures ignored: cleanup must never fail the run
            await delete_checkpoints(self.inner, doomed)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        preloaded, self.preloaded = self.preloaded, None
        if preloaded is not None and preloaded.checkpoint_id == checkpoint_id:
            return preloaded
        failed, self.failed_load = self.failed_load, None
        if failed is not None and failed[0] == checkpoint_id:
            raise failed[1]
        await checkpoint_deletions()  # an abandoned pause's checkpoint is gone before any restore reads it
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
