"""What the Redis and PostgreSQL checkpoint storages share: options, the body codec, sealing, the listing, deltas.

Core's ``FileCheckpointStorage`` is the reference: a checkpoint that does not load, or whose body names
another workflow than the one it is filed under, is skipped by the listing with a warning. A whole
body is written and read only through :func:`encode_body` / :func:`decode_body` (PostgreSQL; Redis keeps
its own messages), with core's private ``encode_checkpoint_value`` / ``decode_checkpoint_value``
(``agent_framework._workflows._checkpoint_encoding``) through ``checkpoint_pickles.py`` (each pickle
checked before it is decoded), imported on first use and pinned by
``tests/stores/test_checkpoint_storage_contract.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from .._store import AsyncClosing
from .checkpoint_delta import DeltaSave, StepCacheDeduper
from .checkpoint_pickles import decode_value, encode_value, unsavable
from .checkpoint_seal import CheckpointSealer, chunk_context, head_context, is_sealed, warn_unsealed

if TYPE_CHECKING:
    from .._step_cache import StepCacheOffer


def encode_body(checkpoint: WorkflowCheckpoint, allowed_types: frozenset[str]) -> bytes:
    """Return the stored bytes of ``checkpoint``: core's checkpoint encoding as UTF-8 JSON.

    Args:
        checkpoint: The checkpoint to store.
        allowed_types: Extra ``"module:QualName"`` types the body may hold.

    Returns:
        The body.

    Raises:
        WorkflowCheckpointException: It cannot be encoded, or would not decode under ``allowed_types``.
    """
    try:
        encoded = encode_value(checkpoint.to_dict())
        decode_value(encoded, allowed_types)  # refuse now what a load would refuse
        return json.dumps(encoded, ensure_ascii=False).encode("utf-8")
    except Exception as exc:
        raise unsavable(checkpoint.checkpoint_id) from exc


def decode_body(checkpoint_id: str, body: bytes, allowed_types: frozenset[str]) -> WorkflowCheckpoint:
    """Return the checkpoint stored as ``body``; any problem is a ``WorkflowCheckpointException``.

    Args:
        checkpoint_id: The checkpoint's id, for the message.
        body: What :func:`encode_body` returned (or what someone else wrote in its place).
        allowed_types: Extra ``"module:QualName"`` types the body may hold.

    Returns:
        The checkpoint.

    Raises:
        WorkflowCheckpointException: The body is not UTF-8 JSON, is nested too deeply, holds a type
            outside the allow-list, or is not a checkpoint.
    """
    try:
        decoded = decode_value(json.loads(body.decode("utf-8")), allowed_types)
        return WorkflowCheckpoint.from_dict(decoded)
    except WorkflowCheckpointException:
        raise  # core's own refusal (a type outside the allow-list), with its message
    except (RecursionError, MemoryError) as exc:
        raise WorkflowCheckpointException(f"Checkpoint {checkpoint_id} is nested too deeply to load.") from exc
    except Exception as exc:
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id} cannot be loaded: its stored body is not a checkpoint this storage "
            f"accepts ({type(exc).__name__})."
        ) from exc


def check_sealer(owner: str, sealer: CheckpointSealer | None) -> CheckpointSealer | None:
    """Return ``sealer`` once checked; without one, warn once per storage class and process."""
    if sealer is not None and not isinstance(sealer, CheckpointSealer):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError("sealer must be a CheckpointSealer (or None).")
    if sealer is None:
        warn_unsealed(owner)
    return sealer


def check_allowed_types(allowed_checkpoint_types: list[str] | None) -> frozenset[str]:
    """The allow-list as a frozen set; ``TypeError`` unless every entry is a ``"module:QualName"`` string."""
    types = list(allowed_checkpoint_types or [])
    if not all(isinstance(name, str) for name in types):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError("allowed_checkpoint_types must be a list of 'module:QualName' strings.")
    return frozenset(types)


class DurableCheckpointStorage(AsyncClosing):
    """The shared part of ``RedisCheckpointStorage`` and ``PostgresCheckpointStorage`` (internal)."""

    logger: ClassVar[logging.Logger]
    backend: ClassVar[str]
    """The backend's name, for messages (``"Redis"``, ``"PostgreSQL"``)."""
    unreadable: ClassVar[str]
    """The message of stored parts that do not decode (``{checkpoint_id}``, ``{error}``: the exception's type)."""
    sealer: CheckpointSealer | None
    _allowed_types: frozenset[str]
    _deduper: StepCacheDeduper

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Store a copy of ``checkpoint`` (replacing one with the same id) and return its id.

        Args:
            checkpoint: The checkpoint to save.

        Returns:
            ``checkpoint.checkpoint_id``.

        Raises:
            WorkflowCheckpointException: The checkpoint cannot be encoded, or would not decode under
                this storage's allowed types (add the type to ``allowed_checkpoint_types``).
        """
        return await self.save_with_offer(checkpoint, None)

    async def save_with_offer(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """:meth:`save`, each new step result stored once when ``offer`` (a run's recorder hands it) fits it."""
        raise NotImplementedError

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Return the workflow's checkpoints that still exist and load, oldest save first.

        Keyword Args:
            workflow_name: The workflow's name.
        """
        raise NotImplementedError

    @property
    def allowed_checkpoint_types(self) -> frozenset[str]:
        """The extra ``"module:QualName"`` types this storage decodes (besides core's safe set)."""
        return self._allowed_types

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """Return the workflow's checkpoint with the latest ``timestamp`` (as core's storages order them).

        Keyword Args:
            workflow_name: The workflow's name.

        Returns:
            That checkpoint, or None when the workflow has none.
        """
        checkpoints = await self.list_checkpoints(workflow_name=workflow_name)
        if not checkpoints:
            return None
        return max(checkpoints, key=lambda checkpoint: datetime.fromisoformat(checkpoint.timestamp))

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        """Return the ids of the checkpoints :meth:`list_checkpoints` returns, oldest save first.

        Keyword Args:
            workflow_name: The workflow's name.

        Returns:
            Checkpoint ids; only checkpoints that load under the allow-list.
        """
        return [checkpoint.checkpoint_id for checkpoint in await self.list_checkpoints(workflow_name=workflow_name)]

    async def _listed(
        self, workflow_name: str, loads: Iterable[tuple[str, Callable[[], Awaitable[WorkflowCheckpoint]]]]
    ) -> list[WorkflowCheckpoint]:
        """The checkpoints that load and whose body names ``workflow_name``, in order; others skipped with a warning."""
        checkpoints: list[WorkflowCheckpoint] = []
        for checkpoint_id, load in loads:
            try:
                checkpoint = await load()
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

    def _whole(self, checkpoint_id: str, body: bytes) -> WorkflowCheckpoint:
        """Open (with a sealer, before any decoding) and decode one whole body; every failure: core's exception."""
        opened = self._unseal(checkpoint_id, body, checkpoint_id.encode("utf-8"))
        return same_id(checkpoint_id, decode_body(checkpoint_id, opened, self._allowed_types))

    def _assembled_inline(
        self, checkpoint_id: str, refs: list[tuple[str, int]], texts: list[list[str]]
    ) -> WorkflowCheckpoint:
        """The checkpoint whose head is the last of its own segment's opened chunks; every failure: core's exception."""
        try:
            checkpoint = self._deduper.assemble_inline(checkpoint_id, refs, texts)
        except WorkflowCheckpointException:
            raise
        except Exception as exc:  # RecursionError, core's decoder on a malformed value, ...
            raise WorkflowCheckpointException(
                self.unreadable.format(checkpoint_id=checkpoint_id, error=type(exc).__name__)
            ) from exc
        return same_id(checkpoint_id, checkpoint)

    def _unseal(self, checkpoint_id: str, body: bytes, context: bytes) -> bytes:
        """Open a sealed piece (a sealer configured), or refuse a sealed one (none configured)."""
        if self.sealer is not None:
            return self.sealer.open(body, context=context)  # before any decoding
        if is_sealed(body):
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id} is sealed, but this storage has no sealer: pass sealer=CheckpointSealer()"
            )
        return body

    async def _store_delta(self, checkpoint: WorkflowCheckpoint, plan: DeltaSave | None) -> None:
        """Store a head over chunks (:meth:`_write_delta`); once more as one segment if one went missing meanwhile."""
        for _ in range(2):
            if plan is None:
                break
            head, chunk = self._sealed_parts(checkpoint.checkpoint_id, plan)
            if await self._write_delta(checkpoint, plan, head, chunk):
                self._deduper.saved(plan, checkpoint.checkpoint_id)
                return
            self._deduper.forget(plan)
            plan = self._deduper.prepare(checkpoint, plan.offer, fresh=True)
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint.checkpoint_id} could not be stored: its step cache changed in {self.backend} "
            "meanwhile."
        )

    async def _write_delta(
        self, checkpoint: WorkflowCheckpoint, plan: DeltaSave, head: bytes, chunk: bytes | None
    ) -> bool:
        """Write a head and its chunk in one round trip; False (nothing written): a referenced segment lost chunks."""
        raise NotImplementedError

    def _sealed_parts(self, checkpoint_id: str, plan: DeltaSave) -> tuple[bytes, bytes | None]:
        """The head and the chunk (if any) as stored: sealed with a sealer, the head to its id and references."""
        head = plan.body.encode("utf-8")  # empty: the head is in the chunk (inline heads)
        chunk = None if plan.chunk is None else plan.chunk.encode("utf-8")
        if self.sealer is not None:  # the head binds its id and references; a chunk its segment and index
            if head:
                head = self.sealer.seal(head, context=head_context(checkpoint_id, plan.references.encode("utf-8")))
            if chunk is not None:
                chunk = self.sealer.seal(chunk, context=chunk_context(plan.segment, plan.chunk_index))
        return head, chunk

    def _head(self, checkpoint_id: str, body: bytes, references: bytes) -> tuple[bytes, list[tuple[str, int]]]:
        """A stored head opened (bound to its id and references), and its parsed references."""
        head = self._unseal(checkpoint_id, body, head_context(checkpoint_id, references))
        return head, parse_references(checkpoint_id, references, self.backend)

    def _assembled(
        self,
        checkpoint_id: str,
        head: bytes,
        references: bytes,
        chunks: list[list[str]] | None,
    ) -> WorkflowCheckpoint:
        """The checkpoint a head and its opened chunks make (None: a chunk is gone); failures: core's exception."""
        if chunks is None:
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id} lost part of its step cache in {self.backend} (expired or deleted)."
            )
        try:
            checkpoint = self._deduper.assemble(checkpoint_id, head.decode("utf-8"), references.decode("utf-8"), chunks)
        except WorkflowCheckpointException:
            raise
        except Exception as exc:  # UnicodeDecodeError, RecursionError, core's decoder on a malformed value, ...
            raise WorkflowCheckpointException(
                self.unreadable.format(checkpoint_id=checkpoint_id, error=type(exc).__name__)
            ) from exc
        return same_id(checkpoint_id, checkpoint)


def same_id(checkpoint_id: str, checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    """Return ``checkpoint`` when it is the one stored under ``checkpoint_id``; refuse another's body."""
    if checkpoint.checkpoint_id != checkpoint_id:
        raise WorkflowCheckpointException(
            f"The body stored for checkpoint {checkpoint_id} is another checkpoint's; it was not loaded."
        )
    return checkpoint


_MAX_REFERENCES = 4096


def parse_references(checkpoint_id: str, references: bytes, backend: str) -> list[tuple[str, int]]:
    """Read stored references ``[[segment id, chunk count], ...]``; anything else is ``WorkflowCheckpointException``."""
    try:
        refs = json.loads(references.decode("utf-8"))
        if not isinstance(refs, list) or len(cast("list[Any]", refs)) > _MAX_REFERENCES:
            raise ValueError("not a list of references")
        parsed: list[tuple[str, int]] = []
        for ref in cast("list[Any]", refs):
            if not isinstance(ref, list) or len(cast("list[Any]", ref)) != 2:
                raise ValueError("a reference is not [segment, count]")
            segment, count = cast("list[Any]", ref)
            if not isinstance(segment, str) or type(count) is not int or count < 0:
                raise ValueError("a reference is not [segment, count]")
            parsed.append((segment, count))
    except Exception as exc:  # UnicodeDecodeError, JSONDecodeError, RecursionError, the shape
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id} in {backend} has corrupted segment references; it was not loaded."
        ) from exc
    return parsed
