"""MCP in one call: :func:`mcp_app` serves a FunctionalWorkflowAgent as one MCP tool whose pauses elicit the answer.

A pause is an ``input_required`` result (MCP 2026-07-28), one form elicitation per request; the paused session
rides in ``requestState`` sealed with the host's key (a client carries it back, cannot read, forge or swap it).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agent_framework import AgentResponse, AgentSession, Content, Message, WorkflowEvent
from mcp import MCPError, types
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp_types.version import is_version_at_least
from starlette.applications import Starlette

from .._agent import FunctionalWorkflowAgent
from .._answers import response_schema, value_result
from .._chat import answers_to_responses
from .._errors import FunctionalWorkflowError
from .._updates import request_data_to_json
from ._adapter import ANSWER_FIELD, approval_answer, parse_typed_text
from ._sweep import DEFAULT_RELEASE_MEMORY_EVERY, DEFAULT_SWEEP_EVERY, add_upkeep
from ._turn import ConversationBusy, Turn, Turns

TASK_ARGUMENT = "task"  # the tool's one argument: the text that starts the workflow
DEFAULT_STATE_TTL_SECONDS = 3600.0
MODERN_PROTOCOL = "2026-07-28"  # the first version with input_required; older clients get elicitation/create
LEGACY_ATTEMPTS = 3  # refused answers an older client may send in one call before the call fails

_PRIMITIVE = frozenset({"string", "number", "integer", "boolean"})
_STATE_VERSION = 1


def _is_primitive(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    prop = cast(dict[str, Any], schema)
    return (prop.get("type") in _PRIMITIVE or "enum" in prop) and not ({"$ref", "anyOf", "items"} & prop.keys())


def answer_form(response_type: Any) -> tuple[dict[str, Any], bool]:
    """The form schema for a request of ``response_type``, and whether its fields ARE the answer.

    A primitive is one ``answer`` field; a model of primitives its own form; else an ``answer`` JSON string field.
    """
    schema = response_schema(response_type) or {}
    properties = schema.get("properties")
    if schema.get("type") == "object" and isinstance(properties, dict) and not schema.get("$defs"):
        props = cast(dict[str, Any], properties)
        if props and all(_is_primitive(prop) for prop in props.values()):
            return {"type": "object", "properties": props, "required": list(schema.get("required", []))}, True
    if _is_primitive(schema):
        return {"type": "object", "properties": {ANSWER_FIELD: schema}, "required": [ANSWER_FIELD]}, False
    field = {"type": "string", "description": f"The answer as JSON, matching this JSON Schema: {json.dumps(schema)}"}
    return {"type": "object", "properties": {ANSWER_FIELD: field}, "required": [ANSWER_FIELD]}, False


def _answer(request_id: str, event: WorkflowEvent[Any] | None, response: Any) -> Content:
    """The answer content for one elicitation result (``event`` None: the pause is not held here)."""
    if not isinstance(response, types.ElicitResult):
        raise MCPError(types.INVALID_PARAMS, f"Input response {request_id!r} must be an elicitation result.")
    content = dict(response.content or {})
    if event is None:
        return _unheld_answer(request_id, response.action, content)
    if response.action != "accept":
        if event.response_type is bool:
            return value_result(request_id, False)  # a declined or dismissed approval is a rejection
        raise MCPError(
            types.INVALID_PARAMS,
            f"Request {request_id!r} was {response.action}ed; it needs an accepted answer. The call is still paused: "
            "retry with the same requestState and an accepted answer.",
        )
    if answer_form(event.response_type)[1]:
        return value_result(request_id, content)
    if ANSWER_FIELD not in content:
        raise MCPError(types.INVALID_PARAMS, f"The answer to {request_id!r} needs the field {ANSWER_FIELD!r}.")
    value = content[ANSWER_FIELD]
    if isinstance(value, str) and not _is_primitive(response_schema(event.response_type)):
        value = parse_typed_text(value)  # the string field of a type that is no primitive holds its JSON
    return value_result(request_id, value)


def _unheld_answer(request_id: str, action: str, content: dict[str, Any]) -> Content:
    """An answer to a pause another worker holds: the form is unknown, so a string stays text to read as JSON."""
    if action != "accept":
        return approval_answer(request_id, False)
    value = content[ANSWER_FIELD] if set(content) == {ANSWER_FIELD} else content
    return Content.from_function_result(call_id=request_id, result=value)


class MCPWorkflowTool:
    """The MCP tool: each call a :class:`Turn` of its session, started from ``task`` or the sealed ``requestState``."""

    def __init__(self, agent: FunctionalWorkflowAgent, *, name: str) -> None:
        self.agent = agent
        self.name = name
        self.turns = Turns(agent, None)  # one call per session at a time; the session itself rides in requestState

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        """``tools/list``: this one tool, whose one required argument is ``task``."""
        schema = {
            "type": "object",
            "properties": {TASK_ARGUMENT: {"type": "string", "description": f"Task for {self.name}"}},
            "required": [TASK_ARGUMENT],
            "additionalProperties": False,
        }
        description = self.agent.description or f"Runs the {self.name} workflow; it may ask for input."
        return types.ListToolsResult(tools=[types.Tool(name=self.name, description=description, input_schema=schema)])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> Any:
        """``tools/call``: run ``task``, or resume with ``inputResponses`` from the (unsealed) ``requestState``.

        Raises:
            MCPError: ``INVALID_PARAMS``: another tool, no ``task``, no answers, refused answers (the call stays
                paused: retry with the same state), or a second call of a running session.
        """
        if params.name != self.name:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool {params.name!r}; this server has {self.name!r}.")
        state = params.request_state
        session = self.agent.create_session() if state is None else self._session_from_state(state)
        try:
            turn = await self.turns.begin(session.session_id, session=session)
        except ConversationBusy:
            raise MCPError(types.INVALID_PARAMS, "Another call answers this pause now; retry when it ends.") from None
        try:
            result = await self._run(self._mcp_to_run(params, session), session)
            if state is None and not is_version_at_least(ctx.protocol_version, MODERN_PROTOCOL):
                result = await self._elicit_in_call(ctx, turn, result)
            return result
        finally:
            turn.end()

    def _mcp_to_run(self, params: types.CallToolRequestParams, session: AgentSession) -> Any:
        """The agent's input: the ``task`` text, or the answers in ``inputResponses``."""
        if params.request_state is not None:
            return self._answers(session, params.input_responses or {})
        task = (params.arguments or {}).get(TASK_ARGUMENT)
        if not isinstance(task, str) or not task.strip():
            raise MCPError(types.INVALID_PARAMS, f"Argument {TASK_ARGUMENT!r} must be a non-empty string.")
        return task

    def _answers(self, session: AgentSession, responses: Mapping[str, Any]) -> list[Message]:
        if not responses:
            raise MCPError(types.INVALID_PARAMS, "Send inputResponses with the answers; the call is still paused.")
        pending = self.agent.pending_requests_for(session)
        if not pending:  # kept by the continuation store (another worker) or answered already: the agent's run decides
            return [Message(role="user", contents=[_answer(rid, None, answer) for rid, answer in responses.items()])]
        unknown = sorted(set(responses) - set(pending))
        if unknown:  # the pause is held here: check the answers now, with messages naming what to send
            raise MCPError(
                types.INVALID_PARAMS,
                f"inputResponses {unknown!r} answer no pending request (pending: {sorted(pending)!r}); "
                "the call is still paused.",
            )
        answers = [_answer(rid, pending[rid], answer) for rid, answer in responses.items()]
        try:
            answers_to_responses(answers, pending)
        except FunctionalWorkflowError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        return [Message(role="user", contents=answers)]

    async def _elicit_in_call(self, ctx: Any, turn: Turn, result: Any) -> Any:
        """Older clients: ``elicitation/create`` in the call until the workflow ends (:data:`LEGACY_ATTEMPTS` tries)."""
        refused, refusals = "", 0
        while isinstance(result, types.InputRequiredResult):
            responses: dict[str, Any] = {}
            for request_id, request in (result.input_requests or {}).items():
                form = cast(types.ElicitRequestFormParams, request.params)  # pyright: ignore[reportAttributeAccessIssue]
                responses[request_id] = await ctx.session.elicit_form(
                    refused + form.message, form.requested_schema, related_request_id=ctx.request_id
                )
            try:
                result = await self._run(self._answers(turn.session, responses), turn.session)
                refused = ""
            except MCPError as exc:  # the call is still paused: ask again, saying what was wrong
                refusals += 1
                if refusals >= LEGACY_ATTEMPTS:
                    with contextlib.suppress(FunctionalWorkflowError):
                        await self.agent.abandon_continuation_async(session=turn.session)
                    raise MCPError(
                        types.INVALID_PARAMS,
                        f"{exc.message} The call ended after {refusals} refused answers: call the tool again.",
                    ) from None
                refused = f"Your answer was refused: {exc.message} Answer again. "
        return result

    def _session_from_state(self, state: str) -> AgentSession:
        try:
            payload = json.loads(state)
            assert payload["v"] == _STATE_VERSION and payload["agent"] == self.agent.id
            return AgentSession.from_dict(payload["session"])
        except Exception:  # only state this host minted gets here (the boundary verified it): refuse anything else
            raise MCPError(types.INVALID_PARAMS, "Invalid requestState: call the tool again to start over.") from None

    async def _run(self, messages: Any, session: AgentSession) -> Any:
        try:
            response = await self.agent.run(messages, session=session)
        except FunctionalWorkflowError as exc:  # refused (a replayed state, a wrong answer): nothing changed
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        return self._mcp_from_run(response, session)

    def _mcp_from_run(self, response: AgentResponse[Any], session: AgentSession) -> Any:
        """A pause as ``input_required`` (a form per request, the session sealed in ``requestState``), else the text."""
        pending = self.agent.pending_requests_for(session)
        if pending:
            requests: dict[str, Any] = {}
            for rid, event in pending.items():
                asks = f"{self.name} asks: {json.dumps(request_data_to_json(event.data), default=str)}"
                schema = answer_form(event.response_type)[0]
                form = types.ElicitRequestFormParams(message=asks, requested_schema=schema)  # pyright: ignore[reportCallIssue]
                requests[rid] = types.ElicitRequest(method="elicitation/create", params=form)
            state = {"v": _STATE_VERSION, "agent": self.agent.id, "session": session.to_dict()}
            return types.InputRequiredResult(
                result_type="input_required", input_requests=requests, request_state=json.dumps(state, default=str)
            )
        text = response.text
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)] if text else [])


def mcp_app(
    agent: FunctionalWorkflowAgent,
    *,
    key: bytes | str | Sequence[bytes | str],
    name: str | None = None,
    state_ttl_seconds: float = DEFAULT_STATE_TTL_SECONDS,
    path: str = "/mcp",
    host: str = "127.0.0.1",
    release_memory_every: float | None = DEFAULT_RELEASE_MEMORY_EVERY,
    sweep_every: float | None = DEFAULT_SWEEP_EVERY,
) -> Starlette:
    """A Streamable HTTP MCP app whose one tool runs ``agent``, correct by default ("MCP" in the docs).

    Args:
        agent: The agent; one object serves every call.

    Keyword Args:
        key: The secret sealing ``requestState``, the same on every worker (32+ random bytes; a list rotates).
        name: The tool's name (and the server's; default: the agent's name made tool-safe).
        state_ttl_seconds: How long a pause can be answered through its ``requestState`` (default an hour).
        path: The Streamable HTTP endpoint.
        host: Where the app is served (``127.0.0.1`` turns on DNS-rebinding protection).
        release_memory_every: Seconds between two ``malloc_trim`` after requests (glibc only); None: never.
        sweep_every: Seconds between two sweeps of expired pauses (at most a quarter TTL); None: on access only.

    Returns:
        The Starlette app (its lifespan runs the MCP session manager and the sweep).

    Raises:
        ValueError: A bad ``release_memory_every`` or ``sweep_every``.
    """
    name = name or re.sub(r"[^a-zA-Z0-9_.-]+", "_", agent.name or "").strip("_") or "workflow"
    tool = MCPWorkflowTool(agent, name=name)
    server: Server[Any] = Server(name, version="1.0.0", on_list_tools=tool.list_tools, on_call_tool=tool.call_tool)
    keys = [key] if isinstance(key, (bytes, str)) else list(key)
    server.middleware.append(
        RequestStateBoundary(RequestStateSecurity(keys=keys, ttl=state_ttl_seconds), default_audience=name)
    )
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    app.state.mcp_tool = tool
    add_upkeep(app, agent, release_memory_every, sweep_every)
    return app


def first_text(result: types.CallToolResult) -> str:
    """The text of a tool result's first text content ('' when none)."""
    texts: Sequence[Any] = [c for c in result.content if isinstance(c, types.TextContent)]
    return cast(types.TextContent, texts[0]).text if texts else ""
