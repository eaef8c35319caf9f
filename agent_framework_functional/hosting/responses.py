"""The Responses host in one call: ``responses_app(agent)`` serves a FunctionalWorkflowAgent as ``POST /v1/responses``.

Built on ``agent-framework-hosting-responses``'s renderers; each request is a :class:`Turn`, a run outlives a
client's hang-up, and nothing a client sends is a 500 (:func:`refusal_for`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Coroutine
from contextlib import asynccontextmanager
from typing import Any, cast

from agent_framework import AgentResponse, AgentResponseUpdate, ResponseStream, SessionStore
from agent_framework_hosting_responses import create_response_id, responses_from_run, responses_from_streaming_run
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from .._agent import FunctionalWorkflowAgent
from .._errors import (
    ContinuationAuthorityError,
    ContinuationStoreDurabilityError,
    DurableStoreError,
    FunctionalWorkflowError,
    PendingContinuationError,
    ResponseMismatchError,
    StaleContinuationError,
    WorkflowRunningError,
)
from ._responses_input import InvalidRequestError, ResponsesRequest, decode_body, parse_request
from ._sweep import DEFAULT_RELEASE_MEMORY_EVERY, DEFAULT_SWEEP_EVERY, add_upkeep
from ._turn import ConversationBusy, Turn, Turns

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 1024 * 1024  # a larger request body is a 413

_DRAIN_FACTOR = 16  # an oversized body is read to its end (so the client gets the 413) up to 16x the limit
_END = object()

# The agent's messages advise Python calls; a client of this route can only send requests, so these say which.
PENDING_MESSAGE = (
    "This conversation is paused on a request: answer it first (a function_call_output with its call_id, or an "
    "mcp_approval_response with its approval_request_id), or start a new conversation for new input."
)
STALE_MESSAGE = (
    "This response is not the conversation's latest: its pause was already answered, abandoned or expired. "
    "Continue from the latest response (its id as previous_response_id), or send new input here to start over."
)
REFUSED_MESSAGE = (
    "Nothing here can be answered: the pause was already answered, abandoned or expired, or none is pending. "
    "Continue from the conversation's latest response, or send new input to start a new run."
)
# A store failure is the server's: its details (addresses, settings) stay in the server's log.
STORE_MESSAGE = (
    "The server's continuation store failed during this request (unreachable, or not set up to keep a claim); "
    "the request may not have taken effect. Try again later, from the conversation's latest response."
)

# Refusals whose message is fixed (409, x-should-retry false), the first match wins (Stale is an authority error).
_FIXED: tuple[tuple[type[BaseException], str, str], ...] = (
    (PendingContinuationError, "pending_request", PENDING_MESSAGE),
    (StaleContinuationError, "continuation_refused", STALE_MESSAGE),
    (ContinuationAuthorityError, "continuation_refused", REFUSED_MESSAGE),
)


class Refusal(Exception):
    """One HTTP error response: status, OpenAI-style error code and message, the field, whether to retry."""

    def __init__(self, status: int, code: str, message: str, *, param: str | None = None, retry: bool = False):
        super().__init__(message)
        self.status, self.code, self.message, self.param, self.retry = status, code, message, param, retry


def refusal_for(exc: BaseException, request: ResponsesRequest | None = None) -> Refusal | None:
    """The HTTP answer to an error the agent raised on purpose (None: not the client's doing)."""
    if isinstance(exc, WorkflowRunningError):
        return Refusal(409, "workflow_running", str(exc), retry=True)
    for kind, code, message in _FIXED:
        if isinstance(exc, kind):
            return Refusal(409, code, message)
    if isinstance(exc, ResponseMismatchError):
        return Refusal(400, "answer_mismatch", str(exc), param=_answer_param(exc, request))
    if isinstance(exc, DurableStoreError):  # the server's store, not the client's request
        retry = not isinstance(exc, ContinuationStoreDurabilityError)  # a misconfigured store stays so
        return Refusal(503, "store_unavailable", STORE_MESSAGE, retry=retry)
    if isinstance(exc, FunctionalWorkflowError):
        if isinstance(exc, ValueError):
            return Refusal(400, "invalid_request", str(exc))
        return Refusal(409, "conflict", str(exc))
    return None


def _answer_param(exc: ResponseMismatchError, request: ResponsesRequest | None) -> str:
    """The input field of the answer the agent refused (its id field when that id names no pending request)."""
    if request is None:
        return "input"
    fields = request.answer_id_params if exc.unknown_id else request.answer_params
    if exc.request_id is not None and exc.request_id in fields:
        return fields[exc.request_id]
    named = [field for request_id, field in fields.items() if repr(request_id) in str(exc)]
    if len(named) == 1:
        return named[0]
    return next(iter(fields.values())) if len(fields) == 1 else "input"


def error_response(refusal: Refusal, retry_after: int) -> JSONResponse:
    """The refusal as the OpenAI-style JSON error body, with ``x-should-retry`` (and ``retry-after``)."""
    kind = "server_error" if refusal.status >= 500 else "invalid_request_error"
    body = {"error": {"type": kind, "code": refusal.code, "message": refusal.message, "param": refusal.param}}
    headers = {"x-should-retry": "true" if refusal.retry else "false"}
    if refusal.retry:
        headers["retry-after"] = str(retry_after)
    return JSONResponse(body, status_code=refusal.status, headers=headers)


def _without_token(result: AgentResponse[Any]) -> AgentResponse[Any]:
    # The token stays in the session: on the wire it would turn a pause into a background run (in_progress).
    result.continuation_token = None
    return result


class _ResponsesHost:
    """The route's state: the agent, its conversations' turns (``turns``) and the detached runs."""

    def __init__(
        self,
        agent: FunctionalWorkflowAgent,
        session_store: SessionStore | None,
        *,
        max_body_bytes: int,
        retry_after: int,
        forward_options: Collection[str],
        scope: Callable[[Request], str] | None,
    ) -> None:
        self.agent = agent
        self.scope = scope
        self.turns = Turns(agent, session_store)
        self.max_body_bytes = max_body_bytes
        self.retry_after = retry_after
        self.forward_options = frozenset(forward_options)
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def read_body(self, request: Request) -> bytes:
        limit = self.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit * _DRAIN_FACTOR:
                    break
                if size <= limit:
                    chunks.append(chunk)
        except ClientDisconnect:  # hung up before the body ended: nothing was read, nothing to run or log
            raise Refusal(
                400, "client_disconnected", "The client closed the connection before the body ended."
            ) from None
        if size > limit:
            raise Refusal(413, "body_too_large", f"The request body is larger than {limit} bytes.")
        return b"".join(chunks)

    async def begin(self, request: ResponsesRequest, response_id: str, scope: str) -> Turn:
        """Take the conversation and find its session."""
        try:
            if request.conversation_id is not None:
                return await self.turns.begin(f"{scope}conversation:{request.conversation_id}")
            key = f"{scope}response:{response_id}"
            if request.previous_response_id is None:
                return await self.turns.begin(key)
            found = await self.turns.session_store.get(f"{scope}response:{request.previous_response_id}")
            if found is None:
                raise Refusal(
                    400,
                    "previous_response_not_found",
                    "No response with this id: send the `id` of a response this server returned.",
                    param="previous_response_id",
                )
            # Every response of one chain shares the session id of its first: the agent's workflow instance.
            return await self.turns.begin(key, lock=found.session_id, session=found)
        except ConversationBusy:
            raise Refusal(
                409,
                "conversation_busy",
                "Another request of this conversation is still running; retry after it ends.",
                retry=True,
            ) from None

    async def run_json(self, turn: Turn, request: ResponsesRequest, response_id: str, options: Any) -> Any:
        try:
            try:
                result = await self.agent.run(request.messages, session=turn.session, options=options)
            except BaseException as exc:
                if refusal_for(exc) is None:
                    await turn.save()  # the session says the run ended (a spent token is dropped)
                raise
            await turn.save()  # the conversation is free once written, before the response is sent
        finally:
            turn.end()
        conversation = request.conversation_id
        return responses_from_run(_without_token(result), response_id=response_id, conversation_id=conversation)

    async def produce(
        self,
        turn: Turn,
        request: ResponsesRequest,
        response_id: str,
        options: Any,
        accepted: asyncio.Future[None],
        queue: asyncio.Queue[Any],
        gone: asyncio.Event,
    ) -> None:
        """Run the agent's stream to its end (whether or not the client reads on) and queue the SSE text."""
        try:
            try:
                stream = self.agent.run(request.messages, session=turn.session, options=options, stream=True)
                stream.with_cleanup_hook(turn.save).with_result_transform(_without_token)
                first = await anext(stream, None)
            except asyncio.CancelledError:
                accepted.cancel()
                raise
            except Exception as exc:  # handed to the request's handler, which answers with its status
                if refusal_for(exc) is None:
                    await turn.save()
                accepted.set_exception(exc)
                return
            accepted.set_result(None)
            sse = responses_from_streaming_run(
                _continue(first, stream), response_id=response_id, conversation_id=request.conversation_id
            )
            async for chunk in sse:
                if not gone.is_set():
                    queue.put_nowait(chunk)
            await turn.save()  # written by the stream's cleanup hook already, before the terminal event
        finally:
            queue.put_nowait(_END)
            turn.end()

    async def handle(self, http: Request) -> Response:
        """One ``POST``: check, take the conversation, run detached, answer JSON or SSE (or an error)."""
        request: ResponsesRequest | None = None
        scope = f"{self.scope(http)}/" if self.scope is not None else ""  # may raise the app's HTTPException
        response_id = create_response_id()
        try:
            body = decode_body(await self.read_body(http))
            request = parse_request(body)
            turn = await self.begin(request, response_id, scope)
        except Refusal as refusal:
            return error_response(refusal, self.retry_after)
        except InvalidRequestError as exc:
            return error_response(Refusal(400, exc.code, str(exc), param=exc.param), self.retry_after)
        except Exception:  # the session store failed
            logger.exception("Reading the session of response %s failed", response_id)
            return error_response(
                Refusal(500, "server_error", "The session store failed; retry later."), self.retry_after
            )
        options = {name: body[name] for name in self.forward_options if name in body}
        try:
            if not request.stream:
                payload = await asyncio.shield(self.spawn(self.run_json(turn, request, response_id, options)))
                return JSONResponse(payload)
            accepted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            queue: asyncio.Queue[Any] = asyncio.Queue()
            gone = asyncio.Event()  # the client stopped reading the SSE body
            self.spawn(self.produce(turn, request, response_id, options, accepted, queue, gone))
            await asyncio.shield(accepted)  # the first update: a refusal is still an HTTP status
        except Exception as exc:
            refusal = refusal_for(exc, request)
            if refusal is None or refusal.status >= 500:
                logger.exception("The agent run of response %s failed", response_id)
            if refusal is None:
                refusal = Refusal(500, "server_error", "The agent run failed; the conversation takes new input.")
            return error_response(refusal, self.retry_after)
        return StreamingResponse(_sse_body(queue, gone), media_type="text/event-stream")

    @asynccontextmanager
    async def lifespan(self, _app: FastAPI) -> AsyncGenerator[None]:
        yield
        for task in list(self.tasks):  # runs whose clients left; the server is stopping
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _continue(
    first: AgentResponseUpdate | None, stream: ResponseStream[AgentResponseUpdate, AgentResponse[Any]]
) -> ResponseStream[AgentResponseUpdate, AgentResponse[Any]]:
    """The agent's stream again, its first update (already read) included."""

    async def updates() -> AsyncIterator[AgentResponseUpdate]:
        if first is not None:
            yield first
            async for update in stream:
                yield update

    async def final(_: Any) -> AgentResponse[Any]:
        return await stream.get_final_response()

    return ResponseStream(updates(), finalizer=final)


async def _sse_body(queue: asyncio.Queue[Any], gone: asyncio.Event) -> AsyncIterator[str]:
    try:
        while (chunk := await queue.get()) is not _END:
            yield cast(str, chunk)
    finally:
        gone.set()


def responses_app(
    agent: FunctionalWorkflowAgent,
    *,
    session_store: SessionStore | None = None,
    path: str = "/v1/responses",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    retry_after: int = 1,
    forward_options: Collection[str] = (),
    scope: Callable[[Request], str] | None = None,
    release_memory_every: float | None = DEFAULT_RELEASE_MEMORY_EVERY,
    sweep_every: float | None = DEFAULT_SWEEP_EVERY,
) -> FastAPI:
    """A FastAPI app that serves ``agent`` over the OpenAI Responses API, correct by default.

    A pause is a ``function_call`` and an ``mcp_approval_request`` item; either's answer item resumes ("Responses"
    in the docs).

    Args:
        agent: The agent; one object serves every conversation.

    Keyword Args:
        session_store: Where sessions live (bounded, in memory, by default; a shared one for several workers).
        path: The route's path; ``/v1/responses`` lets an ``openai`` client use ``base_url=".../v1"``.
        max_body_bytes: The largest request body read (default 1 MiB).
        retry_after: Seconds in ``Retry-After`` of a 409 that a retry can fix.
        forward_options: Request fields passed to the agent as run options (none by default).
        scope: The caller's scope from the request (may raise ``HTTPException`` 401); without it, anyone knowing
            a conversation id can continue it.
        release_memory_every: Seconds between two ``malloc_trim`` after requests (glibc only); None: never.
        sweep_every: Seconds between two sweeps of expired pauses (at most a quarter TTL); None: on access only.

    Returns:
        The app (mount it or serve it with uvicorn); ``app.state.responses_host`` is the route's state.

    Raises:
        ValueError: Bad ``max_body_bytes`` (positive int), ``retry_after`` (non-negative int) or interval.
    """
    for name, value, least in (("max_body_bytes", max_body_bytes, 1), ("retry_after", retry_after, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"{name} must be an integer of at least {least}, not {value!r}.")
    host = _ResponsesHost(
        agent,
        session_store,
        max_body_bytes=max_body_bytes,
        retry_after=retry_after,
        forward_options=forward_options,
        scope=scope,
    )
    app = FastAPI(lifespan=host.lifespan)
    app.state.responses_host = host
    endpoint: Callable[[Request], Awaitable[Response]] = host.handle
    app.add_api_route(path, endpoint, methods=["POST"], include_in_schema=True)
    add_upkeep(app, agent, release_memory_every, sweep_every, stores=[host.turns.session_store])
    return app
