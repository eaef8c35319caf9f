"""The continuation store protocol, its record, and the optional capabilities a backend may add.

A pause is recorded by the sha256 of its token's secret (never the secret); any process sharing the store
can resume it once. A process that dies after its claim leaves it ``claimed``; restore ``checkpoint_id``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, Protocol, cast, runtime_checkable

from agent_framework import CheckpointStorage, WorkflowCheckpoint
from typing_extensions import Self

from ._step_cache import StepCacheOffer, implements

ContinuationStatus = Literal["issued", "claimed", "abandoned"]
"""Lifecycle of a stored continuation: ``issued`` (resumable) -> ``claimed`` or ``abandoned`` (final)."""

DEFAULT_TTL_SECONDS = 24 * 60 * 60.0
DEFAULT_RETENTION_SECONDS = 24 * 60 * 60.0

MAX_DURATION_SECONDS = 10 * 365 * 24 * 3600.0
"""Longest ``ttl`` or ``retention`` a store accepts (ten years): Redis expiry times must fit its range."""


def duration_seconds(value: float | timedelta, name: str) -> float:
    """``value`` (seconds or a ``timedelta``) in seconds, checked (positive, at most ten years)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        seconds = float(value) if abs(value) < 1e300 else float("inf")  # an int past a float's range: too long
    else:
        raise TypeError(f"{name} must be a number of seconds or a timedelta, got {type(value).__name__}.")
    if not 0 < seconds <= MAX_DURATION_SECONDS:
        raise ValueError(f"{name} must be a positive, finite number of seconds (or timedelta) of at most ten years.")
    return seconds


@dataclass(frozen=True, slots=True)
class ContinuationRecord:
    """What a :class:`ContinuationStore` keeps about one issued continuation token.

    Attributes:
        token_hash: Hex sha256 of the token's secret (:func:`continuation_token_hash`), never the secret.
        workflow_name: Name of the workflow that paused.
        signature_hash: Core's ``graph_signature_hash``: another version cannot resume the pause.
        checkpoint_id: The checkpoint saved at the pause.
        pending_request_ids: Request ids the pause waits for.
        created_at: When the token was issued (the store's clock, seconds since the epoch).
        expires_at: When the token stops being accepted.
        status: ``issued``, ``claimed`` (spent) or ``abandoned``.
        response_types: Request id -> response type text for the whole run chain (checked before a claim).
        conversation: Digest of the agent conversation it belongs to; no other may resume or abandon it.
    """

    token_hash: str
    workflow_name: str
    signature_hash: str
    checkpoint_id: str
    pending_request_ids: tuple[str, ...]
    created_at: float
    expires_at: float
    status: ContinuationStatus = "issued"
    response_types: Mapping[str, str] | None = None
    conversation: str | None = None

    def is_claimable(self, now: float) -> bool:
        """True when the record is ``issued`` and unexpired at ``now`` (the store's clock)."""
        return self.status == "issued" and now < self.expires_at

    def belongs_to(self, workflow_name: str, signature_hash: str) -> bool:
        """True when the record was issued by this workflow name and ``graph_signature_hash``."""
        return self.workflow_name == workflow_name and self.signature_hash == signature_hash

    def to_fields(self) -> dict[str, str]:
        """The record's one serial form: text fields but ``token_hash`` (the key), None ones left out."""
        fields = {
            "workflow_name": self.workflow_name,
            "signature_hash": self.signature_hash,
            "checkpoint_id": self.checkpoint_id,
            "pending_request_ids": json.dumps(list(self.pending_request_ids)),
            "created_at": repr(self.created_at),
            "expires_at": repr(self.expires_at),
            "status": self.status,
        }
        if self.response_types is not None:
            fields["response_types"] = json.dumps(dict(self.response_types), sort_keys=True)
        if self.conversation is not None:
            fields["conversation"] = self.conversation
        return fields

    def row(self) -> tuple[Any, ...]:
        """A SQL store's new row: the hash, :data:`RECORD_COLUMNS` (None if absent), ``created_at``."""
        fields = self.to_fields()
        return (self.token_hash, *(fields.get(name) for name in RECORD_COLUMNS), self.created_at)

    @classmethod
    def from_row(cls, token_hash: str, values: Sequence[Any]) -> ContinuationRecord:
        """A record from the :data:`RECORD_COLUMNS` a SQL store read (None: absent)."""
        return cls.from_fields(
            token_hash, {name: value for name, value in zip(RECORD_COLUMNS, values, strict=True) if value is not None}
        )

    @classmethod
    def from_fields(cls, token_hash: str, fields: Mapping[str, Any]) -> ContinuationRecord:
        """A record from the fields :meth:`to_fields` wrote, read back as text, bytes or native values.

        Raises:
            KeyError: A field is missing.
            ValueError: A field cannot be read.
        """
        data = {key: value.decode("utf-8") if isinstance(value, bytes) else value for key, value in fields.items()}
        response_types = data.get("response_types")
        conversation = data.get("conversation")
        return cls(
            token_hash=token_hash,
            workflow_name=str(data["workflow_name"]),
            signature_hash=str(data["signature_hash"]),
            checkpoint_id=str(data["checkpoint_id"]),
            pending_request_ids=tuple(json.loads(data["pending_request_ids"])),
            created_at=float(data["created_at"]),
            expires_at=float(data["expires_at"]),
            status=cast(ContinuationStatus, str(data["status"])),
            response_types=None if response_types is None else _text_mapping(json.loads(response_types)),
            conversation=None if conversation is None else str(conversation),
        )


RECORD_COLUMNS = tuple(field.name for field in fields(ContinuationRecord))[1:]
"""A record's table columns besides ``token_hash`` (its fields), in the SQL stores' order."""


def _text_mapping(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("response_types must be a JSON object of request id -> type text.")
    return {str(key): str(item) for key, item in cast("dict[Any, Any]", value).items()}


class AsyncClosing:
    """``async with`` for a store or storage that holds connections: the block's end awaits ``aclose()``."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release what this object holds; a second call does nothing."""
        raise NotImplementedError


class PurgeSchedule:
    """When a store's automatic purge is due: at its first write, then at most once per ``interval`` (None: never)."""

    def __init__(self, interval: float | timedelta | None) -> None:
        self.interval = None if interval is None else duration_seconds(interval, "purge_interval")
        self._next = float("-inf")  # the first write purges

    def due(self, now: float) -> bool:
        return self.interval is not None and now >= self._next

    def ran(self, now: float) -> None:
        if self.interval is not None:
            self._next = now + self.interval


class TimedStore(AsyncClosing):
    """What the continuation stores share: ``ttl`` and ``retention`` checked (in seconds) and the clock."""

    def __init__(self, ttl: float | timedelta, retention: float | timedelta, clock: Callable[[], float]) -> None:
        self._ttl = duration_seconds(ttl, "ttl")
        self._retention = duration_seconds(retention, "retention")
        self._clock = clock

    @property
    def ttl_seconds(self) -> float:
        """How long an issued token is accepted, in seconds."""
        return self._ttl

    def now(self) -> float:
        """The store's clock, seconds since the epoch."""
        return self._clock()


@runtime_checkable
class ContinuationStore(Protocol):
    """Durable home of continuation tokens shared by several processes; give one to ``build()``.

    Every implementation keeps:

    * ``claim``, ``abandon`` and ``supersede`` are atomic compare-and-set on ``status == "issued"``:
      among concurrent callers in any process at most one gets True.
    * ``abandoned`` is final; ``claimed`` too, except that ``release`` undoes a claim for the run
      that made it (its ``claimer`` secret), cancelled before its user code ran.
    * ``supersede`` finds the record by ``checkpoint_id``; expiry uses :meth:`now`.

    Every ``token_hash`` is the hex sha256 of a token's secret.
    """

    @property
    def ttl_seconds(self) -> float:
        """How long an issued token is accepted, in seconds."""
        ...

    def now(self) -> float:
        """The store's clock, seconds since the epoch (used for ``created_at`` and expiry)."""
        ...

    async def save(self, record: ContinuationRecord) -> None:
        """Insert ``record`` of a freshly issued token (status ``issued``, new ``token_hash``)."""
        ...

    async def get(self, token_hash: str) -> ContinuationRecord | None:
        """The record for ``token_hash`` (any status), or None when there is none; never mutates."""
        ...

    async def claim(self, token_hash: str, *, claimer: str | None = None) -> bool:
        """Atomically move ``issued`` and unexpired -> ``claimed``; True for one winner (``claimer``: see release)."""
        ...

    async def release(self, token_hash: str, claimer: str) -> bool:
        """Atomically undo ``claimer``'s claim (-> ``issued``) of a run cancelled before user code; True if done."""
        ...

    async def supersede(self, checkpoint_id: str, *, since: float) -> bool:
        """Atomically abandon the ``issued`` record of the pause saved in ``checkpoint_id`` (a restore, first).

        Returns:
            False when the token was claimed at or after ``since`` (the restore's start, by :meth:`now`):
            the restore must not run. Otherwise True (claimed before ``since``: the owner's recovery path).
        """
        ...

    async def abandon(self, token_hash: str, *, force: bool = False) -> bool:
        """Atomically move ``issued`` -> ``abandoned``; True when this call did (``force``: expired too)."""
        ...

    async def aclose(self) -> None:
        """Release the store's connections (or file); ``async with store:`` calls it at the block's end."""
        ...


@runtime_checkable
class StepSaveBuffer(Protocol):
    """An optional capability of a checkpoint storage: buffer a run's step saves until its next save or end.

    Used only for runs that delete their chain when they end; :meth:`write_buffered` runs however it ends.
    """

    async def save_buffered(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """Save ``checkpoint`` with ``offer`` (as ``save_with_offer``), or buffer a step's until the run's next save."""
        ...

    async def write_buffered(self, checkpoint_ids: list[str]) -> None:
        """Write the buffered saves of the runs that saved one of ``checkpoint_ids`` (the run ended)."""
        ...


@runtime_checkable
class BatchDelete(Protocol):
    """An optional capability of a checkpoint storage: delete several checkpoints in one round trip."""

    async def delete_many(self, checkpoint_ids: list[str]) -> int:
        """Delete every checkpoint of ``checkpoint_ids`` (one missing is not an error); return how many were."""
        ...


class JointPause(Protocol):
    """A pause's checkpoint save a :class:`Joint` planned: written with its record, or alone (exactly one)."""

    @property
    def checkpoint_id(self) -> str:
        """The pause's checkpoint id."""
        ...

    async def write(self, record: ContinuationRecord) -> None:
        """Save ``record`` and the checkpoint in one statement (a duplicate hash: ``ValueError``, as ``save``)."""
        ...

    async def write_alone(self) -> None:
        """Save the checkpoint without a record (the run ended without issuing its token)."""
        ...


class Joint(Protocol):
    """A continuation store and a checkpoint storage that reach one database (see :class:`JointStore`)."""

    async def plan_pause(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> JointPause | None:
        """Plan a pause's checkpoint save to write with its record; None: save it the usual way."""
        ...

    async def read(self, token_hash: str) -> tuple[ContinuationRecord | None, Callable[[], WorkflowCheckpoint] | None]:
        """The record of ``token_hash`` and what decodes its checkpoint (None: load it), in one round trip."""
        ...


@runtime_checkable
class JointStore(Protocol):
    """An optional capability of a continuation store: a pause's record and its checkpoint in one round trip."""

    def joint(self, storage: CheckpointStorage) -> Joint | None:
        """This store paired with ``storage``, or None when the two cannot share a statement."""
        ...


def is_continuation_store(store: object) -> bool:
    """``isinstance(store, ContinuationStore)``, remembered per class (``_step_cache.implements``)."""
    return implements(store, ContinuationStore)
