"""A pause's record and its checkpoint in one round trip, when both live in one PostgreSQL database (internal).

When the store and the storage share a database (one pool, or connection strings that parse the same), a
pause's record and checkpoint are saved in one statement and one commit, both or neither, before the token
is issued (refused by the storage: the checkpoint is saved whole under the same id; failed: saved alone, the
run's restore point, before the failure is raised). Another worker reads the record and, for a checkpoint
id that is a random uuid, its rows in one statement.
``PostgresContinuationStore.joint`` builds the pair; this module does not import the store's, which imports it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from agent_framework import CheckpointStorage, WorkflowCheckpoint

from .._store import RECORD_COLUMNS, ContinuationRecord
from .postgres_checkpoint import PostgresCheckpointStorage
from .postgres_rows import chunk_map, row_key
from .postgres_rows_sql import HEAD_COLUMNS, STATEMENTS

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from .._step_cache import StepCacheOffer
    from .checkpoint_delta import DeltaSave
    from .postgres_schema import PostgresPool

logger = logging.getLogger(__name__)
_ALONE: set[asyncio.Task[None]] = set()  # pauses being saved alone (each task kept referenced)

PAUSE_HOLD_SECONDS = 0.5
"""How long a pause's checkpoint save waits for its record; then it is saved alone (a stream nobody reads on)."""

_RANDOM_UUID = "^[0-9a-f]{{8}}-[0-9a-f]{{4}}-4[0-9a-f]{{3}}-[89ab][0-9a-f]{{3}}-[0-9a-f]{{12}}$"
_KEY_OF_RECORD = (
    "(SELECT c.checkpoint_id::UUID FROM {store}.continuations AS c "
    f"WHERE c.token_hash = %(hash)s AND c.checkpoint_id ~ '{_RANDOM_UUID}')"
)
_LOAD_OF_RECORD = STATEMENTS["delta_load"].replace("%(key)s", _KEY_OF_RECORD)
_LOAD_COLUMNS = 1 + HEAD_COLUMNS + 3  # delta_load's row: is-head, the head's columns, a chunk's three
# The record's row (first column 0), then the checkpoint's delta_load rows (1), each side NULL in the other's.
_RECORD_AND_CHECKPOINT = (
    f"WITH l AS ({_LOAD_OF_RECORD}) "
    f"SELECT 0, {', '.join(RECORD_COLUMNS)}, {', '.join(['NULL'] * _LOAD_COLUMNS)} FROM {{store}}.continuations "
    "WHERE token_hash = %(hash)s UNION ALL "
    f"SELECT 1, {', '.join(['NULL'] * len(RECORD_COLUMNS))}, l.* FROM l"
)
# The record's insert runs whatever the save returns (a data-modifying WITH always runs).
_SAVE_WITH_RECORD = (
    f"WITH r AS (INSERT INTO {{store}}.continuations (token_hash, {', '.join(RECORD_COLUMNS)}, updated_at) "
    f"VALUES (%s, {', '.join(['%s'] * len(RECORD_COLUMNS))}, %s) RETURNING 1) "
    "SELECT {schema}.save_delta_checkpoint(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


@functools.lru_cache(maxsize=64)
def _statements(storage_schema: str, store_schema: str) -> tuple[bytes, bytes]:
    """The joint read and write with both schemas filled in, rendered once per pair."""
    from psycopg import sql

    names = {"schema": sql.Identifier(storage_schema), "store": sql.Identifier(store_schema)}
    read = sql.SQL(_RECORD_AND_CHECKPOINT).format(**names).as_bytes(None)  # pyright: ignore[reportArgumentType]
    write = sql.SQL(_SAVE_WITH_RECORD).format(**names).as_bytes(None)  # pyright: ignore[reportArgumentType]
    return read, write


class RecordStore(Protocol):
    """``PostgresContinuationStore`` as the pair uses it."""

    @property
    def database(self) -> PostgresPool: ...

    async def save(self, record: ContinuationRecord) -> None: ...

    async def write(
        self, what: str, operation: Callable[[AsyncConnection[Any]], Any], *, on: PostgresPool | None = None
    ) -> Any: ...


class PostgresJointPause:
    """A pause's checkpoint save, kept until its record is saved with it (``_store.JointPause``).

    Exactly one of :meth:`write` and :meth:`write_alone` is called. A record that does not come within
    :data:`PAUSE_HOLD_SECONDS` (a streaming caller stopped reading) no longer waits: the checkpoint is saved
    alone then, and :meth:`write` inserts the record after that save.
    """

    __slots__ = ("_alone", "_checkpoint", "_joint", "_params", "_plan", "_timer")

    def __init__(
        self, joint: PostgresJoint, checkpoint: WorkflowCheckpoint, plan: DeltaSave, params: tuple[Any, ...]
    ) -> None:
        self._joint = joint
        self._checkpoint = checkpoint
        self._plan = plan
        self._params = params
        self._alone: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            PAUSE_HOLD_SECONDS, self._release
        )

    def _release(self) -> None:
        """No record came in time: save the checkpoint alone, in a task of its own (core cancels the run's)."""
        self._timer = None
        self._alone = self._save_soon()

    def _save_soon(self) -> asyncio.Task[None]:
        task = contextvars.Context().run(asyncio.get_running_loop().create_task, self._save_alone())
        _ALONE.add(task)
        task.add_done_callback(_ALONE.discard)
        task.add_done_callback(self._logged)
        return task

    def _logged(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.warning("The checkpoint %s of a pause could not be saved: %s", self.checkpoint_id, task.exception())

    def _stop_timer(self) -> asyncio.Task[None] | None:
        """Stop the wait's timer; the save alone it started, if it fired."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return self._alone

    @property
    def checkpoint_id(self) -> str:
        """The kept checkpoint's id."""
        return self._checkpoint.checkpoint_id

    async def write(self, record: ContinuationRecord) -> None:
        """Insert ``record`` and save the checkpoint in one statement; on failure the checkpoint is saved alone.

        Raises:
            ValueError: A record with this hash exists already (as the store's ``save``).
            psycopg.OperationalError: PostgreSQL is unreachable.
        """
        from psycopg.errors import UniqueViolation

        store, storage = self._joint.store, self._joint.storage
        alone = self._stop_timer()
        if alone is not None:  # saved alone already: the record after it (a failed save issues no token)
            await asyncio.wait([alone])
            alone.result()
            await store.save(record)
            return
        params = (*record.row(), *self._params)
        statement = self._joint.save_with_record

        async def write(conn: AsyncConnection[Any]) -> tuple[Any, ...] | None:
            await storage.purge_when_due(conn, time.time())  # as the storage's own saves do
            return await (await conn.execute(statement, params)).fetchone()

        try:
            row = await store.write("pause save", write, on=storage.database)  # the storage's warm connection
        except UniqueViolation as exc:
            await self.write_alone()
            raise ValueError("A continuation with this token hash is already recorded; issue a new token.") from exc
        except Exception:
            await self.write_alone()
            raise
        except BaseException:  # cancelled: the restore point is saved in a task of its own
            self._save_soon()
            raise
        if row is not None and row[0]:
            storage.pause_written(self._plan, self.checkpoint_id)
            return
        storage.pause_refused(self._plan)
        await storage.save(self._checkpoint)  # whole (no offer here): the record names it

    async def write_alone(self) -> None:
        """Save the checkpoint on its own, whole; a failure is logged (the pause's restore point, best effort)."""
        alone = self._stop_timer()
        if alone is not None:  # saving alone already (its failure is logged)
            await asyncio.wait([alone])
            return
        try:
            await self._save_alone()
        except Exception as exc:
            logger.warning("The checkpoint %s of a pause could not be saved: %s", self.checkpoint_id, exc)

    async def _save_alone(self) -> None:
        storage = self._joint.storage
        storage.pause_refused(self._plan)
        await storage.save(self._checkpoint)


class PostgresJoint:
    """A store and a storage on one database (``_store.Joint``); build with :func:`joint`."""

    __slots__ = ("_load", "save_with_record", "storage", "store")

    def __init__(self, store: RecordStore, storage: PostgresCheckpointStorage) -> None:
        self.store = store
        self.storage = storage
        self._load, self.save_with_record = _statements(storage.schema, store.database.schema)

    async def plan_pause(
        self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None
    ) -> PostgresJointPause | None:
        """Plan a pause's checkpoint save for :meth:`PostgresJointPause.write`; None: save it the usual way.

        Raises:
            WorkflowCheckpointException: The checkpoint cannot be encoded or stored (as ``save``).
        """
        planned = await self.storage.plan_pause(checkpoint, offer)
        return None if planned is None else PostgresJointPause(self, checkpoint, *planned)

    async def read(self, token_hash: str) -> tuple[ContinuationRecord | None, Callable[[], WorkflowCheckpoint] | None]:
        """The record of ``token_hash`` (None: none), and what decodes its checkpoint (None: load it the usual way).

        Decoding, only when asked (after the caller checked the record), raises as the storage's ``load``.

        Raises:
            psycopg.OperationalError: PostgreSQL is unreachable (as the store's ``get``).
        """
        storage = self.storage
        params = {"hash": token_hash, "now": time.time()}

        async def read(conn: AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            return await (await conn.execute(self._load, params)).fetchall()

        found = await storage.database.run("read", read)  # the storage's connection: warm for its load
        width = len(RECORD_COLUMNS)
        row = next((got[1 : 1 + width] for got in found if got[0] == 0), None)
        rows = [got[1 + width :] for got in found if got[0] == 1]
        if row is None:
            return None, None
        record = ContinuationRecord.from_row(token_hash, row)
        head = next((found for found in rows if found[0]), None)
        key = row_key(record.checkpoint_id)
        if head is None or str(head[4]) != key or storage.buffers(record.checkpoint_id):
            return record, None
        chunks = chunk_map([found[1 + HEAD_COLUMNS :] for found in rows if not found[0]])
        return record, partial(storage.decode_row, record.checkpoint_id, head[1 : 1 + HEAD_COLUMNS], chunks)


def joint(store: RecordStore, storage: CheckpointStorage) -> PostgresJoint | None:
    """A :class:`PostgresJoint` of ``store`` and ``storage`` on one database, else None (exact classes only)."""
    if type(storage) is not PostgresCheckpointStorage or not storage.database.shares_database(store.database):
        return None
    return PostgresJoint(store, storage)
