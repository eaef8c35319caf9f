"""Responses request bodies to agent input: answer items (which the hosting package refuses) as answer contents."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from agent_framework import Content, Message

from .._answers import value_result
from ._adapter import approval_answer

if TYPE_CHECKING:
    from agent_framework_hosting import AgentRunArgs

MCP_APPROVAL_RESPONSE = "mcp_approval_response"  # answers an mcp_approval_request (approve: true or false)
FUNCTION_CALL_OUTPUT = "function_call_output"  # answers a function_call with a value (output: its JSON text)
MAX_ID_LENGTH = 256  # the longest previous_response_id or conversation id the route accepts
_ANSWER_TYPES = frozenset({MCP_APPROVAL_RESPONSE, FUNCTION_CALL_OUTPUT})
_STAND_IN_INPUT = "answer"  # what responses_to_run parses (then dropped): the input is converted here


class InvalidRequestError(ValueError):
    """A request body the route refuses with 400: ``param`` names the field at fault."""

    def __init__(self, message: str, *, param: str | None = None, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    """One checked Responses request: the agent's input and where its conversation lives."""

    messages: list[Message]
    stream: bool
    previous_response_id: str | None
    conversation_id: str | None
    answer_params: Mapping[str, str]  # request id -> the input field that answers it (input[2].output)
    answer_id_params: Mapping[str, str]  # request id -> the input field that names it (input[2].call_id)


def _answer_type(item: Any) -> str | None:
    if isinstance(item, Mapping):
        kind = cast("Mapping[str, Any]", item).get("type")
        return kind if kind in _ANSWER_TYPES else None
    return None


def _approval_content(item: Mapping[str, Any]) -> Content:
    request_id = item.get("approval_request_id")
    approve = item.get("approve")
    if not isinstance(request_id, str) or not request_id:
        raise ValueError("`mcp_approval_response` needs a non-empty string `approval_request_id`.")
    if not isinstance(approve, bool):
        raise ValueError("`mcp_approval_response` needs a boolean `approve`.")
    return approval_answer(request_id, approve)


def _result_content(item: Mapping[str, Any]) -> Content:
    call_id = item.get("call_id")
    output = item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError("`function_call_output` needs a non-empty string `call_id` (the request id).")
    if not isinstance(output, str):
        raise ValueError("`function_call_output` needs a string `output`: the JSON text of the answer.")
    try:
        value: Any = json.loads(output)
    except json.JSONDecodeError:
        value = output  # not JSON: the text itself (a str request's answer)
    except RecursionError:
        raise ValueError("`function_call_output` `output` nests too deeply to read.") from None
    return value_result(call_id, value)  # a JSON string stays a string: '"3"' does not answer an int


def _answers(body: Mapping[str, Any], kinds: Collection[str] = _ANSWER_TYPES) -> list[tuple[int, Content]]:
    """The answer items of ``body["input"]`` (of ``kinds``) as contents, each with its index in ``input``."""
    items = body.get("input")
    found: list[tuple[int, Content]] = []
    for index, item in enumerate(cast("list[Any]", items) if isinstance(items, list) else []):
        kind = _answer_type(item)
        if kind not in kinds:
            continue
        try:
            convert = _approval_content if kind == MCP_APPROVAL_RESPONSE else _result_content
            found.append((index, convert(cast("Mapping[str, Any]", item))))
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param=f"input[{index}]") from None
    return found


def _answer_messages(answers: Sequence[Content]) -> list[Message]:
    approvals = [content for content in answers if content.type == "function_approval_response"]
    results = [content for content in answers if content.type == "function_result"]
    return [Message(role, contents) for role, contents in (("user", approvals), ("tool", results)) if contents]


def _convert_input(body: Mapping[str, Any]) -> tuple[list[Message], list[tuple[int, Content]]]:
    """The agent's messages for ``body["input"]`` (answers last: approvals, then results), and its answer items."""
    from agent_framework_hosting_responses import messages_from_responses_input

    answers = _answers(body)
    raw = body.get("input")
    rest: Any = [item for item in cast("list[Any]", raw) if not _answer_type(item)] if isinstance(raw, list) else raw
    try:
        messages = messages_from_responses_input(rest) if rest or not answers else []
    except (ValueError, RecursionError) as exc:
        message = str(exc) if isinstance(exc, ValueError) else "`input` nests too deeply to read."
        raise InvalidRequestError(message, param="input") from None
    return [*messages, *_answer_messages([content for _, content in answers])], answers


def responses_approval_messages(body: Mapping[str, Any]) -> list[Message]:
    """The ``mcp_approval_response`` items of a request body as one user message, or ``[]``; ValueError if malformed."""
    return _answer_messages([content for _, content in _answers(body, {MCP_APPROVAL_RESPONSE})])


def responses_to_run_with_approvals(body: Mapping[str, Any]) -> AgentRunArgs:
    """``responses_to_run(body)`` that also accepts ``mcp_approval_response`` and ``function_call_output`` items.

    A drop-in for a route you write yourself; the answers become trailing messages (approvals, then tool results).

    Returns:
        The ``AgentRunArgs`` mapping of ``responses_to_run``: ``messages``, ``options``, ``stream``.

    Raises:
        ImportError: ``agent-framework-hosting-responses`` is not installed (the ``hosting`` extra).
        ValueError: Invalid input, continuation fields or answer items.
    """
    try:
        from agent_framework_hosting_responses import responses_to_run
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "responses_to_run_with_approvals needs agent-framework-hosting-responses: "
            'pip install "agent-framework-functional[hosting]"'
        ) from exc

    messages, _ = _convert_input(body)
    run = responses_to_run({**body, "input": _STAND_IN_INPUT})  # its options, stream and continuation checks
    run["messages"] = messages
    return run


def decode_body(raw: bytes) -> Mapping[str, Any]:
    """The JSON object of a request body; ``InvalidRequestError`` for anything else (or unpaired surrogates)."""
    try:
        body: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError):  # JSONDecodeError is a ValueError
        raise InvalidRequestError("The request body is not valid JSON.", code="invalid_json") from None
    except RecursionError:
        raise InvalidRequestError("The request body nests too deeply to read.", code="invalid_json") from None
    if not isinstance(body, Mapping):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    try:  # escaped unpaired surrogates (\ud800) decode, but no UTF-8 reply could carry them back
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        message = "The request body holds unpaired surrogates (\\udXXX escapes)."
        raise InvalidRequestError(message, code="invalid_json") from None
    return cast("Mapping[str, Any]", body)


def _id_field(body: Mapping[str, Any], name: str) -> str | None:
    """The id in ``body[name]``: a string, or for ``conversation`` also ``{"id": <string>}``."""
    value = body.get(name)
    if value is None:
        return None
    shape = "a non-empty string"
    if name == "conversation":
        shape += ' or an object {"id": <that string>}'
        if isinstance(value, Mapping) and set(cast("Mapping[str, Any]", value)) == {"id"}:
            value = cast("Mapping[str, Any]", value)["id"]
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
        raise InvalidRequestError(f"`{name}` must be {shape} (at most {MAX_ID_LENGTH} characters).", param=name)
    return value


def _session_fields(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    given = [name for name in ("previous_response_id", "conversation", "conversation_id") if body.get(name) is not None]
    if len(given) > 1:
        raise InvalidRequestError("Send one of `previous_response_id` and `conversation`, not both.", param=given[1])
    conversation = _id_field(body, "conversation") or _id_field(body, "conversation_id")
    return _id_field(body, "previous_response_id"), conversation


def parse_request(body: Mapping[str, Any]) -> ResponsesRequest:
    """Check one Responses request body and turn it into agent input.

    Honoured: ``input``, ``stream``, ``previous_response_id``, ``conversation`` (``conversation_id``); refused:
    ``continuation_token``, ``background: true``; the rest ignored. Raises InvalidRequestError (``param``: the field).
    """
    if body.get("continuation_token") is not None:
        raise InvalidRequestError(
            "The continuation token stays on the server, in the conversation's session: answer a pending "
            "request with an `mcp_approval_response` or `function_call_output` input item.",
            param="continuation_token",
        )
    if body.get("background") not in (None, False):
        raise InvalidRequestError("Background responses are not supported: send `stream: true`.", param="background")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequestError("`stream` must be true or false.", param="stream")
    previous_response_id, conversation_id = _session_fields(body)
    answer_params: dict[str, str] = {}
    answer_id_params: dict[str, str] = {}
    messages, answers = _convert_input(body)
    for index, content in answers:
        approval = content.type == "function_approval_response"
        request_id = str(content.id if approval else content.call_id)
        answer_params.setdefault(request_id, f"input[{index}]" if approval else f"input[{index}].output")
        answer_id_params.setdefault(request_id, f"input[{index}].{'approval_request_id' if approval else 'call_id'}")
    return ResponsesRequest(
        messages=messages,
        stream=bool(stream),
        previous_response_id=previous_response_id,
        conversation_id=conversation_id,
        answer_params=answer_params,
        answer_id_params=answer_id_params,
    )
