"""``a2a_app`` over loopback HTTP with the real clients: a2a-sdk's client and ``A2AAgent`` (in a SequentialBuilder too).

Each test starts the app in a uvicorn thread and talks JSON-RPC to it. A pause must be an ``input-required`` task
whose status message carries the request (id, data, answer schema) as a data part; an answer on that task
resumes the workflow exactly once (``DEPLOYS``/``PUBLISHED`` count the side effects); anything wrong is a
protocol error and the task still waits for input.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, create_client
from a2a.helpers import get_data_parts, new_text_part
from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError
from agent_framework import AgentSession, SessionStore
from hosting_support import (
    DEPLOYS,
    PUBLISHED,
    ROOT,
    ServerThread,
    deployer,
    editor,
    make_agent,
    releaser,
    reviewer,
    run_sample_self_check,
)
from request_ids import core_id, core_ids

from agent_framework_functional import FunctionalWorkflowDefinition, RunContext, workflow
from agent_framework_functional.hosting.a2a import BOOL_WORDS, FunctionalA2AExecutor, a2a_app, new_answer_part

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = TaskState.TASK_STATE_COMPLETED


def serve_a2a(serve: Callable[..., ServerThread], definition: Any = deployer, **options: Any) -> str:
    """Serve ``definition``'s agent over A2A on a free loopback port; return its URL (also the card's)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    serve(a2a_app(make_agent(definition), url=url, **options), port=port)
    return url


@pytest.fixture
def serve_port() -> Any:
    """Like ``serve`` with a fixed port: the agent card must name the URL before the server starts."""
    started: list[ServerThread] = []

    def start(app: Any, port: int) -> ServerThread:
        server = ServerThread(app, port=port).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """One HTTP client for the test's A2A clients (no proxy settings for loopback)."""
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        yield client


async def client_for(url: str, http: httpx.AsyncClient) -> Client:
    """a2a-sdk's own client (non-streaming: each call returns the task when it settles)."""
    return await create_client(url, ClientConfig(httpx_client=http, streaming=False))


async def send(client: Client, parts: list[Part], task: Task | None = None, context_id: str | None = None) -> Task:
    """Send one user message (on ``task`` when given) and return the task it settled."""
    message = Message(role=Role.ROLE_USER, parts=parts, message_id=uuid.uuid4().hex)
    if task is not None:
        message.task_id, message.context_id = task.id, task.context_id
    elif context_id is not None:
        message.context_id = context_id
    last: Any = None
    async for event in client.send_message(SendMessageRequest(message=message)):
        last = event
    assert last is not None
    if last.HasField("task"):
        return last.task
    # a stream ends with a status update: read the task it settled
    return await client.get_task(GetTaskRequest(id=last.status_update.task_id))


def request_of(task: Task) -> dict[str, Any]:
    """The one request a paused task carries in its status message."""
    assert task.status.state == INPUT_REQUIRED, task.status
    (request,) = get_data_parts(task.status.message.parts)
    return request


def output_of(task: Task) -> str:
    assert task.status.state == COMPLETED, task.status
    return "".join(part.text for artifact in task.artifacts for part in artifact.parts)


async def test_the_agent_card_is_spec_compliant_without_a_description(serve_port: Any, http: httpx.AsyncClient) -> None:
    """The spec requires each skill's description; an agent without one got an empty string (a2a-sdk warned)."""
    plain = FunctionalWorkflowDefinition(deployer.func, name="plain")
    assert not make_agent(plain).description
    card = (await http.get(serve_a2a(serve_port, plain) + ".well-known/agent-card.json")).json()
    assert card["description"] and all(skill["description"] for skill in card["skills"]), card


async def test_bool_approval_round_trip(serve_port: Any, http: httpx.AsyncClient) -> None:
    client = await client_for(serve_a2a(serve_port), http)
    paused = await send(client, [new_text_part("a2a-bool")])
    request = request_of(paused)
    assert core_id(request["request_id"]) == "auto::0"
    assert request["data"] == {"action": "deploy", "target": "a2a-bool"}
    assert request["response_schema"] == {"type": "boolean"}
    done = await send(client, [new_answer_part(True, request["request_id"])], paused)
    assert output_of(done) == "deployed: a2a-bool"
    assert DEPLOYS["a2a-bool"] == 1


async def test_streaming_client_round_trip(serve_port: Any, http: httpx.AsyncClient) -> None:
    client = await create_client(serve_a2a(serve_port), ClientConfig(httpx_client=http, streaming=True))
    paused = await send(client, [new_text_part("a2a-stream")])
    assert core_id(request_of(paused)["request_id"]) == "auto::0"
    assert output_of(await send(client, [new_answer_part(True)], paused)) == "deployed: a2a-stream"
    assert DEPLOYS["a2a-stream"] == 1


async def test_str_and_structured_answers(serve_port: Any, http: httpx.AsyncClient) -> None:
    reviews = await client_for(serve_a2a(serve_port, reviewer), http)
    paused = await send(reviews, [new_text_part("essay")])
    assert request_of(paused)["response_schema"] == {"type": "string"}
    assert output_of(await send(reviews, [new_answer_part("looks good")], paused)) == "published: essay (looks good)"

    edits = await client_for(serve_a2a(serve_port, editor), http)
    paused = await send(edits, [new_text_part("a2a-title")])
    request = request_of(paused)
    assert set(request["response_schema"]["properties"]) == {"title", "body", "approved"}
    edited = {**request["data"], "body": "Edited.", "approved": True}
    assert output_of(await send(edits, [new_answer_part(edited)], paused)) == "published: a2a-title / Edited."
    assert PUBLISHED["a2a-title"] == 1


async def test_two_tasks_at_once_and_replay_refused(serve_port: Any, http: httpx.AsyncClient) -> None:
    client = await client_for(serve_a2a(serve_port), http)
    first, second = await asyncio.gather(
        send(client, [new_text_part("a2a-one")]), send(client, [new_text_part("a2a-two")])
    )
    assert first.context_id != second.context_id
    done = await asyncio.gather(
        send(client, [new_answer_part(True)], first), send(client, [new_answer_part(False)], second)
    )
    assert [output_of(task) for task in done] == ["deployed: a2a-one", "not deployed: a2a-two"]
    with pytest.raises(A2AError, match="terminal state"):
        await send(client, [new_answer_part(True)], first)  # the same answer again: the task has ended
    assert DEPLOYS["a2a-one"] == 1


async def test_two_answers_at_once_run_once(serve_port: Any, http: httpx.AsyncClient) -> None:
    client = await client_for(serve_a2a(serve_port), http)
    paused = await send(client, [new_text_part("a2a-race")])
    results = await asyncio.gather(
        *(send(client, [new_answer_part(True)], paused) for _ in range(3)), return_exceptions=True
    )
    assert any(isinstance(result, Task) and output_of(result) == "deployed: a2a-race" for result in results)
    assert DEPLOYS["a2a-race"] == 1


class MeetingStore(SessionStore):
    """Core's in-memory store whose first read waits (up to a second) for a second read: two runs read together."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.second = asyncio.Event()

    async def get(self, session_id: str) -> AgentSession | None:
        self.reads += 1
        if self.reads == 2:
            self.second.set()
        if self.reads == 1:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.second.wait(), 1)
        return await super().get(session_id)


class Recorded(EventQueue):
    """An a2a-sdk event queue that keeps what the executor publishes."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def enqueue_event(self, event: Any) -> None:
        self.events.append(event)


async def test_an_answer_queued_on_a_task_that_ended_does_not_run() -> None:
    """a2a-sdk hands the executor a message queued before the task completed: it must not resume anything."""
    executor = FunctionalA2AExecutor(make_agent(), session_store=SessionStore(), text_answers=False)
    message = Message(role=Role.ROLE_USER, parts=[new_answer_part(True)], message_id="m", task_id="t", context_id="c")
    ended = Task(id="t", context_id="c", status=TaskStatus(state=COMPLETED))
    context = RequestContext(ServerCallContext(), SendMessageRequest(message=message), "t", "c", ended)
    queue = Recorded()
    await executor.execute(context, queue)
    assert queue.events == []


async def test_two_new_tasks_on_one_context_keep_the_pause() -> None:
    """One run per context: a second task read at the same time is refused and cannot write over the pause."""
    store = MeetingStore()
    executor = FunctionalA2AExecutor(make_agent(), session_store=store, text_answers=False)

    def start(task_id: str) -> RequestContext:
        parts = [new_text_part("a2a-ctx")]
        message = Message(role=Role.ROLE_USER, parts=parts, message_id=task_id, task_id=task_id, context_id="ctx")
        return RequestContext(ServerCallContext(), SendMessageRequest(message=message), task_id, "ctx", None)

    queues = [Recorded(), Recorded()]
    await asyncio.gather(executor.execute(start("a"), queues[0]), executor.execute(start("b"), queues[1]))
    session = await store.get(executor.session_key("ctx"))
    assert session is not None
    assert core_ids(executor.agent.pending_requests_for(session)) == {"auto::0"}
    ends = [[event.status.state for event in queue.events if hasattr(event, "status")][-1] for queue in queues]
    assert sorted(ends) == sorted([INPUT_REQUIRED, TaskState.TASK_STATE_FAILED]), ends
    paused_id = "ab"[ends.index(INPUT_REQUIRED)]
    answer = Message(role=Role.ROLE_USER, parts=[new_answer_part(True)], message_id="m", task_id=paused_id)
    waiting = Task(id=paused_id, context_id="ctx", status=TaskStatus(state=INPUT_REQUIRED))
    done = Recorded()
    await executor.execute(
        RequestContext(ServerCallContext(), SendMessageRequest(message=answer), paused_id, "ctx", waiting), done
    )
    assert [event.status.state for event in done.events if hasattr(event, "status")][-1] == COMPLETED
    assert DEPLOYS["a2a-ctx"] == 1


async def test_cancelling_a_paused_task_frees_its_context(serve_port: Any, http: httpx.AsyncClient) -> None:
    client = await client_for(serve_a2a(serve_port), http)
    paused = await send(client, [new_text_part("a2a-cancel")])
    cancelled = await client.cancel_task(CancelTaskRequest(id=paused.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    with pytest.raises(A2AError, match="terminal state"):
        await send(client, [new_answer_part(True)], paused)
    again = await send(client, [new_text_part("a2a-cancel-2")], context_id=paused.context_id)
    assert output_of(await send(client, [new_answer_part(True)], again)) == "deployed: a2a-cancel-2"
    assert DEPLOYS["a2a-cancel"] == 0


async def test_client_gone_at_the_pause_answers_later(serve_port: Any) -> None:
    url = serve_a2a(serve_port)
    async with httpx.AsyncClient(trust_env=False, timeout=60) as first_http:
        paused = await send(await client_for(url, first_http), [new_text_part("a2a-later")])
    async with httpx.AsyncClient(trust_env=False, timeout=60) as later_http:
        later = await client_for(url, later_http)
        found = await later.get_task(GetTaskRequest(id=paused.id))
        assert request_of(found)["request_id"] == request_of(paused)["request_id"]
        assert output_of(await send(later, [new_answer_part(True)], found)) == "deployed: a2a-later"


async def test_hostile_input_is_a_protocol_error_and_the_pause_stays(serve_port: Any, http: httpx.AsyncClient) -> None:
    client = await client_for(serve_a2a(serve_port), http)
    paused = await send(client, [new_text_part("a2a-hostile")])
    request_id = request_of(paused)["request_id"]
    other = await send(client, [new_text_part("a2a-other")])
    ghost = Task(id=str(uuid.uuid4()), context_id=paused.context_id)
    with pytest.raises(A2AError, match="not found"):
        await send(client, [new_answer_part(True)], ghost)
    with pytest.raises(A2AError, match="does not match"):  # an answer naming another context's task
        await send(client, [new_answer_part(True)], Task(id=paused.id, context_id=other.context_id))
    for parts, says in [
        ([new_text_part("approve")], "data part"),  # text answers are off by default
        ([new_answer_part("yes")], "bool"),  # pydantic's lax rules must not read "yes" as true
        ([new_answer_part(True, "auto::9")], "does not answer a pending request"),
        ([Part(url="http://example.com/x")], "url part cannot answer"),
        ([new_answer_part(True, request_id), new_answer_part(True, request_id)], "more than once"),
    ]:
        with pytest.raises(A2AError, match=says):
            await send(client, parts, paused)
    with pytest.raises(A2AError, match="waits for input on task"):  # new input on a paused context
        await send(client, [new_text_part("again")], context_id=paused.context_id)
    still = await client.get_task(GetTaskRequest(id=paused.id))
    assert still.status.state == INPUT_REQUIRED
    assert output_of(await send(client, [new_answer_part(True)], paused)) == "deployed: a2a-hostile"
    assert DEPLOYS["a2a-hostile"] == 1


@workflow(name="copier", description="Asks how many copies (an int), then makes them.")
async def copier(text: str, ctx: RunContext) -> str:
    copies = await ctx.request_info({"copies_of": text}, response_type=int)
    return f"{copies!r} copies of {text}"


async def test_an_int_request_takes_only_a_json_number(serve_port: Any, http: httpx.AsyncClient) -> None:
    """The request's schema says integer: a data part's true, "3" or " 3 " is refused naming the request (core would
    take true, and a string kept as result text would read as 3); the task still waits and 3 answers it."""
    client = await client_for(serve_a2a(serve_port, copier), http)
    paused = await send(client, [new_text_part("memo")])
    assert request_of(paused)["response_schema"] == {"type": "integer"}
    for lax in (True, "3", " 3 "):
        with pytest.raises(A2AError, match="valid integer"):
            await send(client, [new_answer_part(lax)], paused)
    still = await client.get_task(GetTaskRequest(id=paused.id))
    assert still.status.state == INPUT_REQUIRED
    assert output_of(await send(client, [new_answer_part(3)], paused)) == "3 copies of memo"


async def test_an_earlier_rounds_answer_sent_to_the_next_pause_is_invalid_params(
    serve_port: Any, http: httpx.AsyncClient
) -> None:
    """Core numbers requests per run (``auto::0`` again in the context's next task); the published ids are unique
    to their pause, so round one's answer sent again on round two's task (a client retry) answers nothing there."""
    client = await client_for(serve_a2a(serve_port), http)
    first = await send(client, [new_text_part("a2a-round-one")])
    round_one = [new_answer_part(True, request_of(first)["request_id"])]  # the answer, kept by the client
    assert output_of(await send(client, round_one, first)) == "deployed: a2a-round-one"
    second = await send(client, [new_text_part("a2a-round-two")], context_id=first.context_id)
    assert core_id(request_of(second)["request_id"]) == core_id(request_of(first)["request_id"])
    with pytest.raises(A2AError, match="does not answer a pending request"):
        await send(client, round_one, second)
    assert DEPLOYS["a2a-round-two"] == 0  # nothing ran
    still = await client.get_task(GetTaskRequest(id=second.id))
    assert request_of(still) == request_of(second)
    assert output_of(await send(client, [new_answer_part(True)], second)) == "deployed: a2a-round-two"


async def test_text_answers_take_only_the_bool_vocabulary(serve_port: Any, http: httpx.AsyncClient) -> None:
    assert dict(BOOL_WORDS) == {"approve": True, "yes": True, "reject": False, "no": False}
    client = await client_for(serve_a2a(serve_port, text_answers=True), http)
    paused = await send(client, [new_text_part("a2a-words")])
    for word in ("ok", "true", "1", "on"):
        with pytest.raises(A2AError, match="yes/no answer"):
            await send(client, [new_text_part(word)], paused)
    assert output_of(await send(client, [new_text_part(" Approve ")], paused)) == "deployed: a2a-words"


async def test_a2a_agent_in_a_sequential_orchestration(serve_port: Any) -> None:
    """The remote pause reaches the outer caller as a request; its answer resumes the remote workflow once."""
    from agent_framework import Content, WorkflowRunState
    from agent_framework_a2a import A2AAgent
    from agent_framework_orchestrations import SequentialBuilder

    url = serve_a2a(serve_port, text_answers=True)
    async with httpx.AsyncClient(trust_env=False, timeout=60) as remote_http:
        remote = A2AAgent(name="remote-deployer", url=url, http_client=remote_http)
        workflow = SequentialBuilder(participants=[remote]).build()
        first = await workflow.run("a2a-seq")
        requests = first.get_request_info_events()
        assert len(requests) == 1, first
        assert "waits for input" in str(requests[0].data.text)
        final = await workflow.run(responses={requests[0].request_id: Content.from_text(text="approve")})
        assert final.get_final_state() == WorkflowRunState.IDLE
        texts = [str(output) for output in final.get_outputs()]
        assert any("deployed: a2a-seq" in text for text in texts), texts
    assert DEPLOYS["a2a-seq"] == 1


def test_host_a2a_sample_self_check() -> None:
    out = run_sample_self_check(ROOT / "samples" / "host_a2a.py")
    assert "self-check passed: deployed: ship it" in out


async def test_a_pause_taken_by_one_worker_is_answered_on_another(serve_port: Any, tmp_path: Any) -> None:
    """Two workers share the session and task stores and the workflow's continuation store and checkpoints."""
    from a2a.server.tasks import InMemoryTaskStore
    from agent_framework import FileCheckpointStorage

    from agent_framework_functional import SQLiteContinuationStore

    sessions, tasks = SessionStore(), InMemoryTaskStore()
    async with SQLiteContinuationStore(tmp_path / "continuations.db") as store:

        def worker() -> str:
            workflow = deployer.build(
                checkpoint_storage=FileCheckpointStorage(tmp_path / "checkpoints"), continuation_store=store
            )
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            url = f"http://127.0.0.1:{port}/"
            serve_port(
                a2a_app(workflow.as_agent(name="deployer"), url=url, session_store=sessions, task_store=tasks), port
            )
            return url

        first_url, second_url = worker(), worker()
        async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
            first, second = await client_for(first_url, http), await client_for(second_url, http)
            paused = await send(first, [new_text_part("a2a-workers")])
            for parts in ([new_text_part("approve")], [Part(url="http://example.com/x")], [new_answer_part(True)]):
                with pytest.raises(A2AError, match="data part"):  # the shape is checked on any worker
                    await send(second, parts, paused)
            request_id = request_of(paused)["request_id"]
            refused = await send(second, [new_answer_part("yes", request_id)], paused)  # the agent's check
            assert "only true or false" in refused.status.message.parts[0].text
            assert request_of(refused)["request_id"] == request_id  # still waiting, with its request
            assert output_of(await send(second, [new_answer_part(True, request_id)], paused)) == "deployed: a2a-workers"
            # worker one still holds the task as waiting: a2a-sdk runs the late answer, the executor ignores it
            late = await send(first, [new_answer_part(True, request_id)], paused)
            assert output_of(late) == "deployed: a2a-workers"
    assert DEPLOYS["a2a-workers"] == 1


class FailingWrites(SessionStore):
    """Core's in-memory store whose writes fail while ``down`` is set (a Redis or Postgres outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def set(self, session_id: str, session: AgentSession) -> None:
        if self.down:
            raise ConnectionError("the session store is unreachable")
        await super().set(session_id, session)


async def test_a_session_write_lost_in_an_outage_does_not_lock_the_context(
    serve_port: Any, http: httpx.AsyncClient
) -> None:
    """The answer ran but its session write failed: the task ended, and its context must take new input after."""
    store = FailingWrites()
    client = await client_for(serve_a2a(serve_port, session_store=store), http)
    paused = await send(client, [new_text_part("a2a-outage")])
    store.down = True
    with pytest.raises(A2AError):
        await send(client, [new_answer_part(True)], paused)
    store.down = False
    ended = await client.get_task(GetTaskRequest(id=paused.id))
    assert ended.status.state == TaskState.TASK_STATE_FAILED
    with pytest.raises(A2AError, match="terminal state"):
        await send(client, [new_answer_part(True)], paused)  # nothing runs twice
    assert DEPLOYS["a2a-outage"] == 1
    again = await send(client, [new_text_part("a2a-outage-2")], context_id=paused.context_id)
    assert output_of(await send(client, [new_answer_part(True)], again)) == "deployed: a2a-outage-2"


async def test_a_retried_answer_does_not_answer_the_next_pause(serve_port: Any, http: httpx.AsyncClient) -> None:
    """A client retry re-sends the same message: it approved the build gate, then the release gate it never saw."""
    client = await client_for(serve_a2a(serve_port, releaser), http)
    paused = await send(client, [new_text_part("a2a-retry")])
    answer = Message(role=Role.ROLE_USER, parts=[new_answer_part(True)], message_id=uuid.uuid4().hex)
    answer.task_id, answer.context_id = paused.id, paused.context_id
    for _ in range(2):
        with contextlib.suppress(A2AError):
            async for _event in client.send_message(SendMessageRequest(message=answer)):
                pass
    with pytest.raises(A2AError, match="already ran on task"):
        async for _event in client.send_message(SendMessageRequest(message=answer)):
            pass
    waiting = await client.get_task(GetTaskRequest(id=paused.id))
    assert request_of(waiting)["data"] == {"gate": "release", "target": "a2a-retry"}
    assert output_of(await send(client, [new_answer_part(False)], waiting)) == "a2a-retry: build=True release=False"


@pytest.mark.parametrize("named", [True, False])
async def test_an_answer_after_the_pause_expired_fails_the_task_and_frees_the_context(
    serve_port: Any, http: httpx.AsyncClient, named: bool
) -> None:
    """A task whose pause expired cannot be answered any more: the answer fails the task (saying why and what to do),
    runs nothing, and the context takes new input. (It stayed ``input-required`` for good, refusing every answer; an
    answer without ``request_id``, once the sweep had dropped the expired pause, was told to name one.)"""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    serve_port(a2a_app(deployer.build(continuation_ttl=1).as_agent(name="deployer"), url=url), port=port)
    client = await client_for(url, http)
    paused = await send(client, [new_text_part(f"a2a-expired-{named}")])
    request_id = request_of(paused)["request_id"]
    await asyncio.sleep(1.3)
    failed = await send(client, [new_answer_part(True, request_id if named else None)], paused)
    assert failed.status.state == TaskState.TASK_STATE_FAILED, failed.status
    reason = " ".join(part.text for part in failed.status.message.parts if part.HasField("text"))
    assert "new task" in reason, reason
    assert DEPLOYS[f"a2a-expired-{named}"] == 0
    again = await send(client, [new_text_part("a2a-expired-2")], context_id=paused.context_id)
    answer = new_answer_part(True, request_of(again)["request_id"])
    assert output_of(await send(client, [answer], again)) == "deployed: a2a-expired-2"


async def test_a_message_without_text_or_answer_is_refused(serve_port: Any, http: httpx.AsyncClient) -> None:
    """New input without text (only data, or blank text) is ``InvalidParams``: the workflow never runs with ``""``."""
    from a2a.helpers import new_data_part

    client = await client_for(serve_a2a(serve_port), http)
    for parts in ([new_data_part({"target": "a2a-data"})], [new_text_part("  ")]):
        with pytest.raises(A2AError, match="needs a text part"):
            await send(client, parts)
    assert DEPLOYS[""] == 0
    paused = await send(client, [new_text_part("a2a-text")])
    with pytest.raises(A2AError, match="carries no answer"):  # blank text on a paused task answers nothing
        await send(client, [new_text_part(" ")], paused)
    assert output_of(await send(client, [new_answer_part(True)], paused)) == "deployed: a2a-text"


async def test_a_body_over_max_body_bytes_is_413(serve_port: Any, http: httpx.AsyncClient) -> None:
    """The default limit is 1 MiB: a 2 MiB message is refused before a2a-sdk parses it; a smaller limit applies too."""
    url = serve_a2a(serve_port)
    client = await client_for(url, http)
    with pytest.raises(A2AError):
        await send(client, [new_text_part("a2a-huge" + "x" * (2 * 1024 * 1024))])
    raw = await http.post(url, content=b"{" + b" " * (1024 * 1024) + b"}", headers={"content-type": "application/json"})
    assert raw.status_code == 413
    assert "larger than 1048576 bytes" in raw.text
    small = await client_for(serve_a2a(serve_port, max_body_bytes=2000), http)
    with pytest.raises(A2AError):
        await send(small, [new_text_part("a2a-small" + "y" * 2000)])
    assert output_of(await send(small, [new_answer_part(True)], await send(small, [new_text_part("a2a-fits")])))
    with pytest.raises(ValueError, match="max_body_bytes"):
        a2a_app(make_agent(), url=url, max_body_bytes=0)


def serve_app(serve: Callable[..., ServerThread], agent: Any, **options: Any) -> tuple[str, Any]:
    """Serve ``a2a_app(agent)`` on a free loopback port; return its URL and its a2a-sdk request handler."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    app = a2a_app(agent, url=url, **options)
    serve(app, port=port)
    return url, app.state.a2a_handler


async def test_the_default_task_store_is_bounded(serve_port: Any, http: httpx.AsyncClient) -> None:
    """Finished tasks go ``continuation_ttl`` after their last write, unfinished ones twice that; at most
    ``max_tasks`` are kept, the least recently written finished ones first. (a2a-sdk's store kept every task.)"""
    from agent_framework_functional.hosting.a2a import DEFAULT_MAX_TASKS, BoundedTaskStore

    agent = make_agent()
    url, handler = serve_app(serve_port, agent)
    store = handler.task_store
    assert isinstance(store, BoundedTaskStore)
    assert (store.ttl, store.max_tasks) == (agent.continuation_ttl, DEFAULT_MAX_TASKS)
    now = [0.0]
    store.clock = lambda: now[0]
    client = await client_for(url, http)

    async def found(task: Task) -> bool:
        try:
            await client.get_task(GetTaskRequest(id=task.id))
        except A2AError as exc:
            assert "not found" in str(exc).lower(), exc
            return False
        return True

    done = await send(client, [new_answer_part(True)], await send(client, [new_text_part("a2a-bounded-1")]))
    waiting = await send(client, [new_text_part("a2a-bounded-2")])
    now[0] = store.ttl + 1
    assert not await found(done)
    assert await found(waiting)  # its pause expired: an answer still learns why it cannot run
    now[0] = 2 * store.ttl + 1
    assert not await found(waiting)
    assert len(store) == 0

    store.max_tasks = 2
    first = await send(client, [new_text_part("a2a-bounded-3")])
    second = await send(client, [new_answer_part(True)], await send(client, [new_text_part("a2a-bounded-4")]))
    third = await send(client, [new_text_part("a2a-bounded-5")])
    assert [await found(task) for task in (first, second, third)] == [True, False, True]
    assert output_of(await send(client, [new_answer_part(True)], first)) == "deployed: a2a-bounded-3"
    with pytest.raises(ValueError, match="max_tasks"):
        BoundedTaskStore(ttl=1, max_tasks=0)
    custom = BoundedTaskStore(ttl=5, max_tasks=3)  # used as given: it already never writes over a finished task
    assert serve_app(serve_port, make_agent(), task_store=custom)[1].task_store is custom


async def test_the_sweep_drops_expired_tasks_with_no_traffic(serve_port: Any, http: httpx.AsyncClient) -> None:
    """A waiting task past twice the TTL is dropped by the app's sweep, not only by the next request: 300
    unanswered pauses kept about 15 MB of tasks after their pauses were released, until traffic came."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    app = a2a_app(make_agent(), url=url, sweep_every=3600)
    serve_port(app, port=port)
    store = app.state.a2a_handler.task_store
    now = [0.0]
    store.clock = lambda: now[0]
    client = await client_for(url, http)
    await send(client, [new_text_part("a2a-swept")])
    (sweep,) = app.state.expiry_sweeps
    assert len(store) == 1
    now[0] = 2 * store.ttl + 1
    assert await sweep.sweep() >= 1  # what the sweep task runs every sweep_every seconds
    assert len(store) == 0


async def test_a_paused_task_is_released_from_memory_after_the_pause_ttl(
    serve_port: Any, http: httpx.AsyncClient
) -> None:
    """a2a-sdk keeps a task waiting for input in memory (its ``ActiveTask`` and four asyncio tasks) until
    ``interrupted_task_timeout``, which ``a2a_app`` sets to the pause TTL (a2a-sdk's default: never)."""
    url, handler = serve_app(serve_port, deployer.build(continuation_ttl=1).as_agent(name="deployer"))
    client = await client_for(url, http)
    paused = await send(client, [new_text_part("a2a-release")])
    active = handler._active_task_registry._active_tasks  # pyright: ignore[reportPrivateUsage]  (a2a-sdk: per task)
    assert paused.id in active
    for _ in range(200):  # released one TTL (1 s) after the pause; waits at most 20 s
        if paused.id not in active:
            break
        await asyncio.sleep(0.1)
    assert paused.id not in active
    found = await client.get_task(GetTaskRequest(id=paused.id))  # the store still has it
    assert found.status.state == INPUT_REQUIRED


async def test_a_context_whose_waiting_task_left_the_task_store_takes_new_input(
    serve_port: Any, http: httpx.AsyncClient
) -> None:
    """Past ``max_tasks`` a waiting task is dropped; its pause can no longer be answered (task not found), so new
    text on its context starts a new task instead of "waits for input on task ..." until the session's TTL."""
    from agent_framework_functional.hosting.a2a import BoundedTaskStore

    client = await client_for(serve_a2a(serve_port, task_store=BoundedTaskStore(ttl=3600, max_tasks=3)), http)
    victim = await send(client, [new_text_part("a2a-dropped")])
    answer = [new_answer_part(True, request_of(victim)["request_id"])]
    for index in range(4):
        await send(client, [new_text_part(f"a2a-dropping-{index}")])  # other contexts, each waiting
    with pytest.raises(A2AError, match="not found"):
        await send(client, answer, victim)
    again = await send(client, [new_text_part("a2a-dropped-again")], context_id=victim.context_id)
    assert output_of(await send(client, [new_answer_part(True, request_of(again)["request_id"])], again)) == (
        "deployed: a2a-dropped-again"
    )
    assert DEPLOYS["a2a-dropped"] == 0
