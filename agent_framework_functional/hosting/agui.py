"""AG-UI in one call: :func:`agui_endpoint` serves a FunctionalWorkflowAgent to CopilotKit and other AG-UI clients.

It registers ``agent-framework-ag-ui``'s own endpoint with the settings a pausing agent needs, a guard that
refuses bad requests with a 4xx before AG-UI or the agent touch anything, and a view of the agent
(:class:`AGUIAgent`) that turns AG-UI's resume payloads into the agent's answer contents.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from inspect import isawaitable
from typing import Any, cast

from agent_framework import AgentResponseUpdate, AgentSession, Content, ContextProvider, SessionStore, WorkflowEvent
from agent_framework_ag_ui import (
    AgentFrameworkAgent,
    AGUIThreadSnapshot,
    AGUIThreadSnapshotStore,
    add_agent_framework_fastapi_endpoint,
)
from agent_framework_ag_ui._snapshots import _session_id_for_thread  # pyright: ignore[reportPrivateUsage]
from fastapi import Depends, FastAPI, HTTPException, Request

from .._agent import FunctionalWorkflowAgent
from .._errors import ResponseMismatchError
from .._session import SESSION_STATE_KEY
from .._updates import REQUEST_INFO_FUNCTION_NAME
from ._adapter import ANSWER_FIELD, HostedAgent, as_messages, check_answer, replace_contents, result_answer
from ._agui_approvals import bound_approval_state, restore_open_approvals
from ._snapshots import snapshot_store_for

DEFAULT_MAX_BODY_BYTES = 1_000_000
"""Largest request body :func:`agui_endpoint` reads (bytes); a larger one is refused with 413."""

DEFAULT_MAX_RUNS = 512
"""Runs one endpoint keeps going at once (AG-UI's ``max_detached_runs``); more get 503 until one ends."""


class ReservedSessionState(ContextProvider):
    """Names the package's ``session.state`` key as server-owned, so AG-UI never merges client ``state`` into it.

    AG-UI copies the client's ``state`` into ``session.state`` except for the keys of the agent's context
    providers; this provider exists for its ``source_id`` and does nothing when run.
    """

    def __init__(self) -> None:
        super().__init__(SESSION_STATE_KEY)


def _with_answer_slot(content: Content) -> Content:
    """A ``request_info`` call (or its approval request) with ``"answer": null`` added to its arguments.

    AG-UI accepts an approval's edited arguments only for keys the call already has; the slot lets a client
    answer with ``{"approved": true, "answer": <any JSON>}``.
    """
    call = content.function_call if content.type == "function_approval_request" else content
    if call is None or call.type != "function_call" or call.name != REQUEST_INFO_FUNCTION_NAME:
        return content
    arguments = call.parse_arguments() or {}
    if ANSWER_FIELD in arguments:
        return content
    raw = content.to_dict()
    target = raw["function_call"] if content.type == "function_approval_request" else raw
    target["arguments"] = {**arguments, ANSWER_FIELD: None}
    return Content.from_dict(raw)


def _approval_as_answer(content: Content) -> Content:
    """An approval whose edited arguments carry a non-null ``answer``, as that answer's ``function_result``."""
    if content.type != "function_approval_response" or content.approved is not True or content.function_call is None:
        return content
    value = (content.function_call.parse_arguments() or {}).get(ANSWER_FIELD)
    request_id = content.id or content.function_call.call_id
    if value is None or not request_id:
        return content
    return result_answer(request_id, value)


def payload_answer(request_id: str, payload: dict[str, Any]) -> Content:
    """The answer content the agent gets for an AG-UI resume ``payload`` (what :class:`AGUIAgent` delivers)."""
    if payload.get("approved") is True and payload.get(ANSWER_FIELD) is not None:
        return result_answer(request_id, payload[ANSWER_FIELD])
    call = Content.from_function_call(call_id=request_id, name=REQUEST_INFO_FUNCTION_NAME, arguments={})
    return Content.from_function_approval_response(bool(payload.get("approved")), request_id, call)


class AGUIAgent(HostedAgent):
    """The agent as AG-UI sees it: its session key protected, resume payloads turned into answer contents."""

    @property
    def context_providers(self) -> list[Any]:
        """The wrapped agent's providers plus :class:`ReservedSessionState` (read by AG-UI, never run)."""
        return [*self.agent.context_providers, ReservedSessionState()]

    def answers_in(self, messages: Any, session: AgentSession | None) -> Any:
        """Approvals carrying an ``answer`` become ``function_result`` contents; everything else is unchanged."""
        found = as_messages(messages)
        return messages if found is None else replace_contents(found, _approval_as_answer)

    def updates_out(self, stream: Any) -> Any:
        """Each streamed ``request_info`` call gets its ``answer`` slot."""

        def slot(update: AgentResponseUpdate) -> AgentResponseUpdate:
            update.contents = [_with_answer_slot(content) for content in update.contents]
            return update

        return stream.with_update_transform(slot)


def _resume_entries(body: dict[str, Any]) -> list[dict[str, Any]]:
    resume: Any = body.get("resume")
    if isinstance(resume, dict):
        resume = cast(dict[str, Any], resume).get("interrupts")
    if not isinstance(resume, list):
        return []
    return [cast(dict[str, Any], entry) for entry in cast(list[Any], resume) if isinstance(entry, dict)]


def _refuse(detail: str) -> HTTPException:
    return HTTPException(status_code=400, detail=detail)


async def check_request(
    body: Any,
    agent: FunctionalWorkflowAgent,
    scope: str,
    snapshot_store: AGUIThreadSnapshotStore,
    runner: AgentFrameworkAgent | None = None,
) -> None:
    """Refuse (``HTTPException`` 400) what AG-UI would let through and break a paused thread; read-only.

    Client ``state`` naming the package's session key; a resume entry that is not ``resolved`` (a cancelled
    interrupt never reaches the workflow, which stays paused, and AG-UI then refuses every later request on
    the thread); a resume entry for an interrupt that is not pending
    (also when the thread's pause was already answered: AG-UI would run the resent transcript as a new turn,
    and the same answer sent once more would approve that new pause); a resolved entry without a boolean
    ``approved``; or an answer that does not convert to its request's ``response_type`` (the detail names the
    field). AG-UI would otherwise claim the interrupt and the agent refuse it, leaving the interrupt's outcome
    unknown and the thread stuck. When this process holds nothing for the thread (a restart, another worker),
    the thread's snapshot says which interrupts are open, and they are registered in ``runner``'s AG-UI approval
    state (which is process-local) so AG-UI hands the answer to the agent.
    """
    if not isinstance(body, dict):
        return
    request = cast(dict[str, Any], body)
    _refuse_reserved_state(request.get("state"))
    entries = _resume_entries(request)
    thread_id = request.get("threadId", request.get("thread_id"))
    if not entries or not isinstance(thread_id, str):
        return
    _refuse_unresolved(entries)
    session = AgentSession(session_id=_session_id_for_thread(scope=scope, thread_id=thread_id))
    pending = agent.pending_requests_for(session)
    if pending:
        for entry in entries:
            _check_answer_entry(entry, pending)
        return
    snapshot = await snapshot_store.get(scope=scope, thread_id=thread_id)
    _refuse_not_open(entries, snapshot)
    if runner is not None and snapshot is not None:
        restore_open_approvals(runner, scope, thread_id, snapshot)
    # Open in the thread's snapshot: the agent decides (it holds the pause's token in the session).


def _interrupt_id(entry: dict[str, Any]) -> Any:
    return entry.get("interruptId", entry.get("interrupt_id", entry.get("id")))


def _refuse_reserved_state(state: Any) -> None:
    if isinstance(state, dict) and SESSION_STATE_KEY in state:
        raise _refuse(
            f"The state key {SESSION_STATE_KEY!r} is reserved: the server keeps each thread's pause there. "
            "Remove it from the client state and send the request again."
        )


def _refuse_unresolved(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        if entry.get("status", "resolved") != "resolved":
            raise _refuse(
                "Only status 'resolved' is accepted: a cancelled interrupt never reaches the workflow, which stays "
                "paused, and the thread then accepts nothing. Decline a bool request with "
                "{'approved': false}, or answer the request; its owner can abandon the pause."
            )


def _refuse_not_open(entries: list[dict[str, Any]], snapshot: AGUIThreadSnapshot | None) -> None:
    """Nothing pending in this process: each entry must name an interrupt the thread's snapshot holds open."""
    open_ids: set[str] = set() if snapshot is None else {str(i.get("id")) for i in snapshot.interrupt or []}
    for entry in entries:
        interrupt_id = _interrupt_id(entry)
        if interrupt_id not in open_ids:
            raise _refuse(
                f"Interrupt {interrupt_id!r} is not pending on this thread (already answered, or never raised); "
                "nothing was run. Read the thread's latest run (its RUN_FINISHED) before answering, and send "
                "new input as a run without 'resume'."
            )


def _check_answer_entry(entry: dict[str, Any], pending: Mapping[str, WorkflowEvent[Any]]) -> None:
    """One resume entry against this process's pending requests: a pending id, ``approved``, a fitting answer."""
    interrupt_id = _interrupt_id(entry)
    if not isinstance(interrupt_id, str) or interrupt_id not in pending:
        raise _refuse(f"Interrupt {interrupt_id!r} is not pending on this thread; resume one of {sorted(pending)!r}.")
    payload = entry.get("payload")
    if not isinstance(payload, dict) or not isinstance(cast(dict[str, Any], payload).get("approved"), bool):
        raise _refuse(
            f"The resume payload for {interrupt_id!r} must be an object with a boolean 'approved', plus "
            f"'{ANSWER_FIELD}': <value> when the request expects something other than a bool."
        )
    try:
        check_answer(payload_answer(interrupt_id, cast(dict[str, Any], payload)), pending)
    except ResponseMismatchError as exc:
        raise _refuse(str(exc)) from None


class _BodyLimit:
    """ASGI middleware: a POST to ``path`` whose body exceeds ``max_bytes`` gets 413 before anything reads it."""

    def __init__(self, app: Any, *, path: str, max_bytes: int) -> None:
        self.app = app
        self.path = path
        self.max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Any) -> None:
        detail = json.dumps({"detail": f"The request body is larger than {self.max_bytes} bytes."}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(detail)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": detail})


def agui_endpoint(
    app: FastAPI,
    agent: FunctionalWorkflowAgent,
    path: str = "/",
    *,
    snapshot_store: AGUIThreadSnapshotStore | SessionStore | None = None,
    single_user: bool = False,
    authorization_scope_resolver: Callable[..., str | Awaitable[str]] | None = None,
    dependencies: Sequence[Any] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_runs: int = DEFAULT_MAX_RUNS,
) -> None:
    """Serve ``agent`` at ``POST path`` over AG-UI, set up the way a pausing agent needs (README "Host it").

    What it sets, and why:

    - A snapshot store, always: AG-UI builds a new ``AgentSession`` for every request and restores its
      state only from the thread's snapshot; the agent keeps each thread's pause (its token) there. Without
      ``snapshot_store``, a bounded in-memory one (24 h TTL from each save, the least recently saved dropped
      past 10,000 threads).
    - AG-UI's approval state keeps what the agent keeps: an unanswered approval for the agent's
      ``continuation_ttl`` (AG-UI's own default is 24 h), an answered one for 60 s (AG-UI's: 15 min, and at
      10,000 kept per scope it refuses new approvals).
    - ``detached_runs=True``: a client that hangs up at the approval request does not cancel the run, so the
      snapshot save after it still happens and the answer can resume the pause. A client that reconnects
      before that save ends gets 409 from AG-UI and retries (``@ag-ui/client`` does not; README shows how).
    - The package's ``session.state`` key is server-owned: AG-UI never merges client ``state`` into it, and a
      request whose ``state`` names it is refused with 400.
    - Typed answers: a resume entry ``{"interruptId": id, "status": "resolved", "payload": {"approved": true,
      "answer": <JSON>}}`` reaches the agent as a ``function_result`` for request ``id``; ``{"approved": true |
      false}`` alone stays an approval (a ``bool`` request). Each streamed request carries ``"answer": null`` in
      its arguments so AG-UI accepts the field. On a paused thread, an unknown interrupt id, a payload without
      a boolean ``approved`` or an answer that does not convert to the request's ``response_type`` gets 400
      naming the field, and the pause stays answerable.
    - A request body over ``max_body_bytes`` gets 413; malformed or too deeply nested JSON gets AG-UI's 4xx.

    Args:
        app: The FastAPI app (before it starts: a body-size middleware is added).
        agent: The agent; one object serves every thread.
        path: The route.

    Keyword Args:
        snapshot_store: Where AG-UI keeps each thread's snapshot and session state: one of the package's
            session stores (``RedisSessionStore``, ``PostgresSessionStore``, ``SQLiteSessionStore``: shared
            by several workers, kept across restarts; snapshots are kept as a :class:`ThreadSnapshotStore`
            in it), any ``AGUIThreadSnapshotStore``, or None for the bounded in-memory default.
        single_user: Every caller is one user (AG-UI's ``single_user``): one scope, the same on every worker
            serving this path and agent name. Give exactly one of this and ``authorization_scope_resolver``.
        authorization_scope_resolver: A FastAPI dependency returning the caller's authorization scope; threads,
            snapshots and pauses are kept apart per scope.
        dependencies: More FastAPI dependencies for the route (authentication), run first.
        max_body_bytes: The largest request body read.
        max_runs: Runs kept going at once (AG-UI's ``max_detached_runs``); more get 503.

    Raises:
        ValueError: Not exactly one of ``single_user`` and ``authorization_scope_resolver`` is given.
        TypeError: ``snapshot_store`` is a core ``SessionStore`` that is not one of the package's.
    """
    snapshots = snapshot_store_for(snapshot_store, agent)
    runner = AgentFrameworkAgent(agent=AGUIAgent(agent), snapshot_store=snapshots)  # pyright: ignore[reportArgumentType]
    bound_approval_state(runner, agent)
    if single_user == (authorization_scope_resolver is not None):
        raise ValueError(
            "agui_endpoint needs exactly one of single_user=True (every caller is one user) and "
            "authorization_scope_resolver= (a dependency returning the caller's scope)."
        )
    resolver: Callable[..., Any]
    if authorization_scope_resolver is None:
        # The same on every worker serving this agent at this path (a shared snapshot store then finds the
        # thread on any of them); apart from other paths and agents of the app.
        single_scope = f"agent-framework-functional:single-user:{path}:{agent.name or agent.id}"

        def single_user_scope() -> str:
            return single_scope

        resolver = single_user_scope
    else:
        resolver = authorization_scope_resolver

    async def guard(request: Request, scope: Any = Depends(resolver)) -> None:  # noqa: B008 (FastAPI's way)
        if isawaitable(scope):
            scope = await scope
        if not isinstance(scope, str) or not scope:
            return  # AG-UI answers a bad scope itself
        try:
            body = json.loads(await request.body())
        except (ValueError, RecursionError):
            return  # FastAPI has refused it already
        await check_request(body, agent, scope, snapshots, runner)

    add_agent_framework_fastapi_endpoint(
        app,
        runner,
        path,
        snapshot_store=snapshots,
        authorization_scope_resolver=resolver,
        dependencies=[*dependencies, Depends(guard)],
        detached_runs=True,
        max_detached_runs=max_runs,
    )
    app.add_middleware(_BodyLimit, path=path, max_bytes=max_body_bytes)
