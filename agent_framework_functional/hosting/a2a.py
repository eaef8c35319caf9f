"""A2A in one call: :func:`a2a_app` serves a FunctionalWorkflowAgent to other agents over the A2A protocol.

Built on ``a2a-sdk``: a pause is an ``input-required`` task with a data part per request; an answer on it resumes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, cast

from a2a.helpers import get_message_text
from a2a.server.cluster import StoredTask
from a2a.server.cluster.task_store import ConcurrentTaskModificationError
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    CancelTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.types import Message as A2AMessage
from a2a.utils.errors import InvalidParamsError
from agent_framework import AgentSession, SessionStore
from starlette.applications import Starlette
from starlette.middleware import Middleware

from .._agent import FunctionalWorkflowAgent
from .._errors import ResponseMismatchError
from .._expiry import BoundedMap
from ._a2a_executor import BOOL_WORDS as BOOL_WORDS
from ._a2a_executor import TERMINAL, handled, message_answers, replayed
from ._a2a_executor import FunctionalA2AExecutor as FunctionalA2AExecutor
from ._a2a_executor import new_answer_part as new_answer_part
from ._body_limit import BodyLimit
from ._sweep import DEFAULT_RELEASE_MEMORY_EVERY, DEFAULT_SWEEP_EVERY, add_upkeep

DEFAULT_MAX_BODY_BYTES = 1024 * 1024  # a larger request body is a 413
DEFAULT_MAX_TASKS = 10_000  # tasks BoundedTaskStore keeps at most by default
_OWNER = "a2a_task_owner"  # ServerCallContext.state entry: the owner a bounded store's own deletes act for


class FinalTaskStore(TaskStore):
    """``a2a-sdk``'s ``TaskStore`` that never writes over a finished task, on any worker sharing ``store``.

    Such a save raises ``ConcurrentTaskModificationError``. Read-then-write: closes a race lost by seconds, not µs.
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

    A task goes ``ttl`` seconds after its last write (``2 * ttl`` if unfinished); past ``max_tasks``, the oldest
    written go, finished ones first.

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
        self.finished: BoundedMap[tuple[str, str], float] = BoundedMap(lambda _, written: written + self.ttl)
        self.open: BoundedMap[tuple[str, str], float] = BoundedMap(lambda _, written: written + 2 * self.ttl)

    def __len__(self) -> int:
        return len(self.finished) + len(self.open)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save ``task`` (unless it has ended), then drop what expired or exceeds ``max_tasks``."""
        await super().save(task, context)
        key = (_owner(context), task.id)
        self.open.pop(key)
        self.finished.pop(key)
        now = self.clock()
        (self.finished if task.status.state in TERMINAL else self.open).put(key, now)
        await self._sweep(now)
        await self._drop(self.finished.trim(max(self.max_tasks - len(self.open), 0)))
        await self._drop(self.open.trim(self.max_tasks - len(self.finished)))

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
        self.open.pop((_owner(context), task_id))
        self.finished.pop((_owner(context), task_id))
        await super().delete(task_id, context)

    async def purge_expired(self) -> int:
        """Drop the tasks past their lifetime now (``a2a_app``'s sweep task, so no traffic is needed); how many."""
        kept = len(self)
        await self._sweep(self.clock())
        return kept - len(self)

    async def _sweep(self, now: float) -> None:
        await self._drop(self.finished.expired(now) + self.open.expired(now))

    async def _drop(self, dropped: list[tuple[tuple[str, str], float]]) -> None:
        for (owner, task_id), _ in dropped:
            await self.store.delete(task_id, ServerCallContext(state={_OWNER: owner}))


_NO_INPUT = (
    "A message that starts a task needs a text part with the workflow's input (data parts answer a paused task: "
    "send them with its task_id)."
)


class FunctionalA2ARequestHandler(DefaultRequestHandler):
    """``a2a-sdk``'s request handler that refuses a wrong answer as ``InvalidParams``, the task still waiting."""

    def __init__(self, executor: FunctionalA2AExecutor, **kwargs: Any) -> None:
        super().__init__(agent_executor=executor, **kwargs)
        self.executor = executor
        executor.task_store = self.task_store

    async def check(self, message: A2AMessage, context: ServerCallContext) -> None:
        """Refuse (``InvalidParamsError``) an answer that does not fit its pause, or new input on a paused context."""
        found = await self.task_store.get(message.task_id, context) if message.task_id else None
        task: Task | None = found.task if isinstance(found, StoredTask) else found
        context_id = task.context_id if task is not None else message.context_id
        key = self.executor.session_key(context_id or "")
        session = await self.executor.session_store.get(key) if context_id else None
        if task is None:
            if not message.task_id:  # an unknown task id: a2a-sdk refuses it (TaskNotFound)
                await self._check_new_input(message, context_id, session, context)
            return
        if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED or session is None:
            return  # an ended task: a2a-sdk refuses it; a running one: the executor's guard ignores it
        if message.context_id and message.context_id != task.context_id:
            return  # a2a-sdk refuses a context that is not the task's
        if message.message_id in handled(session, task.id):
            raise InvalidParamsError(replayed(message, task.id))
        pending = self.executor.agent.pending_requests_for(session)  # empty when another worker holds the pause:
        try:  # then only the shape is checked here and the agent's run checks the values (the task keeps waiting)
            message_answers(message, pending, text_answers=self.executor.text_answers)
        except ResponseMismatchError as exc:
            raise InvalidParamsError(str(exc)) from None

    async def _check_new_input(
        self, message: A2AMessage, context_id: str | None, session: AgentSession | None, context: ServerCallContext
    ) -> None:
        paused_on = await self.executor.waits_on(session, context)
        if paused_on and context_id and await self.executor.release_dropped(session, paused_on, context_id, context):
            paused_on = None  # its task left the task store (past its bound): nobody can answer it, start over
        if paused_on:
            raise InvalidParamsError(
                f"Context {context_id} waits for input on task {paused_on}: send the answer with that task_id."
            )
        if not get_message_text(message).strip():
            raise InvalidParamsError(_NO_INPUT)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        """Abandon the pause the task holds, then a2a-sdk's ``tasks/cancel``; refused while an answer to it runs."""
        found = await self.task_store.get(params.id, context)
        task: Task | None = found.task if isinstance(found, StoredTask) else found
        if task is not None and task.status.state not in TERMINAL:
            await self.executor.before_cancel(task)
        return await super().on_cancel_task(params, context)

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Check the answer, then a2a-sdk's ``message/send``."""
        await self.check(params.message, context)
        send = cast(Callable[..., Awaitable[Any]], super().on_message_send)  # pyright: ignore[reportUnknownMemberType]
        return await send(params, context)

    async def on_message_send_stream(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any, None]:
        """Check the answer, then a2a-sdk's ``message/stream``."""
        await self.check(params.message, context)
        stream = cast(Callable[..., AsyncIterator[Any]], super().on_message_send_stream)  # pyright: ignore[reportUnknownMemberType]
        async for event in stream(params, context):
            yield event


def a2a_app(
    agent: FunctionalWorkflowAgent,
    *,
    url: str,
    session_store: SessionStore | None = None,
    task_store: TaskStore | None = None,
    text_answers: bool = False,
    version: str = "1.0.0",
    rpc_path: str = "/",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    release_memory_every: float | None = DEFAULT_RELEASE_MEMORY_EVERY,
    sweep_every: float | None = DEFAULT_SWEEP_EVERY,
) -> Starlette:
    """A Starlette app that serves ``agent`` over A2A (JSON-RPC, streaming), correct by default.

    A data part ``{"request_id": <id>, "answer": <value>}`` on the paused task answers it ("A2A" in the docs).

    Args:
        agent: The agent; one object serves every context.

    Keyword Args:
        url: The public URL of the JSON-RPC endpoint, advertised in the agent card.
        session_store: Where sessions live (bounded, in memory, by default; a shared one for several workers).
        task_store: Where ``a2a-sdk`` keeps tasks (shared for several workers); default :class:`BoundedTaskStore`.
        text_answers: Accept a text part as the answer to the one pending request.
        version: The agent card's version.
        rpc_path: The path of the JSON-RPC endpoint.
        max_body_bytes: The largest request body read (default 1 MiB).
        release_memory_every: Seconds between two ``malloc_trim`` after requests (glibc only); None: never.
        sweep_every: Seconds between two sweeps of expired pauses (at most a quarter TTL); None: on access only.

    Returns:
        The app; the agent card is served at ``/.well-known/agent-card.json``.

    Raises:
        ValueError: ``max_body_bytes`` is not a positive integer, or a bad interval.
    """
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be a positive integer, not {max_body_bytes!r}.")
    executor = FunctionalA2AExecutor(agent, session_store=session_store, text_answers=text_answers)
    description = agent.description or f"{agent.name}: a functional workflow agent."  # required on card and skill
    card = AgentCard(
        name=agent.name or agent.id,
        description=description,
        version=version,
        default_input_modes=["text", "application/json"],
        default_output_modes=["text", "application/json"],
        capabilities=AgentCapabilities(streaming=True),
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        skills=[AgentSkill(id=agent.id, name=agent.name or agent.id, description=description, tags=["workflow"])],
    )
    if task_store is None:
        tasks: FinalTaskStore = BoundedTaskStore(ttl=agent.continuation_ttl)
    else:
        tasks = task_store if isinstance(task_store, FinalTaskStore) else FinalTaskStore(task_store)
    ttl = agent.continuation_ttl
    handler = FunctionalA2ARequestHandler(executor, task_store=tasks, agent_card=card, interrupted_task_timeout=ttl)

    app = Starlette(
        routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_path)],
        middleware=[Middleware(BodyLimit, path=rpc_path, max_bytes=max_body_bytes)],
    )
    app.state.a2a_handler = handler
    add_upkeep(
        app, agent, release_memory_every, sweep_every, stores=[executor.session_store, tasks], closing=[handler.aclose]
    )
    return app
