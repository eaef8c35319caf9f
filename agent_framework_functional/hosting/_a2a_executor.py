"""The executor of ``a2a_app``: each message of an A2A task a :class:`Turn` of its context's session.

In: :func:`message_answers` (parts to answers); out: ``_a2a_from_run`` (a pause as ``input-required``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from a2a.helpers import get_message_text, new_data_part, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster import StoredTask, VersionedTaskStore
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskStore, TaskUpdater
from a2a.types import Message as A2AMessage
from a2a.types import Part, Task, TaskState
from a2a.utils.errors import TaskNotCancelableError
from agent_framework import AgentResponse, AgentSession, Content, Message, SessionStore, WorkflowEvent
from google.protobuf.json_format import MessageToDict

from .._agent import FunctionalWorkflowAgent
from .._answers import value_result
from .._chat import answers_to_responses
from .._errors import ContinuationAuthorityError, FunctionalWorkflowError, ResponseMismatchError, WorkflowRunningError
from ._adapter import ANSWER_FIELD, parse_typed_text
from ._turn import ConversationBusy, Turn, Turns

logger = logging.getLogger(__name__)

_GONE = "This task's pause can no longer be answered; start a new task on this context."
TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
_BUSY = "Another task of this context is running; send this message again when it ends."
HOST_KEY = "a2a_host"  # session.state entry of this host: the task that holds the pause, the messages it ran
_HANDLED_KEPT = 64  # message ids kept per paused task: a retried message must not answer the next pause
_ANSWERING = (
    "Task {} cannot be cancelled: an answer to its pause is running, and the task ends with that answer's "
    "outcome (read it with tasks/get)."
)


def _note(session: AgentSession | None) -> dict[str, Any]:
    """This host's entry in ``session``: the task holding the pause, the messages it ran, when it paused."""
    return cast(dict[str, Any], session.state.get(HOST_KEY) or {}) if session is not None else {}


def handled(session: AgentSession | None, task_id: str) -> list[str]:
    """The ids of the messages that ran on ``task_id`` (the task whose pause ``session`` holds)."""
    note = _note(session)
    return list(note.get("messages") or []) if note.get("task_id") == task_id else []


def replayed(message: A2AMessage, task_id: str) -> str:
    return (
        f"Message {message.message_id!r} already ran on task {task_id} (a retried answer); it does not answer "
        "the requests asked since. The task still waits for input: send the answer as a new message."
    )


@dataclass
class _Attempt:
    """One message run on a task."""

    message: A2AMessage
    task_id: str
    answering: bool
    turn: Turn
    updater: TaskUpdater
    asked: list[Part]  # the waiting task's request parts, copied
    handled: list[str]  # the ids of the messages that already ran on the task


class FunctionalA2AExecutor(AgentExecutor):
    """Runs a FunctionalWorkflowAgent for ``a2a-sdk``; a context's session is stored at ``a2a:context:<id>``."""

    def __init__(
        self, agent: FunctionalWorkflowAgent, *, session_store: SessionStore | None, text_answers: bool
    ) -> None:
        super().__init__()
        self.agent = agent
        self.turns = Turns(agent, session_store)
        self.session_store = self.turns.session_store
        self.text_answers = text_answers
        self.task_store: TaskStore | VersionedTaskStore | None = None

    async def waits_on(self, session: AgentSession | None, context: ServerCallContext) -> str | None:
        """The task whose pause ``session``'s context waits on; None when none or ended (its clearing may be lost)."""
        paused_on = _note(session).get("task_id")
        if not paused_on or self.task_store is None:
            return paused_on
        found = await self.task_store.get(paused_on, context)
        task: Task | None = found.task if isinstance(found, StoredTask) else found
        return None if task is not None and task.status.state in TERMINAL else paused_on

    @staticmethod
    def session_key(context_id: str) -> str:
        """The session store key of one A2A context."""
        return f"a2a:context:{context_id}"

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run one message of a task (start the workflow, or answer its pause); publish the task's new state."""
        task = context.current_task
        if task is not None and task.status.state in (*TERMINAL, TaskState.TASK_STATE_WORKING):
            return  # queued on a task that ended meanwhile, or whose answer another worker runs: it must not run
        if context.message is None:
            raise ValueError("An A2A request without a message cannot run.")
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        try:  # a2a-sdk serializes only one task's messages; a turn holds the whole context
            turn = await self.turns.begin(self.session_key(task.context_id))
        except ConversationBusy:
            await updater.failed(updater.new_agent_message([new_text_part(_BUSY)]))
            return
        # copies: a2a-sdk updates the task object it handed over once start_work is processed
        asked = [Part.FromString(p.SerializeToString()) for p in task.status.message.parts if p.HasField("data")]
        answering = task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        attempt = _Attempt(context.message, task.id, answering, turn, updater, asked, handled(turn.session, task.id))
        try:
            await self._run(attempt, context.call_context)
        finally:
            turn.end()

    async def _run(self, attempt: _Attempt, call: ServerCallContext) -> None:
        updater, session = attempt.updater, attempt.turn.session
        if await self._refused_at_start(attempt, call):
            return
        await updater.start_work()
        try:
            response = await self.agent.run(self._a2a_to_run(attempt), session=session)
        except ContinuationAuthorityError as exc:  # the pause is gone (expired, answered, abandoned): nothing ran
            await self._pause_gone(attempt, exc)
        except FunctionalWorkflowError as exc:  # refused and nothing changed (the stored session is still right)
            parts = [new_text_part(str(exc))]
            if attempt.answering:  # the task still waits: its status keeps the request parts it had
                await updater.requires_input(updater.new_agent_message([*parts, *attempt.asked]))
            else:
                await updater.failed(updater.new_agent_message(parts))
        except Exception:
            logger.exception("The workflow of A2A task %s failed.", attempt.task_id)
            session.state.pop(HOST_KEY, None)
            await attempt.turn.save()
            await updater.failed(updater.new_agent_message([new_text_part("The workflow failed.")]))
        else:
            await self._a2a_from_run(attempt, response)

    async def _refused_at_start(self, attempt: _Attempt, call: ServerCallContext) -> bool:
        """Refuse a message the context cannot run now (it waits on another task, or this answer already ran)."""
        updater = attempt.updater
        paused_on = await self.waits_on(attempt.turn.session, call)
        if paused_on not in (None, attempt.task_id):  # the context waits on another task (checked on receipt too)
            await updater.failed(updater.new_agent_message([new_text_part(f"Context waits on task {paused_on}.")]))
            return True
        if attempt.answering and attempt.message.message_id in attempt.handled:  # checked on receipt; this raced it
            text = new_text_part(replayed(attempt.message, attempt.task_id))
            await updater.requires_input(updater.new_agent_message([text, *attempt.asked]))
            return True
        return False

    def _a2a_to_run(self, attempt: _Attempt) -> Any:
        """The message's text, or its answers to the task's pause (ContinuationAuthorityError past the TTL)."""
        if not attempt.answering:
            return get_message_text(attempt.message)
        if self.outlived(attempt.turn.session):  # expired: its answer gets "start over" whatever its shape
            raise ContinuationAuthorityError
        pending = self.agent.pending_requests_for(attempt.turn.session)
        answers = message_answers(attempt.message, pending, text_answers=self.text_answers)
        return [Message(role="user", contents=answers)]

    async def _pause_gone(self, attempt: _Attempt, exc: ContinuationAuthorityError) -> None:
        """The pause cannot be answered: leave the task to whatever took the pause, else end the task."""
        updater, session = attempt.updater, attempt.turn.session
        if attempt.answering:
            stored = await self.session_store.get(attempt.turn.key)
            if (stored is not None and stored.state != session.state) or not self.outlived(session):
                # another answer (or a cancel) took this pause, here or on another worker: its outcome is the task's,
                # so nothing is written over it (not the old requests, not a failure)
                logger.info("An answer to A2A task %s lost to another answer or a cancel.", attempt.task_id)
                return
            session.state.pop(HOST_KEY, None)  # no answer can reach this pause any more: free the context
            await attempt.turn.save()
        await updater.failed(updater.new_agent_message([new_text_part(f"{exc} {_GONE}")]))

    async def _a2a_from_run(self, attempt: _Attempt, response: AgentResponse[Any]) -> None:
        """Store the session (with the task a new pause waits on), then report the pause or the result."""
        updater, session = attempt.updater, attempt.turn.session
        requests = [c for m in response.messages for c in m.contents if c.type == "function_approval_request"]
        if requests:
            messages = [*attempt.handled, attempt.message.message_id][-_HANDLED_KEPT:]
            session.state[HOST_KEY] = {"task_id": attempt.task_id, "messages": messages, "paused_at": time.time()}
        else:
            session.state.pop(HOST_KEY, None)
        await attempt.turn.save()
        if requests:
            parts = [new_text_part(f"{self.agent.name} waits for input: {len(requests)} request(s).")]
            await updater.requires_input(updater.new_agent_message(parts + [request_part(c) for c in requests]))
            return
        if response.text:
            await updater.add_artifact([new_text_part(response.text)], name="output")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task; a pause it kept is abandoned, so its context takes new input."""
        key = self.session_key(context.context_id or "")
        session = await self.session_store.get(key) if context.context_id else None
        if session is not None and _note(session).get("task_id") == context.task_id:
            try:
                await self.agent.abandon_continuation_async(session=session)
            except FunctionalWorkflowError:
                logger.warning("A2A task %s was cancelled; its pause could not be abandoned.", context.task_id)
            await self._free_context(session, key)
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()

    def outlived(self, session: AgentSession) -> bool:
        """Whether the pause ``session`` holds is older than the agent's ``continuation_ttl`` (expired)."""
        paused_at = _note(session).get("paused_at")
        return not isinstance(paused_at, (int, float)) or time.time() - paused_at >= self.agent.continuation_ttl

    async def release_dropped(
        self, session: AgentSession | None, task_id: str, context_id: str, context: ServerCallContext
    ) -> bool:
        """Abandon the pause of a waiting task the task store dropped (nobody can answer it): True when released."""
        if session is None or self.task_store is None or await self.task_store.get(task_id, context) is not None:
            return False
        try:
            await self.agent.abandon_continuation_async(session=session)
        except WorkflowRunningError:
            return False
        except ContinuationAuthorityError:
            pass  # gone already (answered, expired): only the context's note is left
        await self._free_context(session, self.session_key(context_id))
        return True

    async def before_cancel(self, task: Task) -> None:
        """Abandon ``task``'s pause before a2a-sdk cancels it; TaskNotCancelableError while an answer to it runs."""
        key = self.session_key(task.context_id)
        session = await self.session_store.get(key)
        if session is None or _note(session).get("task_id") != task.id:
            return  # the task holds no pause: a2a-sdk cancels it
        if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
            raise TaskNotCancelableError(_ANSWERING.format(task.id))
        try:
            await self.agent.abandon_continuation_async(session=session)
        except WorkflowRunningError:
            raise TaskNotCancelableError(_ANSWERING.format(task.id)) from None
        except ContinuationAuthorityError:
            if not self.outlived(session):  # claimed by an answer another worker runs
                raise TaskNotCancelableError(_ANSWERING.format(task.id)) from None
        await self._free_context(session, key)

    async def _free_context(self, session: AgentSession, key: str) -> None:
        """Drop the note of the pause ``session`` kept and write it: its context takes new input."""
        session.state.pop(HOST_KEY, None)
        await self.session_store.set(key, session)


# The text answers a bool request takes when text_answers=True (case and surrounding space ignored).
BOOL_WORDS: Mapping[str, bool] = {"approve": True, "yes": True, "reject": False, "no": False}


def _json_value(value: Any) -> Any:
    """A data part's value with whole floats as ints (``google.protobuf.Value`` stores every number as a double)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in cast(dict[str, Any], value).items()}
    if isinstance(value, list):
        return [_json_value(item) for item in cast(list[Any], value)]
    return value


def _text_value(text: str, event: WorkflowEvent[Any], request_id: str) -> Any:
    if event.response_type is str:
        return text
    if event.response_type is bool:
        word = text.strip().lower()
        if word not in BOOL_WORDS:
            raise ResponseMismatchError(
                f"Request {request_id!r} expects a yes/no answer: send one of {sorted(BOOL_WORDS)!r} as text, or a "
                f'data part {{"request_id": {request_id!r}, "answer": true}}. The task is still waiting for input.'
            )
        return BOOL_WORDS[word]
    return parse_typed_text(text)


def message_answers(
    message: A2AMessage, pending: Mapping[str, WorkflowEvent[Any]], *, text_answers: bool
) -> list[Content]:
    """The agent's answer contents for an A2A message sent on a task in ``input-required``.

    A data part ``{"request_id": <id>, "answer": <JSON>}`` (id optional with one pending); with ``text_answers``,
    a text part answers the one pending request.

    Raises:
        ResponseMismatchError: A part of another kind or shape, or a value the request's type refuses.
    """
    if not pending:  # kept by the continuation store (another worker): the agent's run checks the answers
        return _blind_answers(message)
    only = next(iter(pending)) if len(pending) == 1 else None
    answers: list[Content] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "data":
            data = _json_value(MessageToDict(part.data))
            if not isinstance(data, dict) or ANSWER_FIELD not in data:
                raise ResponseMismatchError(
                    'An answer data part must be an object {"request_id": <id>, "answer": <value>}; the task is '
                    "still waiting for input."
                )
            request_id = cast(dict[str, Any], data).get("request_id", only)
            answers.append(value_result(str(request_id), cast(dict[str, Any], data)[ANSWER_FIELD]))
        elif kind == "text" and text_answers and only is not None:
            answers.append(value_result(only, _text_value(part.text, pending[only], only)))
        elif kind == "text" and not part.text.strip():
            continue
        else:
            raise ResponseMismatchError(
                f"This task waits for input on {sorted(pending)!r}: answer with a data part "
                '{"request_id": <id>, "answer": <value>}'
                + (" or, while one request is pending, text" if text_answers else "")
                + f" (a {kind} part cannot answer). The task is still waiting for input."
            )
    if not answers:
        raise ResponseMismatchError("The message carries no answer; the task is still waiting for input.")
    answers_to_responses(answers, pending)  # converts each value; refuses unknown ids and duplicates
    return answers


def _blind_answers(message: A2AMessage) -> list[Content]:
    """The answers of a message checked for shape only (the pause is held elsewhere)."""
    if not message.parts:
        raise ResponseMismatchError("The message carries no answer; the task is still waiting for input.")
    answers: list[Content] = []
    for part in message.parts:
        data = _json_value(MessageToDict(part.data)) if part.WhichOneof("content") == "data" else None
        if not isinstance(data, dict) or not {"request_id", ANSWER_FIELD} <= data.keys():
            raise ResponseMismatchError(
                'Answer with data parts {"request_id": <id>, "answer": <value>}; the task is still waiting for input.'
            )
        answers.append(value_result(str(cast(dict[str, Any], data)["request_id"]), data[ANSWER_FIELD]))
    return answers


def request_part(content: Content) -> Part:
    props = content.additional_properties or {}
    call = content.function_call
    arguments = (call.parse_arguments() if call is not None else None) or {}
    return new_data_part(
        {
            "request_id": content.id,
            "data": arguments.get("data"),
            "response_type": props.get("response_type"),
            "response_schema": props.get("response_schema"),
        }
    )


def new_answer_part(value: Any, request_id: str | None = None) -> Part:
    """A data part answering ``request_id`` (or the one pending request) with ``value`` (any JSON)."""
    data: dict[str, Any] = {ANSWER_FIELD: json.loads(json.dumps(value))}
    if request_id is not None:
        data["request_id"] = request_id
    return new_data_part(data)
