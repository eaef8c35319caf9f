"""The step saves ``PostgresCheckpointStorage.save_buffered`` holds back for a moment, per run (internal).

A step save commits without waiting for the disk anyway, so holding it :data:`STEP_WRITE_DELAY_SECONDS` risks
the same loss and saves most writes (a pause's row holds their results; a finished run deletes them unwritten).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agent_framework import WorkflowCheckpoint

logger = logging.getLogger(__name__)

STEP_WRITE_DELAY_SECONDS = 0.2
"""How long a buffered step checkpoint waits for its run's next save before it is written on its own."""

BUFFERABLE_NAME_BYTES = 1000
"""Longer ids or workflow names are written at once: a refusal as too long for an index belongs to their save."""


def bufferable(checkpoint: WorkflowCheckpoint) -> bool:
    """Whether a save of ``checkpoint`` may be buffered (its id and workflow name are short enough)."""
    names = (checkpoint.checkpoint_id, checkpoint.previous_checkpoint_id or "", checkpoint.workflow_name)
    return all(len(name) * 4 <= BUFFERABLE_NAME_BYTES or len(name.encode()) <= BUFFERABLE_NAME_BYTES for name in names)


@dataclass(slots=True)
class BufferedSave:
    """One buffered ``save_delta_checkpoint`` call: the checkpoint's id and the statement's parameters."""

    checkpoint_id: str
    params: tuple[Any, ...]


@dataclass(slots=True)
class _Chain:
    before: Any  # what the run had stored before its first buffered row (the deduper's snapshot)
    timer: asyncio.TimerHandle
    rows: list[BufferedSave]


class StepBuffer:
    """One storage's buffered step saves per run (its step-cache log); ``write(run, rows)`` writes them in order."""

    __slots__ = ("_chains", "_delay", "_flushes", "_last", "_write")

    def __init__(self, write: Callable[[Any, list[BufferedSave]], Awaitable[Any]]) -> None:
        self._write = write
        self._delay = STEP_WRITE_DELAY_SECONDS
        self._chains: dict[object, _Chain] = {}
        self._flushes: dict[asyncio.Task[bool], frozenset[str]] = {}  # writes in flight, and their rows' ids
        self._last: dict[object, asyncio.Task[bool]] = {}  # each run's latest write: the next one waits for it

    def add(self, run: object, row: BufferedSave, before: Any) -> None:
        """Buffer ``row`` for ``run`` (``before``: what it had stored, kept from its first buffered row)."""
        if (chain := self._chains.get(run)) is None:
            timer = asyncio.get_running_loop().call_later(self._delay, self._flush, run)
            chain = self._chains[run] = _Chain(before, timer, [])
        chain.rows.append(row)

    def take(self, run: object) -> list[BufferedSave]:
        """The rows buffered for ``run``, no longer buffered (its next save writes them first, in its statement)."""
        chain = self._chains.pop(run, None)
        if chain is None:
            return []
        chain.timer.cancel()
        return chain.rows

    def withdraw(self, run: object) -> tuple[list[BufferedSave], Any] | None:
        """Forget ``run``'s buffered rows unwritten (a pause holds their results): them and ``before``, or None."""
        chain = self._chains.get(run)
        return None if chain is None else (self.take(run), chain.before)

    async def written_by(self, run: object) -> None:
        """Wait for ``run``'s writes in flight (its last one waits for the earlier ones)."""
        if (last := self._last.get(run)) is not None:
            await asyncio.wait([last])

    def has(self, checkpoint_ids: Iterable[str]) -> bool:
        """Whether any of ``checkpoint_ids`` is buffered."""
        wanted = set(checkpoint_ids)
        return any(row.checkpoint_id in wanted for chain in self._chains.values() for row in chain.rows)

    def drop(self, checkpoint_ids: set[str]) -> tuple[set[str], list[tuple[object, Any]]]:
        """Forget each run whose rows are all in ``checkpoint_ids``; return their ids and (run, before) pairs."""
        dropped: set[str] = set()
        runs: list[tuple[object, Any]] = []
        for run, chain in list(self._chains.items()):
            if (ids := {row.checkpoint_id for row in chain.rows}) <= checkpoint_ids:
                self.take(run)
                dropped |= ids
                runs.append((run, chain.before))
        return dropped, runs

    async def flush_now(self, checkpoint_ids: Iterable[str] | None = None) -> None:
        """Write the runs that buffer any of ``checkpoint_ids`` (None: every run), and wait for those writes."""
        wanted = None if checkpoint_ids is None else set(checkpoint_ids)
        for run, chain in list(self._chains.items()):
            if wanted is None or any(row.checkpoint_id in wanted for row in chain.rows):
                self._flush(run)
        # asyncio.wait, not gather: a caller cancelled while it waits must not cancel other runs' writes
        while tasks := [task for task, ids in self._flushes.items() if wanted is None or not wanted.isdisjoint(ids)]:
            await asyncio.wait(tasks)

    def _flush(self, run: object) -> None:
        self.write_soon(run, self.take(run))

    def write_soon(self, run: object, rows: list[BufferedSave]) -> None:
        """Start writing ``rows`` of ``run`` in a task of its own (core cancels a run's), after its earlier write."""
        if rows:
            write = self._write_rows(run, rows, self._last.get(run))
            task = self._last[run] = contextvars.Context().run(asyncio.get_running_loop().create_task, write)
            self._flushes[task] = frozenset(row.checkpoint_id for row in rows)
            task.add_done_callback(functools.partial(self._written, run))

    def _written(self, run: object, task: asyncio.Task[bool]) -> None:
        self._flushes.pop(task, None)
        if self._last.get(run) is task:
            del self._last[run]

    async def _write_rows(self, run: object, rows: list[BufferedSave], after: asyncio.Task[bool] | None) -> bool:
        if after is not None:  # on another connection it could commit later, and these rows then find none
            await asyncio.wait([after])
        try:  # after a failed write of the run these continue unwritten rows: dropped, no wait for a connection
            if after is not None and not after.result():
                raise RuntimeError("the run's earlier step checkpoints were not written")
            await self._write(run, rows)
        except Exception as exc:  # a step checkpoint lost: a restore starts earlier (as after a server crash)
            logger.warning("%d buffered step checkpoint(s) could not be written: %s", len(rows), exc)
            return False
        return True
