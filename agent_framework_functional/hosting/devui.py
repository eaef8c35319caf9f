"""DevUI in one call: :func:`serve_devui` serves a FunctionalWorkflowAgent in the Agent Framework web UI."""

from __future__ import annotations

import asyncio
import os
import secrets
from typing import Any, cast

import uvicorn
from agent_framework import AgentSession, Message, SessionStore
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .._agent import FunctionalWorkflowAgent
from .._answers import value_result
from ._adapter import HostedAgent, as_messages, parse_typed_text
from ._devui_store import DEFAULT_MAX_CONVERSATIONS, BoundedConversationStore, BoundedDevServer
from ._sweep import DEFAULT_RELEASE_MEMORY_EVERY, DEFAULT_SWEEP_EVERY, add_upkeep
from ._turn import Turns

DEFAULT_PORT = 8080
"""DevUI's own default port."""

NO_CONVERSATION_MESSAGE = (
    "This turn has no DevUI conversation: none was given, or it was dropped (idle past the agent's "
    "continuation_ttl, or the least recently used past max_conversations), and with it any pause it kept. "
    "Start a new conversation."
)


def _typed_text(messages: Any) -> str | None:
    """The text of a reply that is only text (a string, or one user message of text), else None."""
    if isinstance(messages, str):
        return messages
    found = as_messages(messages)
    if found is None or len(found) != 1 or found[0].role != "user":
        return None
    contents = found[0].contents
    if not contents or any(content.type != "text" for content in contents):
        return None
    return "".join(content.text or "" for content in contents)


_INVALID_TOKEN = {"message": "Invalid authentication token", "type": "authentication_error", "code": "invalid_token"}
_MALFORMED_TOKEN = JSONResponse(status_code=401, content={"error": _INVALID_TOKEN})  # DevUI's refusal of a bad token


class RefuseMalformedAuth:
    """ASGI middleware: an ``Authorization`` header with a non-ASCII byte is a 401 (DevUI's check would raise)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 401 for a malformed ``Authorization`` header, else pass the request on."""
        if scope["type"] == "http" and any(
            name.lower() == b"authorization" and not value.isascii() for name, value in scope["headers"]
        ):
            await _MALFORMED_TOKEN(scope, receive, send)
            return
        await self.app(scope, receive, send)


class DevUIAgent(HostedAgent):
    """The agent as DevUI sees it: a typed reply (JSON for a structured type) answers the one pending request."""

    def __init__(self, agent: FunctionalWorkflowAgent, conversations: BoundedConversationStore) -> None:
        super().__init__(agent)
        self.turns = Turns(agent, cast("SessionStore", conversations))  # a write back is a use of DevUI's session
        conversations.running = self.turns.busy

    def run(
        self, messages: Any = None, *, stream: bool = False, session: AgentSession | None = None, **kwargs: Any
    ) -> Any:
        """Run a turn of DevUI's conversation (its session id); a use when it ends; ConversationBusy while one runs.

        ValueError without a known conversation: every such turn would share the one session-less conversation.
        """
        if session is None:
            raise ValueError(NO_CONVERSATION_MESSAGE)
        turn = self.turns.take(session.session_id, session)
        try:
            result = super().run(messages, stream=stream, session=session, **kwargs)
        except BaseException:
            turn.end()
            raise
        if stream:
            return turn.stream(result, save=True)

        async def finish() -> Any:
            try:
                return await result
            finally:
                try:
                    await turn.save()
                finally:
                    turn.end()

        return finish()

    def answers_in(self, messages: Any, session: AgentSession | None) -> Any:
        """A text-only reply while exactly one non-``str`` request is pending becomes its answer."""
        if session is None:
            return messages
        pending = self.agent.pending_requests_for(session)
        text = _typed_text(messages)
        if len(pending) != 1 or text is None:
            return messages
        ((request_id, event),) = pending.items()
        if event.response_type is str:
            return messages
        return [Message(role="user", contents=[value_result(request_id, parse_typed_text(text.strip()))])]


def devui_app(
    agent: FunctionalWorkflowAgent,
    *,
    auth_token: str,
    host: str = "127.0.0.1",
    max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
    release_memory_every: float | None = DEFAULT_RELEASE_MEMORY_EVERY,
    sweep_every: float | None = DEFAULT_SWEEP_EVERY,
) -> FastAPI:
    """DevUI's FastAPI app for ``agent`` (page and API) with bearer-token auth; idle conversations expire.

    Args:
        agent: The agent (one object serves every conversation).

    Keyword Args:
        auth_token: The bearer token every API call must send.
        host: The host the app will be served on (DevUI uses it for its own links).
        max_conversations: How many DevUI conversations are kept at most.
        release_memory_every: Seconds between two ``malloc_trim`` after requests (glibc only); None: never.
        sweep_every: Seconds between two sweeps of expired pauses (at most a quarter TTL); None: on access only.

    Returns:
        The ASGI app (``app.state.devui_conversations``: the conversation store).

    Raises:
        ValueError: ``auth_token`` is empty or not ASCII, ``max_conversations`` is below 1, or a bad interval.
    """
    if not auth_token or not auth_token.isascii():
        raise ValueError("auth_token must be non-empty ASCII text (a bearer token; secrets.token_urlsafe() makes one).")
    store = BoundedConversationStore(ttl=agent.continuation_ttl, max_conversations=max_conversations)
    server = BoundedDevServer(
        host=host,
        auth_enabled=True,
        auth_token=auth_token,
        ui_enabled=True,
        mode="developer",
        conversation_store=store,
    )
    server.set_pending_entities([DevUIAgent(agent, store)])
    app = server.get_app()
    app.state.devui_conversations = store  # what it keeps (len(), operators' metrics)
    add_upkeep(app, agent, release_memory_every, sweep_every, stores=[store])
    app.add_middleware(RefuseMalformedAuth)  # outermost: before DevUI's auth check can raise
    return app


async def serve_devui(
    agent: FunctionalWorkflowAgent,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    auth_token: str | None = None,
    max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
    sweep_every: float | None = DEFAULT_SWEEP_EVERY,
) -> None:
    """Serve ``agent`` in DevUI until interrupted, printing the page's URL and its bearer token.

    Args:
        agent: The agent.

    Keyword Args:
        host: The interface to listen on (loopback by default; DevUI is a development tool).
        port: The port; 0 picks a free one (the printed URL shows which).
        auth_token: The bearer token (else ``DEVUI_AUTH_TOKEN``, else a random one).
        max_conversations: As :func:`devui_app`.
        sweep_every: As :func:`devui_app`.

    Raises:
        SystemExit: The port is taken (uvicorn's own error).
    """
    token = auth_token or os.environ.get("DEVUI_AUTH_TOKEN") or secrets.token_urlsafe(24)
    app = devui_app(agent, auth_token=token, host=host, max_conversations=max_conversations, sweep_every=sweep_every)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()  # startup failed: raise its error
            return
        await asyncio.sleep(0.05)
    bound = server.servers[0].sockets[0].getsockname()[1]
    print(f"DevUI: http://{host}:{bound}  (Ctrl+C stops)", flush=True)
    print(f"DevUI auth token: {token}", flush=True)
    await serving
