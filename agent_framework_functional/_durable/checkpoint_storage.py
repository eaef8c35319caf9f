"""What the SQLite, Redis and PostgreSQL checkpoint storages share: options, body codec, sealing, listing, deltas.

As core's ``FileCheckpointStorage``, the listing skips with a warning a checkpoint that does not load or whose
body names another workflow. Bodies are core's checkpoint encoding, each pickle checked before it is decoded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._core_compat import core_encode_checkpoint_value
from .._store import AsyncClosing
from .checkpoint_delta import DeltaSave, StepCacheDeduper
from .checkpoint_pickles import decode_value, unsavable
from .checkpoint_seal import CheckpointSealer, chunk_context, is_sealed, warn_unsealed

if TYPE_CHECKING:
    from .._step_cache import StepCacheOffer


def encode_body(checkpoint: WorkflowCheckpoint, allowed_types: frozenset[str]) -> bytes:
    """Core's encoding of ``checkpoint`` as UTF-8 JSON; WorkflowCheckpointException if a load would refuse it."""
    try:
        encoded = core_encode_checkpoint_value(checkpoint.to_dict())
        decode_value(encoded, allowed_types)  # refuse now what a load would refuse
        return json.dumps(encoded, ensure_ascii=False).encode("utf-8")
    except Exception as exc:
        raise unsavable(checkpoint.checkpoint_id) from exc


def decode_body(checkpoint_id: str, body: bytes, allowed_types: frozenset[str]) -> WorkflowCheckpoint:
    """The checkpoint stored as ``body``; WorkflowCheckpointException when it is not one or not allowed.

    (Not UTF-8 JSON, nested too deeply, a type outside the allow-list, or not a checkpoint.)
    """
    try:
        return WorkflowCheckpoint.from_dict(decode_value(json.loads(body.decode("utf-8")), allowed_types))
    except WorkflowCheckpointException:
        raise  # core's own refusal (a type outside the allow-list), with its message
    except (RecursionError, MemoryError) as exc:
        raise WorkflowCheckpointException(f"Checkpoint {checkpoint_id} is nested too deeply to load.") from exc
    except Exception as exc:
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id} cannot be loaded: its stored body is not a checkpoint this storage "
            f"accepts ({type(exc).__name__})."
        ) from exc


class DurableCheckpointStorage(AsyncClosing):
    """The shared part of the SQLite, Redis and PostgreSQL checkpoint storages (internal)."""

    logger: ClassVar[logging.Logger]
    backend: ClassVar[str]
    """The backend's name, for messages (``"Redis"``, ``"PostgreSQL"``)."""
    unreadable: ClassVar[str]
    """The message of stored parts that do not decode (``{checkpoint_id}``, ``{error}``: the exception's type)."""
    sealer: CheckpointSealer | None
    _allowed_types: frozenset[str]
    _deduper: StepCacheDeduper

    def _configure(
        self, owner: str, sealer: CheckpointSealer | None, allowed: list[str] | None, *, inline_heads: bool = True
    ) -> None:
        """Keep the checked sealer (none: warn once per class) and allow-list; ``TypeError`` on either."""
        if sealer is not None and not isinstance(sealer, CheckpointSealer):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError("sealer must be a CheckpointSealer (or None).")
        if not all(isinstance(name, str) for name in allowed or []):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError("allowed_checkpoint_types must be a list of 'module:QualName' strings.")
        if sealer is None:
            warn_unsealed(owner)
        self.sealer, self._allowed_types = sealer, frozenset(allowed or [])
        self._deduper = StepCacheDeduper(self._allowed_types, inline_heads=inline_heads)

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Store a copy of ``checkpoint`` (replacing one with the same id) and return its id.

        Raises:
            WorkflowCheckpointException: The checkpoint cannot be encoded, or would not decode under
                this storage's allowed types (add the type to ``allowed_checkpoint_types``).
        """
        return await self.save_with_offer(checkpoint, None)

    async def save_with_offer(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """:meth:`save`, each new step result stored once when ``offer`` (a run's recorder hands it) fits it."""
        plan = self._deduper.prepare(checkpoint, offer)  # before any await: core's dicts may change later
        await self._store_delta(checkpoint, plan)
        return checkpoint.checkpoint_id

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Return the workflow's checkpoints that still exist and load, oldest save first."""
        raise NotImplementedError

    @property
    def allowed_checkpoint_types(self) -> frozenset[str]:
        """The extra ``"module:QualName"`` types this storage decodes (besides core's safe set)."""
        return self._allowed_types

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """Return the workflow's checkpoint with the latest ``timestamp`` (as core orders them), or None.

        Among equal timestamps (one superstep), as core: one no other of them names as previous, the greatest id.
        """
        checkpoints = await self.list_checkpoints(workflow_name=workflow_name)
        if not checkpoints:
            return None
        newest = max(datetime.fromisoformat(checkpoint.timestamp) for checkpoint in checkpoints)
        tied = [checkpoint for checkpoint in checkpoints if datetime.fromisoformat(checkpoint.timestamp) == newest]
        superseded = {checkpoint.previous_checkpoint_id for checkpoint in tied}
        leaves = [checkpoint for checkpoint in tied if checkpoint.checkpoint_id not in superseded]
        return max(leaves or tied, key=lambda checkpoint: checkpoint.checkpoint_id)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        """Return the ids of the checkpoints :meth:`list_checkpoints` returns (those that load), in its order."""
        return [checkpoint.checkpoint_id for checkpoint in await self.list_checkpoints(workflow_name=workflow_name)]

    def _listed(
        self, workflow_name: str, loads: Iterable[tuple[str, Callable[[], WorkflowCheckpoint]]]
    ) -> list[WorkflowCheckpoint]:
        """The checkpoints that load and whose body names ``workflow_name``, in order; others skipped with a warning."""
        checkpoints: list[WorkflowCheckpoint] = []
        for checkpoint_id, load in loads:
            try:
                checkpoint = load()
            except WorkflowCheckpointException as exc:
                self.logger.warning("Skipping checkpoint %s of workflow %s: %s", checkpoint_id, workflow_name, exc)
                continue
            if checkpoint.workflow_name == workflow_name:  # as core's FileCheckpointStorage: the body decides
                checkpoints.append(checkpoint)
            else:
                self.logger.warning(
                    "Skipping checkpoint %s: filed under %s, it belongs to another workflow",
                    checkpoint_id,
                    workflow_name,
                )
        return checkpoints

    def _decoded(self, checkpoint_id: str, assemble: Callable[[], WorkflowCheckpoint]) -> WorkflowCheckpoint:
        """``assemble()`` with its id checked; any failure but core's own exception as :attr:`unreadable`."""
        try:
            checkpoint = assemble()
        except WorkflowCheckpointException:
            raise
        except Exception as exc:  # UnicodeDecodeError, RecursionError, core's decoder on a malformed value, ...
            raise WorkflowCheckpointException(
                self.unreadable.format(checkpoint_id=checkpoint_id, error=type(exc).__name__)
            ) from exc
        if checkpoint.checkpoint_id != checkpoint_id:
            raise WorkflowCheckpointException(
                f"The body stored for checkpoint {checkpoint_id} is another checkpoint's; it was not loaded."
            )
        return checkpoint

    def _unseal(self, checkpoint_id: str, body: bytes, context: bytes) -> bytes:
        """Open a sealed piece (a sealer configured), or refuse a sealed one (none configured)."""
        if self.sealer is not None:
            return self.sealer.open(body, context=context)  # before any decoding
        if is_sealed(body):
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id} is sealed, but this storage has no sealer: pass sealer=CheckpointSealer()"
            )
        return body

    async def _store_delta(self, checkpoint: WorkflowCheckpoint, plan: DeltaSave) -> None:
        """Store a planned save (:meth:`_write_delta`); once more as one segment if one went missing meanwhile."""
        for _ in range(2):
            if await self._write_delta(checkpoint, plan):
                self._deduper.saved(plan, checkpoint.checkpoint_id)
                return
            self._deduper.forget(plan)
            plan = self._deduper.prepare(checkpoint, plan.offer, fresh=True)
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint.checkpoint_id} could not be stored: its step cache changed in {self.backend} "
            "meanwhile."
        )

    async def _write_delta(self, checkpoint: WorkflowCheckpoint, plan: DeltaSave) -> bool:
        """Write a planned save in one round trip; False (nothing written): a referenced segment lost chunks."""
        raise NotImplementedError

    def _sealed_chunk(self, plan: DeltaSave) -> bytes:
        """The chunk (inline heads: never None) as stored, sealed to its segment and index."""
        chunk = (plan.chunk or "").encode("utf-8")
        if self.sealer is not None:
            chunk = self.sealer.seal(chunk, context=chunk_context(plan.segment, plan.chunk_index))
        return chunk
