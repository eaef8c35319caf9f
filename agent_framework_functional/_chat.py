"""Chat input of the agent: what the workflow receives, this turn's answers, and those answers as responses."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import takewhile
from typing import Any, Literal, Union

from agent_framework import Content, Message, RunContext, WorkflowEvent

from ._answers import STRING_ANSWER, accepts_none, convert_answer, parse_json_text, type_name
from ._core_compat import accepts
from ._errors import ResponseMismatchError
from ._updates import published_id, token_tag

InputMode = Literal["text", "message", "messages", "as_given"]
InputMapper = Callable[[list[Message]], Any]

ANSWER_CONTENT_TYPES = frozenset({"function_approval_response", "function_result"})

# The function_result AG-UI and core's Agent put for a declined approval: a bool answer of False.
REJECTED_RESULT = "Error: Tool call invocation was rejected by user."


def is_chat_input(value: Any) -> bool:
    """True when ``value`` is agent chat input: ``str``, ``Message``, ``Content`` or a list/tuple of them."""
    items = typing.cast(Sequence[Any], value) if isinstance(value, (list, tuple)) else (value,)
    return all(isinstance(item, (str, Message, Content)) for item in items)


def input_mode_for(func: Callable[..., Any]) -> InputMode:
    """What the workflow function's first parameter that is not the ``RunContext`` receives (``X | None`` as ``X``)."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # unresolvable forward references: fall back to the raw annotations
        hints = {}
    for parameter in inspect.signature(func).parameters.values():
        annotation = hints.get(parameter.name, parameter.annotation)
        if annotation is RunContext or parameter.name == "ctx":
            continue
        return _mode_of_annotation(annotation)
    return "as_given"


def _mode_of_annotation(annotation: Any) -> InputMode:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) != 1:
            return "as_given"
        annotation = members[0]
    if annotation is str:
        return "text"
    if annotation is Message:
        return "message"
    origin = typing.get_origin(annotation)
    if origin in (list, Sequence) and typing.get_args(annotation) == (Message,):
        return "messages"
    return "as_given"


def map_input(
    mode: InputMode,
    raw: Any,
    caller_messages: list[Message],
    conversation: list[Message],
    mapper: InputMapper | None,
) -> Any:
    """What the workflow function receives for a fresh run (``conversation``: providers' then caller's messages)."""
    if mapper is not None:
        return mapper(conversation)
    if not is_chat_input(raw) or mode == "as_given":
        return raw
    if mode == "text":  # the last user message's text (else the last message's)
        users = [message for message in caller_messages if message.role == "user"]
        return (users or caller_messages)[-1].text if caller_messages else ""
    if mode == "message":
        return caller_messages[-1] if caller_messages else None
    return conversation


@dataclass(frozen=True, slots=True)
class Turn:
    """This turn's part of the input (after the last assistant message) and the answers it carries."""

    messages: list[Message]
    answers: list[Content]
    only_answers: bool


def read_turn(messages: Sequence[Message], *, with_answers: bool) -> Turn:
    """This turn's part of ``messages`` (after the last assistant message); with ``with_answers``, its answers."""
    last = max((index for index, message in enumerate(messages) if message.role == "assistant"), default=-1)
    turn = list(messages[last + 1 :])
    if not with_answers:
        return Turn(turn, [], False)
    # Answers at the very end resume, whatever text of this turn preceded them.
    tail = [*takewhile(lambda m: bool(answer_contents([m])) and not has_other_contents([m]), reversed(turn))][::-1]
    answers = answer_contents(tail or turn)
    return Turn(turn, answers, bool(answers) and not has_other_contents(tail or turn))


def text_answer(messages: Sequence[Message], requests: Mapping[str, WorkflowEvent[Any]]) -> dict[str, Any] | None:
    """The last user message's text as the answer to the one pending ``str`` request, or None."""
    if len(requests) != 1:
        return None
    request_id, event = next(iter(requests.items()))
    users = [message for message in messages if message.role == "user"]
    text = users[-1].text if users else ""
    if event.response_type is not str or not text.strip():
        return None
    return {request_id: text}


def answer_contents(messages: Sequence[Message]) -> list[Content]:
    """The answer contents of ``messages``, in order."""
    return [content for message in messages for content in message.contents if content.type in ANSWER_CONTENT_TYPES]


def has_other_contents(messages: Sequence[Message]) -> bool:
    """True when ``messages`` carry anything besides answers."""
    return any(
        content.type not in ANSWER_CONTENT_TYPES and not (content.type == "text" and not content.text)
        for message in messages
        for content in message.contents
    )


def answers_to_responses(
    answers: Sequence[Content], requests: Mapping[str, WorkflowEvent[Any]], aliases: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Chat-native answers as ``responses`` for the pause's requests, each converted to its ``response_type``.

    ``aliases``: the ids an answer may name, each to its request's id (default: the ids of ``requests``).

    Raises:
        ResponseMismatchError: An answer names no pending request, answers one twice, or does not convert.
    """
    names = aliases if aliases is not None else {request_id: request_id for request_id in requests}
    responses: dict[str, Any] = {}
    for answer in answers:
        request_id = answer.id if answer.type == "function_approval_response" else answer.call_id
        key = "id" if answer.type == "function_approval_response" else "call_id"
        if not request_id or request_id not in names:
            raise ResponseMismatchError(
                f"A {answer.type} content in the input does not answer a pending request (its {key} must be "
                f"one of {sorted(names)!r}). The continuation is still pending: resend the answers with "
                "those ids.",
                request_id=request_id or None,
                unknown_id=True,
            )
        target = names[request_id]
        if target in responses:
            raise ResponseMismatchError(
                f"The input answers request {request_id!r} more than once; send one answer per request. "
                "The continuation is still pending.",
                request_id=request_id,
            )
        responses[target] = _answer_value(answer, request_id, requests[target].response_type)
    return responses


def pause_answers(
    answers: Sequence[Content], requests: Mapping[str, WorkflowEvent[Any]], token: Any, *, core_ids: bool
) -> dict[str, Any]:
    """Chat-native answers (by published id; with ``core_ids`` also core's) as ``responses`` in core's ids.

    Raises:
        ResponseMismatchError: As :func:`answers_to_responses`; nothing has changed.
    """
    tag = token_tag(token)
    aliases = {published_id(request_id, tag): request_id for request_id in requests}
    if core_ids:
        aliases.update((request_id, request_id) for request_id in requests)
    return answers_to_responses(answers, requests, aliases)


def _answer_value(answer: Content, request_id: str, response_type: Any) -> Any:
    if answer.type == "function_approval_response":
        return _approval_value(answer, request_id, response_type)
    if response_type is Content:
        return answer
    if response_type is bool and answer.result == REJECTED_RESULT:
        return False  # a declined approval, the way core's Agent (and AG-UI for hosted calls) reports it
    if (answer.additional_properties or {}).get(STRING_ANSWER) is True:
        return convert_answer(answer.result, response_type, request_id)  # a JSON string, not JSON text
    value = parse_json_text(answer.result, response_type)
    if value is None and not accepts_none(response_type):
        value = _NO_VALUE  # a host's empty reply is no answer (core would take None for any type)
    return convert_answer(value, response_type, request_id)


def _approval_value(answer: Content, request_id: str, response_type: Any) -> Any:
    if response_type is bool:
        if not isinstance(answer.approved, bool):  # "no" or [] must not approve by truthiness
            raise ResponseMismatchError(
                f"The approval of request {request_id!r} has approved={answer.approved!r}; only true or false "
                "answers a bool request. The continuation is still pending.",
                request_id=request_id,
            )
        return answer.approved
    if accepts(answer, response_type):
        return answer
    raise ResponseMismatchError(
        f"Request {request_id!r} expects a {type_name(response_type)}, which an approval cannot give. "
        f"Answer it with a function_result content (call_id={request_id!r}) whose result is the value. "
        "The continuation is still pending.",
        request_id=request_id,
    )


_NO_VALUE = object()
