"""A2A message parts to the agent's answer contents and back: what a paused task shows and what answers it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from a2a.helpers import new_data_part
from a2a.types import Message as A2AMessage
from a2a.types import Part
from agent_framework import Content, WorkflowEvent
from google.protobuf.json_format import MessageToDict

from .._answers import value_result
from .._chat import answers_to_responses
from .._errors import ResponseMismatchError
from ._adapter import ANSWER_FIELD, parse_typed_text

BOOL_WORDS: Mapping[str, bool] = {"approve": True, "yes": True, "reject": False, "no": False}
"""The text answers a ``bool`` request takes when ``text_answers=True`` (case and surrounding space ignored)."""


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

    A data part ``{"request_id": <id>, "answer": <JSON value>}`` answers that request (``request_id`` may be left
    out while one request is pending); with ``text_answers``, a text part answers the one pending request.

    Raises:
        ResponseMismatchError: A part of another kind or shape, text when not allowed, or a value the request's
            type refuses (the message says what to send).
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
