"""The task stores of ``a2a_app``: a finished task stays finished; the default store is bounded."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from a2a.server.cluster.task_store import ConcurrentTaskModificationError
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task

from ._a2a_executor import TERMINAL

DEFAULT_MAX_TASKS = 10_000  # tasks BoundedTaskStore keeps at most by default

_OWNER = "a2a_task_owner"  # ServerCallContext.state entry: the owner a bounded store's own deletes act for


class FinalTaskStore(TaskStore):
    """``a2a-sdk``'s ``TaskStore`` that never writes over a finished task, on any worker sharing ``store``.

    A save over a finished task raises ``ConcurrentTaskModificationError`` (``a2a-sdk`` then reports the final
    state). The check reads before it writes: it closes the race a run loses by seconds, not microseconds.
    """

    def __init__(self, store: TaskStore) -> None:
        self.store = store

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save ``task`` unless the stored one has ended (the same ended task again is a no-op)."""
        stored = await self.store.get(task.id, context)
        if stored is not None and stored.status.state in TERMINAL:
            if stored == task:
                return
            raise ConcurrentTaskModificationError(task.id)
        await self.store.save(task, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The stored task, or None."""
        return await self.store.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The stored tasks ``params`` asks for."""
        return await self.store.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete the task."""
        await self.store.delete(task_id, context)


def _owner(context: ServerCallContext) -> str:
    named = context.state.get(_OWNER)
    return named if isinstance(named, str) else resolve_user_scope(context)


class BoundedTaskStore(FinalTaskStore):
    """``a2a-sdk``'s ``InMemoryTaskStore``, bounded: ``a2a_app``'s default task store.

    A finished task is dropped ``ttl`` seconds after its last write, an unfinished one ``2 * ttl`` after it (its
    pause expired by then). Past ``max_tasks`` the least recently written go, finished ones first.

    Raises:
        ValueError: ``ttl`` is not positive, or ``max_tasks`` not a positive integer.
    """

    def __init__(
        self, *, ttl: float, max_tasks: int = DEFAULT_MAX_TASKS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}.")
        if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
            raise ValueError(f"max_tasks must be a positive integer, not {max_tasks!r}.")
        super().__init__(InMemoryTaskStore(owner_resolver=_owner))
        self.ttl, self.max_tasks, self.clock = ttl, max_tasks, clock
        # (owner, task id) -> time of the last write, oldest first: one order per lifetime, so a sweep stops early
        self.finished: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.open: OrderedDict[tuple[str, str], float] = OrderedDict()

    def __len__(self) -> int:
        return len(self.finished) + len(self.open)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save ``task`` (unless it has ended), then drop what expired or exceeds ``max_tasks``."""
        await super().save(task, context)
        key = (_owner(context), task.id)
        self._forget(key)
        now = self.clock()
        (self.finished if task.status.state in TERMINAL else self.open)[key] = now
        await self._sweep(now)
        while len(self) > self.max_tasks:
            await self._drop((self.finished or self.open).popitem(last=False)[0])

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The stored task, or None (also once it expired)."""
        await self._sweep(self.clock())
        return await super().get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The stored tasks ``params`` asks for (none that expired)."""
        await self._sweep(self.clock())
        return await super().list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Delete the task."""
        self._forget((_owner(context), task_id))
        await super().delete(task_id, context)

    async def purge_expired(self) -> int:
        """Drop the tasks past their lifetime now (``a2a_app``'s sweep task, so no traffic is needed); how many."""
        kept = len(self)
        await self._sweep(self.clock())
        return kept - len(self)

    def _forget(self, key: tuple[str, str]) -> None:
        self.finished.pop(key, None)
        self.open.pop(key, None)

    async def _sweep(self, now: float) -> None:
        for kept, lifetime in ((self.finished, self.ttl), (self.open, 2 * self.ttl)):
            while kept and next(iter(kept.values())) + lifetime <= now:
                await self._drop(kept.popitem(last=False)[0])

    async def _drop(self, key: tuple[str, str]) -> None:
        owner, task_id = key
        await self.store.delete(task_id, ServerCallContext(state={_OWNER: owner}))
