"""Serve a FunctionalWorkflowAgent over the OpenAI Responses API (agent-framework-hosting-responses).

What it shows: the package ships no server, so the app owns the route, written as the
``agent-framework-hosting-responses`` README shows (``AgentState``, ``responses_session_id``,
``responses_from_run`` / ``responses_from_streaming_run``) with three changes for a pausing agent:

* ``responses_to_run_with_approvals(body)`` in place of ``responses_to_run(body)``: the standard answer to
  an ``mcp_approval_request`` output item, an ``mcp_approval_response`` input item, reaches the agent as a
  ``function_approval_response`` (``responses_to_run`` refuses it);
* the agent is built with ``continuation_token_on_response=False``: the token stays in the session (which
  ``AgentState`` stores per response id or conversation), so a pause renders as status ``completed`` with
  the ``mcp_approval_request`` item instead of a background run (``in_progress``; ``response.failed`` when
  streaming).
* the session (which holds the token) is stored when the run ends, also when it failed, in a task shielded
  from the response's cancellation (``store_session``): when streaming, from a cleanup hook of the agent's
  stream, before the terminal event. Starlette cancels what a response awaits when its client hangs up; a
  write after the last event, or an unshielded one, lost the pause of a client that hung up.

Sessions: ``previous_response_id`` continues from an immutable snapshot (replaying a spent branch is
refused: its token was used), ``conversation`` advances one mutable head (this route serializes the
writers of each conversation with a lock, as that README asks).

Run it (needs ``pip install "agent-framework-functional[hosting]"``):

    python samples/host_responses.py            # self-check: serve on 127.0.0.1, one approval round trip, exit
    python samples/host_responses.py --serve    # serve on http://127.0.0.1:16790/responses until Ctrl+C

then, while serving::

    curl -s localhost:16790/responses -H 'content-type: application/json' -d '{"input": "ship it"}'
    curl -s localhost:16790/responses -H 'content-type: application/json' -d '{"previous_response_id":
      "<id>", "input": [{"type": "mcp_approval_response", "approval_request_id": "auto::0", "approve": true}]}'
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import httpx
import uvicorn
from agent_framework import SessionStore
from agent_framework_hosting import AgentState
from agent_framework_hosting_responses import (
    create_response_id,
    responses_from_run,
    responses_from_streaming_run,
    responses_session_id,
)
from fastapi import Body, FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflowAgent,
    PendingContinuationError,
    RunContext,
    responses_to_run_with_approvals,
    workflow,
)

PORT = 16790
# Request options are caller-controlled; pass through only the ones this route honors.
ALLOWED_REQUEST_OPTIONS = frozenset({"max_tokens", "reasoning"})


@workflow(name="deployer", description="Asks one approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """Pause once for a bool approval (request id ``auto::0``), then answer with text."""
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    return f"deployed: {text}" if approved else f"not deployed: {text}"


def build_agent() -> FunctionalWorkflowAgent:
    """One agent for every conversation; the token stays in the session only."""
    return deployer.build().as_agent(name="deployer", continuation_token_on_response=False)


def build_app(agent: FunctionalWorkflowAgent, *, session_store: SessionStore | None = None) -> FastAPI:
    """The app-owned Responses route: ``POST /responses``, JSON or SSE (``"stream": true``).

    ``session_store`` is where ``AgentState`` keeps the sessions (in memory by default; pass a shared store
    when several workers serve the route).
    """
    app = FastAPI()
    state = AgentState(agent, session_store=session_store)
    locks: dict[str, asyncio.Lock] = {}

    def error(status: int, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": {"type": type(exc).__name__, "message": str(exc)}}, status_code=status)

    @app.post("/responses")
    async def responses(body: dict[str, Any] = Body(...)) -> Any:  # noqa: B008 - FastAPI's way to take a body
        try:
            run = responses_to_run_with_approvals(body)
            session_id, is_conversation_id = responses_session_id(body)
        except ValueError as exc:
            return error(400, exc)
        response_id = create_response_id()
        key = session_id if is_conversation_id else response_id
        conversation_id = session_id if is_conversation_id else None
        options = {k: v for k, v in run["options"].items() if k in ALLOWED_REQUEST_OPTIONS}
        # One writer at a time per conversation (a fresh lock for a previous_response_id branch).
        lock = locks.setdefault(session_id, asyncio.Lock()) if is_conversation_id else asyncio.Lock()
        await lock.acquire()
        release = True
        write: asyncio.Task[None] | None = None  # this request's one write of the session

        def store_session() -> Awaitable[None]:
            # The write runs as a task of its own, shielded: a client that hangs up cancels the response
            # (Starlette cancels everything it awaits), not the write of the session that holds the token.
            nonlocal write
            write = asyncio.ensure_future(state.set_session(key, session))
            return asyncio.shield(write)

        def release_after_write() -> None:
            # The next request of this conversation must read the stored session: hold the lock until then.
            if write is None or write.done():
                lock.release()
            else:
                write.add_done_callback(lambda _: lock.release())

        try:
            session = await state.get_or_create_session(session_id or response_id)
            target = await state.get_target()
            if not run["stream"]:
                try:
                    result = await target.run(run["messages"], session=session, options=options)
                finally:
                    await store_session()  # also after a failure: the session says the run ended
                return JSONResponse(
                    responses_from_run(result, response_id=response_id, conversation_id=conversation_id)
                )
            # A rejected call raises here, at run(...), also when streaming.
            stream = target.run(run["messages"], session=session, options=options, stream=True)
            # Store the session the moment the run's stream ends (or fails), before the terminal event that
            # carries the mcp_approval_request items is sent: a client that hangs up right after reading it
            # must still find its pause.
            stream.with_cleanup_hook(store_session)
            release = False  # the SSE generator releases it when the stream ends
        except (ContinuationAuthorityError, PendingContinuationError) as exc:
            return error(409, exc)  # a spent branch, or new input while this conversation is paused
        except ValueError as exc:
            return error(400, exc)  # e.g. an answer that matches no pending request
        finally:
            if release:
                release_after_write()

        async def sse() -> AsyncIterator[str]:
            try:
                async for chunk in responses_from_streaming_run(
                    stream, response_id=response_id, conversation_id=conversation_id
                ):
                    yield chunk
            finally:
                release_after_write()

        return StreamingResponse(sse(), media_type="text/event-stream")

    return app


async def self_check() -> str:
    """Serve on a free loopback port, pause, approve with ``previous_response_id``, return the final text."""
    server = uvicorn.Server(uvicorn.Config(build_app(build_agent()), host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # startup failed: raise its error
            await asyncio.sleep(0.02)
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        async with httpx.AsyncClient(base_url=base, timeout=30, trust_env=False) as client:
            paused = (await client.post("/responses", json={"input": "ship it"})).json()
            assert paused["status"] == "completed", paused
            (request,) = [item for item in paused["output"] if item["type"] == "mcp_approval_request"]
            print(f"Paused: {request['name']} {request['arguments']} (id {request['id']})")
            answer = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}
            follow_up = {"previous_response_id": paused["id"], "input": [answer]}
            done = (await client.post("/responses", json=follow_up)).json()
            assert done["status"] == "completed", done
            return "".join(p["text"] for item in done["output"] if item["type"] == "message" for p in item["content"])
    finally:
        server.should_exit = True
        await serving


async def main() -> None:
    """Self-check by default; ``--serve`` serves on 127.0.0.1:16790 until interrupted."""
    if "--serve" in sys.argv[1:]:
        config = uvicorn.Config(build_app(build_agent()), host="127.0.0.1", port=PORT, log_level="info")
        print(f"Serving the Responses route on http://127.0.0.1:{PORT}/responses (Ctrl+C stops)")
        await uvicorn.Server(config).serve()
        return
    text = await self_check()
    assert text == "deployed: ship it", text
    print(f"self-check passed: {text}")


if __name__ == "__main__":
    asyncio.run(main())
