"""A2A in one call: :func:`a2a_app` serves a FunctionalWorkflowAgent to other agents over the A2A protocol.

Built on ``a2a-sdk`` (its request handler, task store, agent card and JSON-RPC routes). This module owns what
it leaves to the app for a pausing agent: a pause is a task in ``input-required`` whose status message carries
the request as a data part; an answer on that task resumes the workflow; the session of each A2A context lives
in a session store. Needs the ``a2a`` extra.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from a2a.helpers import get_message_text, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster import StoredTask, VersionedTaskStore
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.types import Message as A2AMessage
from a2a.utils.errors import InvalidParamsError
from agent_framework import AgentResponse, AgentSession, Message, SessionStore
from starlette.applications import Starlette

from .._agent import FunctionalWorkflowAgent
from .._errors import ContinuationAuthorityError, FunctionalWorkflowError, ResponseMismatchError
from ._a2a_parts import BOOL_WORDS, message_answers, new_answer_part, request_part
from ._defaults import default_session_store
from ._memory import DEFAULT_RELEASE_MEMORY_EVERY
from ._sweep import DEFAULT_SWEEP_EVERY, add_upkeep

__all__ = [
    "BOOL_WORDS",
    "FunctionalA2AExecutor",
    "FunctionalA2ARequestHandler",
    "a2a_app",
    "message_answers",
    "new_answer_part",
]

logger = logging.getLogger(__name__)

_GONE = "This task's pause can no longer be answered; start a new task on this context."
_TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
_BUSY = "Another task of this context is running; send this message again when it ends."
_HOST_KEY = "a2a_host"  # session.state entry of this host: the task that holds the pause, the messages it ran
_HANDLED_KEPT = 64  # message ids kept per paused task: a retried message must not answer the next pause


def _handled(session: AgentSession | None, task_id: str) -> list[str]:
    """The ids of the messages that ran on ``task_id`` (the task whose pause ``session`` holds)."""
    held = cast(dict[str, Any], session.state.get(_HOST_KEY) or {}) if session is not None else {}
    return list(held.get("messages") or []) if held.get("task_id") == task_id else []


def _replayed(message: A2AMessage, task_id: str) -> str:
    return (
        f"Message {message.message_id!r} already ran on task {task_id} (a retried answer); it does not answer "
        "the requests asked since. The task still waits for input: send the answer as a new message."
    )


@dataclass
class _Attempt:
    """One message run on a task: what the outcome paths need."""

    message: A2AMessage
    task_id: str
    answering: bool
    key: str
    updater: TaskUpdater
    session: AgentSession
    asked: list[Part]  # the waiting task's request parts, copied
    handled: list[str]  # the ids of the messages that already ran on the task


class FunctionalA2AExecutor(AgentExecutor):
    """Runs a FunctionalWorkflowAgent for ``a2a-sdk``: pauses become ``input-required`` tasks.

    Args:
        agent: The agent; one object serves every A2A context.

    Keyword Args:
        session_store: Where each context's session lives (key ``a2a:context:<context id>``).
        text_answers: Accept text parts as answers (see :func:`message_answers`).
    """

    def __init__(self, agent: FunctionalWorkflowAgent, *, session_store: SessionStore, text_answers: bool) -> None:
        super().__init__()
        self.agent = agent
        self.session_store = session_store
        self.text_answers = text_answers
        self.busy: set[str] = set()  # session keys with a run in flight; bounded by those runs
        # the handler's task store (set by it): a pause on a task that ended is stale
        self.task_store: TaskStore | VersionedTaskStore | None = None

    async def waits_on(self, session: AgentSession | None, context: ServerCallContext) -> str | None:
        """The task whose pause ``session``'s context waits on, or None (none, or that task has ended).

        A task that ended (failed, cancelled) cannot be answered, so its pause must not hold the context: the
        session write that would clear it can be lost (a store outage after the run).
        """
        paused_on = cast(dict[str, Any], session.state.get(_HOST_KEY) or {}).get("task_id") if session else None
        if not paused_on or self.task_store is None:
            return paused_on
        found = await self.task_store.get(paused_on, context)
        task: Task | None = found.task if isinstance(found, StoredTask) else found
        return None if task is not None and task.status.state in _TERMINAL else paused_on

    @staticmethod
    def session_key(context_id: str) -> str:
        """The session store key of one A2A context."""
        return f"a2a:context:{context_id}"

    async def session_for(self, context_id: str) -> AgentSession | None:
        """The stored session of ``context_id`` (None: the context never ran here)."""
        return await self.session_store.get(self.session_key(context_id))

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run one message of a task: start the workflow, or answer its pause; publish the task's new state."""
        task = context.current_task
        if task is not None and task.status.state in _TERMINAL:
            return  # an answer queued on a task that ended meanwhile: it must not run (a2a-sdk would run it)
        if context.message is None:
            raise ValueError("An A2A request without a message cannot run.")
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        answering = task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        key = self.session_key(task.context_id)
        if key in self.busy:  # one run per context (per process); a2a-sdk serializes only one task's messages
            await updater.failed(updater.new_agent_message([new_text_part(_BUSY)]))
            return
        self.busy.add(key)
        try:
            await self._run(context.message, task, answering, key, updater, context.call_context)
        finally:
            self.busy.discard(key)

    async def _run(
        self,
        message: A2AMessage,
        waiting: Task,
        answering: bool,
        key: str,
        updater: TaskUpdater,
        call: ServerCallContext,
    ) -> None:
        # copies: a2a-sdk updates the task object it handed over once start_work is processed
        asked = [Part.FromString(p.SerializeToString()) for p in waiting.status.message.parts if p.HasField("data")]
        session = await self.session_store.get(key) or self.agent.create_session(session_id=key)
        attempt = _Attempt(message, waiting.id, answering, key, updater, session, asked, _handled(session, waiting.id))
        if await self._refused_at_start(attempt, call):
            return
        await updater.start_work()
        try:
            response = await self.agent.run(self._agent_input(attempt), session=session)
        except ContinuationAuthorityError as exc:  # the pause is gone (expired, answered, abandoned): nothing ran
            await self._pause_gone(attempt, exc)
        except FunctionalWorkflowError as exc:  # refused and nothing changed (the stored session is still right)
            parts = [new_text_part(str(exc))]
            if answering:  # the task still waits: its status keeps the request parts it had
                await updater.requires_input(updater.new_agent_message([*parts, *asked]))
            else:
                await updater.failed(updater.new_agent_message(parts))
        except Exception:
            logger.exception("The workflow of A2A task %s failed.", attempt.task_id)
            session.state.pop(_HOST_KEY, None)
            await self.session_store.set(key, session)
            await updater.failed(updater.new_agent_message([new_text_part("The workflow failed.")]))
        else:
            await self._settle(attempt, response)

    async def _refused_at_start(self, attempt: _Attempt, call: ServerCallContext) -> bool:
        """Refuse a message the context cannot run now (it waits on another task, or this answer already ran)."""
        updater = attempt.updater
        paused_on = await self.waits_on(attempt.session, call)
        if paused_on not in (None, attempt.task_id):  # the context waits on another task (checked on receipt too)
            await updater.failed(updater.new_agent_message([new_text_part(f"Context waits on task {paused_on}.")]))
            return True
        if attempt.answering and attempt.message.message_id in attempt.handled:  # checked on receipt; this raced it
            text = new_text_part(_replayed(attempt.message, attempt.task_id))
            await updater.requires_input(updater.new_agent_message([text, *attempt.asked]))
            return True
        return False

    def _agent_input(self, attempt: _Attempt) -> Any:
        """The agent's input: the answers to the pause the task waits on, or the message's text."""
        if not attempt.answering:
            return get_message_text(attempt.message)
        pending = self.agent.pending_requests_for(attempt.session)
        answers = message_answers(attempt.message, pending, text_answers=self.text_answers)
        return [Message(role="user", contents=answers)]

    async def _pause_gone(self, attempt: _Attempt, exc: ContinuationAuthorityError) -> None:
        """The pause cannot be answered: leave a context another worker moved on, else end the task."""
        updater, session = attempt.updater, attempt.session
        stored = await self.session_store.get(attempt.key)
        if attempt.answering and stored is not None and stored.state != session.state:
            # another worker's run moved this context on (a racing answer won): leave its session and task be
            await updater.requires_input(updater.new_agent_message([new_text_part(str(exc)), *attempt.asked]))
            return
        if attempt.answering:  # no answer can reach this pause any more: end the task and free the context
            session.state.pop(_HOST_KEY, None)
            await self.session_store.set(attempt.key, session)
        await updater.failed(updater.new_agent_message([new_text_part(f"{exc} {_GONE}")]))

    async def _settle(self, attempt: _Attempt, response: AgentResponse[Any]) -> None:
        """Store the session (with the task a new pause waits on), then report the pause or the result."""
        updater, session = attempt.updater, attempt.session
        requests = [c for m in response.messages for c in m.contents if c.type == "function_approval_request"]
        if requests:
            messages = [*attempt.handled, attempt.message.message_id][-_HANDLED_KEPT:]
            session.state[_HOST_KEY] = {"task_id": attempt.task_id, "messages": messages}
        else:
            session.state.pop(_HOST_KEY, None)
        await self.session_store.set(attempt.key, session)
        if requests:
            parts = [new_text_part(f"{self.agent.name} waits for input: {len(requests)} request(s).")]
            await updater.requires_input(updater.new_agent_message(parts + [request_part(c) for c in requests]))
            return
        if response.text:
            await updater.add_artifact([new_text_part(response.text)], name="output")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task; a pause it held is abandoned, so its context takes new input."""
        key = self.session_key(context.context_id or "")
        session = await self.session_store.get(key) if context.context_id else None
        held = cast(dict[str, Any], session.state.get(_HOST_KEY) or {}) if session is not None else {}
        if session is not None and held.get("task_id") == context.task_id:
            try:
                await self.agent.abandon_continuation_async(session=session)
            except FunctionalWorkflowError:
                logger.warning("A2A task %s was cancelled; its pause could not be abandoned.", context.task_id)
            session.state.pop(_HOST_KEY, None)
            await self.session_store.set(key, session)
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class FunctionalA2ARequestHandler(DefaultRequestHandler):
    """``a2a-sdk``'s request handler that refuses a wrong answer with a protocol error before the task runs.

    ``a2a-sdk`` fails a task whose executor raises; this check makes a malformed or mistyped answer a JSON-RPC
    ``InvalidParams`` error instead, with the task still in ``input-required``.
    """

    def __init__(self, executor: FunctionalA2AExecutor, **kwargs: Any) -> None:
        super().__init__(agent_executor=executor, **kwargs)
        self.executor = executor
        executor.task_store = self.task_store

    async def check(self, message: A2AMessage, context: ServerCallContext) -> None:
        """Refuse ``message`` when it cannot answer the pause it names (or ignores the pause of its context).

        Raises:
            InvalidParamsError: The answer does not fit the pending requests, or a new message was sent on a
                context whose pause is still open (the message says which task to answer).
        """
        found = await self.task_store.get(message.task_id, context) if message.task_id else None
        task: Task | None = found.task if isinstance(found, StoredTask) else found
        context_id = task.context_id if task is not None else message.context_id
        session = await self.executor.session_for(context_id) if context_id else None
        paused_on = await self.executor.waits_on(session, context)
        if task is None:
            if paused_on and not message.task_id:
                raise InvalidParamsError(
                    f"Context {context_id} waits for input on task {paused_on}: send the answer with that task_id."
                )
            return  # an unknown task id: a2a-sdk refuses it (TaskNotFound)
        if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED or session is None:
            return  # an ended task: a2a-sdk refuses it; a running one: the executor's guard ignores it
        if message.context_id and message.context_id != task.context_id:
            return  # a2a-sdk refuses a context that is not the task's
        if message.message_id in _handled(session, task.id):
            raise InvalidParamsError(_replayed(message, task.id))
        pending = self.executor.agent.pending_requests_for(session)  # empty when another worker holds the pause:
        try:  # then only the shape is checked here and the agent's run checks the values (the task keeps waiting)
            message_answers(message, pending, text_answers=self.executor.text_answers)
        except ResponseMismatchError as exc:
            raise InvalidParamsError(str(exc)) from None

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
    release_memory_every: float | None = DEFAULT_RELEASE_MEMORY_EVERY,
    sweep_every: float | None = DEFAULT_SWEEP_EVERY,
) -> Starlette:
    """A Starlette app that serves ``agent`` over A2A (JSON-RPC, streaming), correct by default.

    A message starts a task that runs the workflow. A pause leaves the task in ``input-required``; its
    status message has a text part and, per request, a data part ``{"request_id", "data",
    "response_type", "response_schema"}`` (the answer's JSON Schema). Answer with a message on the same
    task (``task_id``) holding a data part ``{"request_id": <id>, "answer": <value>}``; the task then
    completes with the workflow's text as an artifact, or pauses again.

    What it sets, and why (README "Host it", A2A): one session per A2A context in ``session_store`` (key
    ``a2a:context:<id>``), so a client that left at the pause answers later; a wrong answer, or new input on
    a context whose pause is open, is JSON-RPC ``InvalidParams`` and changes nothing; an answer queued on a
    task that ended meanwhile is not run, and a message sent again never answers a later pause; text
    answers only with ``text_answers=True`` (``str`` takes the text, ``bool`` approve/yes or reject/no).

    Args:
        agent: The agent; one object serves every context.

    Keyword Args:
        url: The public URL of the JSON-RPC endpoint, advertised in the agent card.
        session_store: Where sessions live (a bounded ``InMemorySessionStore`` by default; pass a shared one,
            ``RedisSessionStore`` or ``PostgresSessionStore``, for several workers, with a shared ``task_store``).
        task_store: Where ``a2a-sdk`` keeps tasks (its ``InMemoryTaskStore`` by default).
        text_answers: Accept text parts as answers (see above).
        version: The agent card's version.
        rpc_path: The path of the JSON-RPC endpoint.
        release_memory_every: Seconds between two releases of free heap pages after a request; None: never.
        sweep_every: Seconds between two sweeps of expired pauses and sessions (README "Run it in production").

    Returns:
        The app; the agent card is served at ``/.well-known/agent-card.json``.

    Raises:
        ValueError: ``release_memory_every`` or ``sweep_every`` is not a positive, finite number or None.

    Examples:
        .. code-block:: python

            app = a2a_app(review.build().as_agent(name="review"), url="http://127.0.0.1:8000/")
            uvicorn.run(app, host="127.0.0.1", port=8000)  # A2AAgent(url="http://127.0.0.1:8000/")
    """
    executor = FunctionalA2AExecutor(
        agent,
        session_store=session_store if session_store is not None else default_session_store(agent),
        text_answers=text_answers,
    )
    card = AgentCard(
        name=agent.name or agent.id,
        description=agent.description or f"{agent.name}: a functional workflow agent.",
        version=version,
        default_input_modes=["text", "application/json"],
        default_output_modes=["text", "application/json"],
        capabilities=AgentCapabilities(streaming=True),
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        skills=[
            AgentSkill(id=agent.id, name=agent.name or agent.id, description=agent.description or "", tags=["workflow"])
        ],
    )
    handler = FunctionalA2ARequestHandler(
        executor, task_store=task_store if task_store is not None else InMemoryTaskStore(), agent_card=card
    )

    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_path)])
    app.state.a2a_handler = handler
    add_upkeep(app, agent, release_memory_every, sweep_every, stores=[executor.session_store], closing=[handler.aclose])
    return app
