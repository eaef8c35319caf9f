"""The continuation store protocol and its record: what a durable store keeps about one pause.

With a :class:`ContinuationStore` given to ``build(..., continuation_store=...)``, every saved pause
is also recorded in the store (by the sha256 of its token's secret, never the secret), so that any
process with the same workflow definition, checkpoint storage and store can resume it, exactly once.
The resume path that uses the store is ``_store_authority.StoreAuthority``; the stores themselves
are ``_durable.sqlite_store`` and ``_durable.redis_store``. Both build and read records through
:meth:`ContinuationRecord.to_fields` / :meth:`ContinuationRecord.from_fields`, so a record has one
serial form.

Crash semantics: a process that dies after its claim leaves the record ``claimed``: the token is
spent (at most once), because no store can tell "claimed, then crashed before user code" from
"claimed, ran half the side effects, then crashed". The owner recovers with a checkpoint restore of
``record.checkpoint_id`` (find it with ``await store.get(continuation_token_hash(token))``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, cast, runtime_checkable

ContinuationStatus = Literal["issued", "claimed", "abandoned"]
"""Lifecycle of a stored continuation: ``issued`` (resumable) -> ``claimed`` or ``abandoned`` (final)."""

DEFAULT_TTL_SECONDS = 24 * 60 * 60.0
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


RECORD_COLUMNS = (
    "workflow_name",
    "signature_hash",
    "checkpoint_id",
    "pending_request_ids",
    "created_at",
    "expires_at",
    "status",
    "response_types",
    "conversation",
)
"""A record's table columns besides ``token_hash`` (:meth:`ContinuationRecord.to_fields`), in the SQL stores' order."""


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
        response_types: Request id -> response type as text (``_response_types``) for every request
            of the pause's run chain so far (earlier rounds and the pending ones), so a worker that
            never saw the earlier rounds checks every answer before its claim. None in records
            written before this field existed (then only the pending answers are checked).
        conversation: Digest of the conversation (agent session) the pause belongs to, or None for a
            run outside a conversation: no other conversation's workflow instance may resume or
            abandon it, on any worker (a caller without a session still may, with the token). None in
            records written before this field existed.
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
        """Return True when the record is ``issued`` and not expired at ``now``.

        Args:
            now: Seconds since the epoch, from the store's clock.

        Returns:
            Whether a resume may still claim this continuation.
        """
        return self.status == "issued" and now < self.expires_at

    def belongs_to(self, workflow_name: str, signature_hash: str) -> bool:
        """Return True when the record was issued by this workflow name and version (signature hash).

        Args:
            workflow_name: The resuming workflow's name.
            signature_hash: Core's ``graph_signature_hash`` of the resuming workflow.

        Returns:
            Whether a process running that workflow may act on the record.
        """
        return self.workflow_name == workflow_name and self.signature_hash == signature_hash

    def to_fields(self) -> dict[str, str]:
        """Return the record as text fields (the one serial form both stores write).

        Returns:
            Field name -> text: every attribute but ``token_hash`` (the key), with
            ``pending_request_ids`` as a JSON list, times as ``repr`` of the float, and
            ``response_types`` as a JSON object (left out when None), ``conversation`` as
            is (left out when None).
        """
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
        """The record as a SQL store's new row: its hash, :data:`RECORD_COLUMNS` (None if absent), ``created_at``."""
        fields = self.to_fields()
        return (self.token_hash, *(fields.get(name) for name in RECORD_COLUMNS), self.created_at)

    @classmethod
    def from_row(cls, token_hash: str, values: Sequence[Any]) -> ContinuationRecord:
        """Build a record from the :data:`RECORD_COLUMNS` a SQL store read (None: absent); see :meth:`from_fields`."""
        return cls.from_fields(
            token_hash, {name: value for name, value in zip(RECORD_COLUMNS, values, strict=True) if value is not None}
        )

    @classmethod
    def from_fields(cls, token_hash: str, fields: Mapping[str, Any]) -> ContinuationRecord:
        """Build a record from the fields :meth:`to_fields` wrote (text, bytes or native values).

        Args:
            token_hash: The record's key.
            fields: Field name -> value, as read back from a store (Redis gives bytes, SQLite
                native values).

        Returns:
            The record.

        Raises:
            KeyError: A field is missing.
            ValueError: A field cannot be read (for example a corrupt JSON list).
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


def _text_mapping(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("response_types must be a JSON object of request id -> type text.")
    return {str(key): str(item) for key, item in cast("dict[Any, Any]", value).items()}


_Closing = TypeVar("_Closing", bound="AsyncClosing")


class AsyncClosing:
    """``async with`` for a store or storage that holds connections: the block's end awaits ``aclose()``."""

    async def __aenter__(self: _Closing) -> _Closing:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release what this object holds (each backend says what); a second call does nothing."""
        raise NotImplementedError


class PurgeSchedule:
    """When a store's automatic purge is due: at its first write, then at most once per ``interval``.

    Args:
        interval: Least time between two automatic purges (seconds or ``timedelta``); None: never.
    """

    def __init__(self, interval: float | timedelta | None) -> None:
        self.interval = None if interval is None else duration_seconds(interval, "purge_interval")
        self._next = float("-inf")  # the first write purges

    def due(self, now: float) -> bool:
        """True when a write at ``now`` purges first."""
        return self.interval is not None and now >= self._next

    def ran(self, now: float) -> None:
        """Note a purge at ``now``: the next automatic one is due ``interval`` later."""
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
        """Return the store's clock, seconds since the epoch."""
        return self._clock()


@runtime_checkable
class ContinuationStore(Protocol):
    """Durable home of continuation tokens shared by several processes (a small async protocol).

    Implementations: :class:`SQLiteContinuationStore` (one file, several processes on one machine)
    and :class:`RedisContinuationStore` (several machines). Give one to
    ``FunctionalWorkflowDefinition.build(checkpoint_storage=..., continuation_store=...)``.

    Rules every implementation keeps:

    * ``claim``, ``abandon`` and ``supersede`` are atomic compare-and-set operations on
      ``status == "issued"``: among any number of concurrent callers (in any process) at most one
      gets True.
    * ``abandoned`` is final. ``claimed`` is final too, except that ``release`` hands a claim back
      (``claimed`` -> ``issued``) for the one run that made it, identified by its ``claimer``
      secret: a run cancelled after its claim and before any of its user code ran.
    * ``supersede`` finds the record by its ``checkpoint_id`` (stores keep an index for it).
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

    async def claim(self, token_hash: str, *, claimer: str | None = None) -> bool:
        """Atomically move ``issued`` and unexpired -> ``claimed``; True only for the one winner.

        Args:
            token_hash: Hex sha256 of the token's secret.

        Keyword Args:
            claimer: A secret of the claiming run, kept with the claim; only a :meth:`release` with
                the same secret can hand the claim back.

        Returns:
            True when this call claimed the record; False when it is missing, not ``issued`` or expired.
        """
        ...

    async def release(self, token_hash: str, claimer: str) -> bool:
        """Atomically hand a claim back: ``claimed`` by ``claimer`` -> ``issued``.

        Called only by a run that won :meth:`claim` and was cancelled before any of its user code
        ran, so that the token stays usable instead of spent for nothing.

        Args:
            token_hash: Hex sha256 of the token's secret.
            claimer: The ``claimer`` that :meth:`claim` was called with.

        Returns:
            True when this call moved the record back to ``issued``; False when it is missing or not
            ``claimed`` by ``claimer``.
        """
        ...

    async def supersede(self, checkpoint_id: str, *, since: float) -> bool:
        """Atomically abandon the ``issued`` record of the pause saved in ``checkpoint_id``.

        A checkpoint restore calls it before it runs, so that the pause's token and the restore
        cannot both run the pause: whichever of this call and the token's :meth:`claim` comes first
        wins.

        Args:
            checkpoint_id: The checkpoint being restored.

        Keyword Args:
            since: When the restore started, by :meth:`now`.

        Returns:
            False when the pause's token was claimed at or after ``since`` (a token resume won: the
            restore must not run); True otherwise: an ``issued`` record of the checkpoint is now
            ``abandoned``, or none concerned it (never recorded, already abandoned, or claimed before
            ``since``: restoring a pause whose resume already ended is the owner's recovery path).
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

    async def aclose(self) -> None:
        """Release the store's connections (or file); ``async with store:`` calls it at the block's end."""
        ...
