"""MCP in one call: :func:`mcp_app` serves a FunctionalWorkflowAgent as one MCP tool whose pauses elicit the answer.

Built on ``mcp`` (its low-level ``Server``, Streamable HTTP app and ``RequestStateBoundary``). A pause is an
``input_required`` result (MCP 2026-07-28) holding one form elicitation per request, with the answer's
schema; the paused session rides in ``requestState``, sealed with the host's key, so a client carries it
back but cannot read, forge or swap it. Needs the ``mcp`` extra.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agent_framework import AgentSession, Content, Message, WorkflowEvent
from mcp import MCPError, types
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp_types.version import is_version_at_least
from starlette.applications import Starlette

from .._agent import FunctionalWorkflowAgent
from .._answers import response_schema, value_result
from .._chat import answers_to_responses
from .._errors import FunctionalWorkflowError
from .._updates import REQUEST_INFO_FUNCTION_NAME, request_data_to_json
from ._adapter import ANSWER_FIELD, parse_typed_text
from ._sweep import DEFAULT_RELEASE_MEMORY_EVERY, DEFAULT_SWEEP_EVERY, add_upkeep

TASK_ARGUMENT = "task"
"""The tool's one argument: the text that starts the workflow."""

DEFAULT_STATE_TTL_SECONDS = 3600.0
"""How long a paused call's ``requestState`` stays valid by default (an hour)."""

MODERN_PROTOCOL = "2026-07-28"
"""The first MCP version with ``input_required`` results; older clients get ``elicitation/create`` in the call."""

LEGACY_ATTEMPTS = 3
"""Refused answers an older client (no ``input_required``) may send in one call before it gives up."""

_PRIMITIVE = frozenset({"string", "number", "integer", "boolean"})
_STATE_VERSION = 1


def _is_primitive(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    prop = cast(dict[str, Any], schema)
    return (prop.get("type") in _PRIMITIVE or "enum" in prop) and not ({"$ref", "anyOf", "items"} & prop.keys())


def answer_form(response_type: Any) -> tuple[dict[str, Any], bool]:
    """The form elicitation schema for a request of ``response_type``, and whether its fields ARE the answer.

    A primitive answer (``bool``, ``str``, numbers, enums) is one ``answer`` field of its own schema; a model
    whose fields are all primitive is its own form (the accepted content is the answer); anything else is an
    ``answer`` string field that takes the JSON of the value (its description carries the JSON Schema).
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


def _elicitation(event: WorkflowEvent[Any], tool_name: str) -> types.ElicitRequest:
    form, _ = answer_form(event.response_type)
    data = json.dumps(request_data_to_json(event.data), default=str)
    return types.ElicitRequest(
        method="elicitation/create",
        params=types.ElicitRequestFormParams(message=f"{tool_name} asks: {data}", requested_schema=form),  # pyright: ignore[reportCallIssue]
    )


def _answer(request_id: str, event: WorkflowEvent[Any] | None, response: Any) -> Content:
    """The answer content for one elicitation result (``event`` None: the pause is not kept here)."""
    if not isinstance(response, types.ElicitResult):
        raise MCPError(types.INVALID_PARAMS, f"Input response {request_id!r} must be an elicitation result.")
    if event is None:
        if response.action != "accept":
            return Content.from_function_approval_response(False, request_id, _call(request_id))
        content = dict(response.content or {})
        value = content[ANSWER_FIELD] if set(content) == {ANSWER_FIELD} else content
        # The form is unknown here: a string may be the JSON text of a list or model, so it stays text to read as JSON.
        return Content.from_function_result(call_id=request_id, result=value)
    if response.action != "accept":
        if event.response_type is bool:
            return value_result(request_id, False)  # a declined or dismissed approval is a rejection
        raise MCPError(
            types.INVALID_PARAMS,
            f"Request {request_id!r} was {response.action}ed; it needs an accepted answer. The call is still paused: "
            "retry with the same requestState and an accepted answer.",
        )
    content = dict(response.content or {})
    _, whole = answer_form(event.response_type)
    if whole:
        return value_result(request_id, content)
    if ANSWER_FIELD not in content:
        raise MCPError(types.INVALID_PARAMS, f"The answer to {request_id!r} needs the field {ANSWER_FIELD!r}.")
    return value_result(request_id, _field_value(content[ANSWER_FIELD], event.response_type))


def _field_value(value: Any, response_type: Any) -> Any:
    """The ``answer`` field's value; for a type that is no primitive, the field is text holding its JSON."""
    if isinstance(value, str) and not _is_primitive(response_schema(response_type)):
        return parse_typed_text(value)
    return value


def _call(request_id: str) -> Content:
    return Content.from_function_call(call_id=request_id, name=REQUEST_INFO_FUNCTION_NAME, arguments={})


class MCPWorkflowTool:
    """The MCP tool: starts the workflow, pauses with elicitations, resumes from the sealed ``requestState``.

    Args:
        agent: The agent; one object serves every call.

    Keyword Args:
        name: The tool's name.
    """

    def __init__(self, agent: FunctionalWorkflowAgent, *, name: str) -> None:
        self.agent = agent
        self.name = name

    def tool(self) -> types.Tool:
        """The tool definition: one required string argument, ``task``."""
        return types.Tool(
            name=self.name,
            description=self.agent.description or f"Runs the {self.name} workflow; it may ask for input.",
            input_schema={
                "type": "object",
                "properties": {TASK_ARGUMENT: {"type": "string", "description": f"Task for {self.name}"}},
                "required": [TASK_ARGUMENT],
                "additionalProperties": False,
            },
        )

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        """``tools/list``: this one tool."""
        return types.ListToolsResult(tools=[self.tool()])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> Any:
        """``tools/call``: run, or resume with ``inputResponses`` from the (already unsealed) ``requestState``.

        Raises:
            MCPError: ``INVALID_PARAMS`` for another tool name, a missing ``task``, a state without answers,
                and answers the pending requests refuse (the call stays paused: retry with the same state).
        """
        if params.name != self.name:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool {params.name!r}; this server has {self.name!r}.")
        if params.request_state is None:
            task = (params.arguments or {}).get(TASK_ARGUMENT)
            if not isinstance(task, str) or not task.strip():
                raise MCPError(types.INVALID_PARAMS, f"Argument {TASK_ARGUMENT!r} must be a non-empty string.")
            session = self.agent.create_session()
            result = await self._run(task, session)
            if is_version_at_least(ctx.protocol_version, MODERN_PROTOCOL):
                return result
            return await self._elicit_in_call(ctx, session, result)
        return await self._resume(self._session_from_state(params.request_state), params.input_responses or {})

    async def _elicit_in_call(self, ctx: Any, session: AgentSession, result: Any) -> Any:
        """Older clients: ``elicitation/create`` in the call until the workflow ends.

        They hold no ``requestState`` to retry with, so a refused answer is asked again (the form's message
        says why); after :data:`LEGACY_ATTEMPTS` refused answers the pause is abandoned and the call fails.
        """
        refused, refusals = "", 0
        while isinstance(result, types.InputRequiredResult):
            responses: dict[str, Any] = {}
            for request_id, request in (result.input_requests or {}).items():
                form = cast(types.ElicitRequestFormParams, request.params)  # pyright: ignore[reportAttributeAccessIssue]
                responses[request_id] = await ctx.session.elicit_form(
                    refused + form.message, form.requested_schema, related_request_id=ctx.request_id
                )
            try:
                result = await self._resume(session, responses)
                refused = ""
            except MCPError as exc:  # the call is still paused: ask again, saying what was wrong
                refusals += 1
                if refusals >= LEGACY_ATTEMPTS:
                    with contextlib.suppress(FunctionalWorkflowError):
                        await self.agent.abandon_continuation_async(session=session)
                    raise MCPError(
                        types.INVALID_PARAMS,
                        f"{exc.message} The call ended after {refusals} refused answers: call the tool again.",
                    ) from None
                refused = f"Your answer was refused: {exc.message} Answer again. "
        return result

    async def _resume(self, session: AgentSession, responses: Mapping[str, Any]) -> Any:
        pending = self.agent.pending_requests_for(session)
        if not responses:
            raise MCPError(types.INVALID_PARAMS, "Send inputResponses with the answers; the call is still paused.")
        if pending:  # the pause is kept here: check the answers now, with messages naming what to send
            unknown = sorted(set(responses) - set(pending))
            if unknown:
                raise MCPError(
                    types.INVALID_PARAMS,
                    f"inputResponses {unknown!r} answer no pending request (pending: {sorted(pending)!r}); "
                    "the call is still paused.",
                )
            answers = [_answer(rid, pending[rid], response) for rid, response in responses.items()]
            try:
                answers_to_responses(answers, pending)
            except FunctionalWorkflowError as exc:
                raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        else:  # kept by the continuation store (another worker) or answered already: the agent's run decides
            answers = [_answer(rid, None, response) for rid, response in responses.items()]
        return await self._run([Message(role="user", contents=answers)], session)

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
        pending = self.agent.pending_requests_for(session)
        if pending:
            state = {"v": _STATE_VERSION, "agent": self.agent.id, "session": session.to_dict()}
            return types.InputRequiredResult(
                result_type="input_required",
                input_requests={rid: _elicitation(event, self.name) for rid, event in pending.items()},
                request_state=json.dumps(state, default=str),
            )
        text = response.text
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)] if text else [])


def _tool_name(agent: FunctionalWorkflowAgent) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "_", agent.name or "").strip("_") or "workflow"


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
    """A Streamable HTTP MCP app whose one tool runs ``agent``, correct by default.

    ``tools/call`` with ``{"task": "<text>"}`` runs the workflow; a pause is an ``input_required`` result
    with one form elicitation per request (:func:`answer_form`) and the paused session in ``requestState``,
    sealed with ``key`` (README "Host it", MCP: what it sets and why).

    Args:
        agent: The agent; one object serves every call.

    Keyword Args:
        key: The host key sealing ``requestState`` (32+ random bytes; a list rotates keys: the first seals,
            all unseal). Keep it secret and the same on every worker.
        name: The tool's name (and the server's; default: the agent's name made tool-safe).
        state_ttl_seconds: How long a pause can be answered through its ``requestState``.
        path: The Streamable HTTP endpoint.
        host: Where the app is served (``127.0.0.1`` turns on ``mcp``'s DNS-rebinding protection).
        release_memory_every: Seconds between two releases of free heap pages after a request; None: never.
        sweep_every: Seconds between two sweeps of expired pauses (README "Run it in production"); None: only
            on access.

    Returns:
        The Starlette app (serve it with uvicorn; its lifespan runs the MCP session manager and the sweep).

    Raises:
        ValueError: ``release_memory_every`` or ``sweep_every`` is not a positive, finite number or None.

    Examples:
        .. code-block:: python

            app = mcp_app(review.build().as_agent(name="review"), key=os.environ["MCP_STATE_KEY"])
            uvicorn.run(app, host="127.0.0.1", port=8000)  # mcp.Client("http://127.0.0.1:8000/mcp")
    """
    tool = MCPWorkflowTool(agent, name=name or _tool_name(agent))
    keys = [key] if isinstance(key, (bytes, str)) else list(key)
    server: Server[Any] = Server(tool.name, version="1.0.0", on_list_tools=tool.list_tools, on_call_tool=tool.call_tool)
    security = RequestStateSecurity(keys=keys, ttl=state_ttl_seconds)
    server.middleware.append(RequestStateBoundary(security, default_audience=tool.name))
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    app.state.mcp_tool = tool
    add_upkeep(app, agent, release_memory_every, sweep_every)
    return app


def first_text(result: types.CallToolResult) -> str:
    """The text of a tool result's first text content ('' when none)."""
    texts: Sequence[Any] = [c for c in result.content if isinstance(c, types.TextContent)]
    return cast(types.TextContent, texts[0]).text if texts else ""
