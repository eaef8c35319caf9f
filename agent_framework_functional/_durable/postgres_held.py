"""Step checkpoints a run's recorder lets ``PostgresCheckpointStorage`` hold back for a moment (internal).

A step checkpoint (no pending request) commits without waiting for the server's disk anyway: a server
crash can lose the last ~600 ms of them, and a restore then starts earlier and runs those steps again.
Holding it in the worker for at most :data:`STEP_WRITE_DELAY_SECONDS` costs the same kind of loss (a
worker that dies loses its held step checkpoints; its runs die with it) and saves most of their writes:
a pause's row holds their step results and its run deletes them next, so a pausing run never writes
them (the deduper rewinds to before them); a finished run deletes them before they were written; a
run's next save without pending requests that is not held either sends them first, in its statement.
Only saves a run's recorder sends through ``save_buffered`` (``_store.StepSaveBuffer``: runs that delete
their chain when they end) are held; a direct ``save()`` is written at once.

Held rows of one run (keyed by its step-cache log) are written in save order, by a timer, the run's
end (a failure), or the storage's reads, deletes and ``aclose``, so the storage object never misses one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from agent_framework import WorkflowCheckpoint

from .postgres_rows import check_storable, delta_params
from .postgres_rows_sql import save_many

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from .._step_cache import StepCacheLog, StepCacheOffer
    from .checkpoint_delta import DeltaSave, StepCacheDeduper
    from .checkpoint_seal import CheckpointSealer
    from .postgres_schema import PostgresPool

logger = logging.getLogger(__name__)

STEP_WRITE_DELAY_SECONDS = 0.2
"""How long a held step checkpoint waits for its run's next save before it is written on its own."""

UNWRITTEN_KEPT = 4096
"""How many ids of held step checkpoints a pause superseded (never written) a storage object remembers, so
that its run's delete of them sends nothing."""

HOLDABLE_NAME_BYTES = 1000
"""Longer ids or workflow names are written at once: PostgreSQL may refuse them as too long for an index,
and that refusal belongs to the save that made them (``execute_save``), not to a later one."""


def holdable(checkpoint: WorkflowCheckpoint) -> bool:
    """Whether a save of ``checkpoint`` may be held (its id and workflow name are short enough)."""
    names = (checkpoint.checkpoint_id, checkpoint.previous_checkpoint_id or "", checkpoint.workflow_name)
    return all(len(name) * 4 <= HOLDABLE_NAME_BYTES or len(name.encode()) <= HOLDABLE_NAME_BYTES for name in names)


@dataclass(slots=True)
class HeldSave:
    """One held ``save_delta_checkpoint`` call: the checkpoint's id and the statement's parameters."""

    checkpoint_id: str
    params: tuple[Any, ...]


class _Chain:
    __slots__ = ("before", "rows", "timer")

    def __init__(self, before: Any) -> None:
        self.rows: list[HeldSave] = []
        self.timer: asyncio.TimerHandle | None = None
        self.before = before  # what the run had stored before its first held row (the deduper's snapshot)


Write = Callable[[Any, list[HeldSave]], Awaitable[Any]]


class HeldSteps:
    """The held step checkpoints of one storage object, per run, and the writes of them in flight.

    Args:
        write: Writes a run's held rows (the run, the rows) in one statement, in order, without waiting for the disk.

    Keyword Args:
        delay: Seconds a run's held rows wait for its next save before they are written on their own.
    """

    __slots__ = ("_chains", "_delay", "_flushes", "_last", "_write")

    def __init__(self, write: Write, *, delay: float = STEP_WRITE_DELAY_SECONDS) -> None:
        self._write = write
        self._delay = delay
        self._chains: dict[object, _Chain] = {}
        self._flushes: dict[asyncio.Task[bool], frozenset[str]] = {}  # the writes in flight, and their rows' ids
        self._last: dict[object, asyncio.Task[bool]] = {}  # each run's latest write: the next one waits for it

    def hold(self, run: object, row: HeldSave, before: Any) -> None:
        """Hold ``row`` for ``run``; its run's rows are written after ``delay`` unless taken before.

        ``before``: what the run had stored before this row, kept from its first held row (:meth:`discard`).
        """
        if (chain := self._chains.get(run)) is None:
            chain = self._chains[run] = _Chain(before)
            chain.timer = asyncio.get_running_loop().call_later(self._delay, self._flush, run)
        chain.rows.append(row)

    def take(self, run: object) -> list[HeldSave]:
        """The rows held for ``run``, no longer held (its next save writes them first, in its statement)."""
        chain = self._chains.pop(run, None)
        if chain is None:
            return []
        if chain.timer is not None:
            chain.timer.cancel()
        return chain.rows

    def discard(self, run: object) -> tuple[list[HeldSave], Any] | None:
        """Forget ``run``'s held rows unwritten: the rows, and what the run had stored before them (None: none held).

        For a pause: its checkpoint holds everything they held, and the run deletes them once it is saved.
        """
        chain = self._chains.get(run)
        return None if chain is None else (self.take(run), chain.before)

    async def written(self, checkpoint_ids: Iterable[str] | None = None) -> None:
        """Wait for the writes in flight of any of ``checkpoint_ids`` (None: all; a later statement must see them).

        ``asyncio.wait``, not ``gather``: a caller cancelled while it waits must not cancel other runs' writes.
        """
        wanted = None if checkpoint_ids is None else set(checkpoint_ids)
        while tasks := [task for task, ids in self._flushes.items() if wanted is None or not wanted.isdisjoint(ids)]:
            await asyncio.wait(tasks)

    async def written_by(self, run: object) -> None:
        """Wait for ``run``'s writes in flight (its last one waits for the earlier ones)."""
        if (last := self._last.get(run)) is not None:
            await asyncio.wait([last])

    def holds(self, checkpoint_ids: Iterable[str]) -> bool:
        """Whether any of ``checkpoint_ids`` is held."""
        wanted = set(checkpoint_ids)
        return any(row.checkpoint_id in wanted for chain in self._chains.values() for row in chain.rows)

    def drop(self, checkpoint_ids: set[str]) -> tuple[set[str], list[tuple[object, Any]]]:
        """Forget, unwritten, every run whose held rows are all in ``checkpoint_ids``: the ids, (run, before) each.

        A run only some of whose rows are named keeps them all (a later row references an earlier
        one's step results): the caller writes them with :meth:`flush_now` before deleting.
        """
        dropped: set[str] = set()
        runs: list[tuple[object, Any]] = []
        for run, chain in list(self._chains.items()):
            ids = {row.checkpoint_id for row in chain.rows}
            if ids <= checkpoint_ids:
                self.take(run)
                dropped |= ids
                runs.append((run, chain.before))
        return dropped, runs

    def flush_soon(self, checkpoint_ids: Iterable[str] | None = None) -> None:
        """Start writing the runs that hold any of ``checkpoint_ids`` (None: every run) now, in the background."""
        wanted = None if checkpoint_ids is None else set(checkpoint_ids)
        for run, chain in list(self._chains.items()):
            if wanted is None or any(row.checkpoint_id in wanted for row in chain.rows):
                self._flush(run)

    async def flush_now(self, checkpoint_ids: Iterable[str] | None = None) -> None:
        """Write the runs that hold any of ``checkpoint_ids`` (None: every run), and wait for those writes in flight."""
        wanted = None if checkpoint_ids is None else list(checkpoint_ids)
        self.flush_soon(wanted)
        await self.written(wanted)

    def _flush(self, run: object) -> None:
        self.write_soon(run, self.take(run))

    def write_soon(self, run: object, rows: list[HeldSave]) -> None:
        """Start writing ``rows`` of ``run`` in the background, after its earlier write (:meth:`written` waits)."""
        if rows:  # a task of its own: core cancels the tasks a run started when the run ends
            write = self._write_rows(run, rows, self._last.get(run))
            task = self._last[run] = contextvars.Context().run(asyncio.get_running_loop().create_task, write)
            self._flushes[task] = frozenset(row.checkpoint_id for row in rows)
            task.add_done_callback(functools.partial(self._written, run))

    def _written(self, run: object, task: asyncio.Task[bool]) -> None:
        self._flushes.pop(task, None)
        if self._last.get(run) is task:
            del self._last[run]

    async def _write_rows(self, run: object, rows: list[HeldSave], after: asyncio.Task[bool] | None) -> bool:
        if after is not None:  # on another connection it could commit later, and these rows then find none
            await asyncio.wait([after])
        try:  # after a failed write of the run these continue unwritten rows: dropped, no wait for a connection
            if after is not None and not after.result():
                raise RuntimeError("the run's earlier step checkpoints were not written")
            await self._write(run, rows)
        except Exception as exc:  # a step checkpoint lost: a restore starts earlier (as after a server crash)
            logger.warning("%d held step checkpoint(s) could not be written: %s", len(rows), exc)
            return False
        return True


class HeldStepSaves:
    """The part of ``PostgresCheckpointStorage`` that holds step checkpoints back (internal base class)."""

    _db: PostgresPool
    _deduper: StepCacheDeduper
    _ttl: float | None
    sealer: CheckpointSealer | None

    def _start_holding(self) -> None:
        self._held = HeldSteps(self._write_held)
        self._unwritten: OrderedDict[str, None] = OrderedDict()  # held step checkpoints a pause superseded
        self._many: dict[tuple[int, bool], bytes] = {}
        self._unsent: set[str] = set()  # pauses that superseded held rows, their statement not sent yet

    def _waits_for_disk(self, checkpoint: WorkflowCheckpoint) -> bool:
        raise NotImplementedError

    async def _save_delta(
        self, now: float, statement: bytes, params: tuple[Any, ...], conn: AsyncConnection[Any]
    ) -> bool:
        raise NotImplementedError

    @contextlib.contextmanager
    def _superseding(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> Generator[None, None, None]:
        """A pause: forget its run's held step checkpoints unwritten (its row holds their step results).

        Enter before the save's first ``await`` (core's dicts may change later) and save the pause inside. The
        run deletes them once the pause is saved; that delete then sends nothing. A pause that fails before
        its statement is sent (refused, cancelled) ends its run: they are written after all, its restore point.
        Once sent, a failure may hide a pause that landed, which they must not follow: they are lost then.
        """
        pause = offer is not None and bool(checkpoint.pending_request_info_events) and offer.take(checkpoint.state)
        log = offer.log if offer is not None and pause else None
        discarded = None if log is None else self._held.discard(log)
        if log is None or discarded is None:
            yield
            return
        rows, before = discarded
        self._deduper.rewind(log, before)
        self._unsent.add(checkpoint.checkpoint_id)
        try:
            yield
        except BaseException:
            if checkpoint.checkpoint_id in self._unsent:  # refused or cancelled before its statement was sent
                self._deduper.rewind(log, None)  # its next save (if any) starts a segment of its own
                self._held.write_soon(log, rows)
            raise
        finally:
            self._unsent.discard(checkpoint.checkpoint_id)
        for row in rows:
            self._unwritten[row.checkpoint_id] = None
        while len(self._unwritten) > UNWRITTEN_KEPT:
            self._unwritten.popitem(last=False)

    def _hold(self, checkpoint: WorkflowCheckpoint, plan: DeltaSave) -> bool:
        """Hold a step checkpoint (a ``save_buffered`` call); False: write it now."""
        if not holdable(checkpoint) or self._waits_for_disk(checkpoint):
            return False
        params = delta_params(checkpoint, plan, self.sealer, self._times())
        before = self._deduper.snapshot(plan.log)
        self._deduper.saved(plan, checkpoint.checkpoint_id)  # its run's next save appends after it
        self._held.hold(plan.log, HeldSave(checkpoint.checkpoint_id, params), before)
        return True

    @property
    def database(self) -> PostgresPool:
        """The storage's pool and schema (a store on the same database writes a pause with it: ``postgres_joint``)."""
        return self._db

    def buffers(self, checkpoint_id: str) -> bool:
        """Whether this object holds ``checkpoint_id`` unwritten (a read elsewhere would not find it)."""
        return self._held.holds([checkpoint_id])

    def pause_written(self, plan: DeltaSave, checkpoint_id: str) -> None:
        """A pause :meth:`plan_pause` planned was written (by the store's statement): its run's saves continue it."""
        self._deduper.saved(plan, checkpoint_id)

    def pause_refused(self, plan: DeltaSave) -> None:
        """A pause :meth:`plan_pause` planned was not written as planned: its run's next save starts a segment."""
        self._deduper.forget(plan)

    async def plan_pause(
        self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None
    ) -> tuple[DeltaSave, tuple[Any, ...]] | None:
        """Plan a pause's save for a statement that writes its record too (``postgres_joint``); None: save it.

        As a written pause does, it forgets its run's held step checkpoints (its row holds their step results)
        and waits for the run's writes in flight. The caller then owns the plan: :meth:`pause_written` once
        written, :meth:`pause_refused` if not.

        Raises:
            WorkflowCheckpointException: As ``save``: the checkpoint cannot be encoded or stored.
        """
        check_storable(checkpoint)
        if not holdable(checkpoint):
            return None
        with self._superseding(checkpoint, offer):
            plan = self._deduper.prepare(checkpoint, offer)
            if plan is None:
                return None  # stored whole by the caller's save
            await self._db.prepare()  # a first save: the pool opens and the tables are checked first
            await self._held.written_by(plan.log)
            self._unsent.discard(checkpoint.checkpoint_id)
            return plan, delta_params(checkpoint, plan, self.sealer, self._times())

    async def _with_held(
        self, checkpoint: WorkflowCheckpoint, plan: DeltaSave, params: tuple[Any, ...]
    ) -> tuple[bytes, tuple[Any, ...]]:
        """The statement and parameters of a save: the run's held step checkpoints first, then ``params``."""
        held = self._held.take(plan.log)
        await self._held.written_by(plan.log)  # a write of this run's earlier rows in flight goes first
        self._unsent.discard(checkpoint.checkpoint_id)
        statement = self._statement(len(held) + 1, self._waits_for_disk(checkpoint))
        return statement, (*(param for row in held for param in row.params), *params)

    async def _unheld(self, checkpoint_ids: list[str]) -> tuple[list[str], int]:
        """Before a delete: the ids still to delete on the server, and how many were held or never written.

        Held rows of a run the delete names only in part are written first, so the delete finds them.
        """
        ids = list(dict.fromkeys(checkpoint_ids))
        dropped, runs = self._held.drop(set(ids))  # a finished run's held step checkpoints: never written
        for run, before in runs:  # a running run's next save appends to what is stored, not to them
            self._deduper.rewind(cast("StepCacheLog", run), before)
        for checkpoint_id in [checkpoint_id for checkpoint_id in ids if checkpoint_id in self._unwritten]:
            del self._unwritten[checkpoint_id]  # superseded by its run's pause before it was written
            dropped.add(checkpoint_id)
        ids = [checkpoint_id for checkpoint_id in ids if checkpoint_id not in dropped]
        if ids:
            await self._held.flush_now(ids)
        return ids, len(dropped)

    def _times(self) -> tuple[float, float | None]:
        """(saved at, expires at) for a save now."""
        now = time.time()
        return now, None if self._ttl is None else now + self._ttl

    def _statement(self, saves: int, waits: bool) -> bytes:
        """The statement of ``saves`` ``save_delta_checkpoint`` calls in order, committed waiting or not."""
        key = (saves, waits)
        statement = self._many.get(key)
        if statement is None:
            statement = self._many[key] = self._db.statements({"many": save_many(saves, waits)})["many"]
        return statement

    async def _write_held(self, run: Any, rows: list[HeldSave]) -> None:
        """Write a run's held step checkpoints in one statement, without waiting for the disk.

        When it fails, or a checkpoint it continues is missing (an earlier write failed), the run's next
        save starts a segment of its own, so its later step checkpoints are written whole again.
        """
        statement = self._statement(len(rows), False)
        params = tuple(param for row in rows for param in row.params)
        written = False
        try:
            written = await self._db.run(
                "checkpoint save", functools.partial(self._save_delta, time.time(), statement, params)
            )
        finally:
            if not written:
                self._deduper.rewind(run, None)
        if not written:
            raise RuntimeError("a step checkpoint they continue was never written")

    async def flush(self) -> None:
        """Write every step checkpoint this object holds back (``synchronous_steps`` False) now.

        Its ``aclose``, ``load``, ``list_checkpoints`` and deletes do it first, so call it only when another
        worker must see a running run's step checkpoints before the run's next save.
        """
        await self._held.flush_now()

    async def write_buffered(self, checkpoint_ids: list[str]) -> None:
        """Write the runs whose held step checkpoints include one of ``checkpoint_ids``, and the writes in flight.

        A run's recorder calls it when the run ends, before the caller sees the outcome: after a failure
        they are what a restore (on any worker, at once) starts from. A failed write is logged, not raised.
        """
        await self._held.flush_now(checkpoint_ids)
