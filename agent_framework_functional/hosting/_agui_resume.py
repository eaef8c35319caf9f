"""The answers an AG-UI request carries, read the way AG-UI will act on them, for ``agui_endpoint``'s guard.

AG-UI takes the resume from the first of ``resume``, ``forwardedProps.command.resume``, ``forwardedProps.resume``,
else trailing ``tool`` messages with ``accepted``; what it would read two ways is refused (400). Pinned by
``tests/hosting/test_agui_resume_forms.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from agent_framework import Content
from agent_framework_ag_ui import AGUIRequest
from fastapi import HTTPException
from pydantic import ValidationError

from .._answers import value_result
from ._adapter import ANSWER_FIELD, approval_answer

ID_FIELDS = ("interruptId", "interrupt_id", "id", "toolCallId")  # where AG-UI reads an entry's interrupt id

FORWARDED_PLACES = ("forwardedProps.command.resume", "forwardedProps.resume")


@dataclass(frozen=True)
class ResumeAnswer:
    """One resume entry as AG-UI reads it: the interrupt it answers, ``resolved`` or ``cancelled``, the payload."""

    interrupt_id: str
    status: str
    payload: Any
    from_tool_message: bool = False


def refuse(detail: str) -> HTTPException:
    """The guard's refusal: 400."""
    return HTTPException(status_code=400, detail=detail)


def read_request(body: Any) -> dict[str, Any] | None:
    """The body as AG-UI's endpoint reads it (``AGUIRequest``, dumped without nulls); None when AG-UI refuses it."""
    try:
        return AGUIRequest.model_validate(body).model_dump(exclude_none=True)
    except ValidationError:
        return None


def read_answers(request: Mapping[str, Any]) -> list[ResumeAnswer]:
    """Every resume entry AG-UI will act on in ``request``; 400 for resumes in two places or read two ways."""
    places = _resume_places(request)
    if len(places) > 1:
        raise refuse(
            f"The request carries a resume in {len(places)} places ({', '.join(places)}); send it in one "
            "(top-level 'resume' or forwardedProps.command.resume). Nothing was run."
        )
    if not places:
        return _tool_message_answers(request.get("messages"))
    (place,) = places
    if place == "resume":
        return [_answer(entry) for entry in cast(list[dict[str, Any]], request["resume"])]
    return _forwarded_answers(place, _forwarded_resume(request, place))


def _resume_places(request: Mapping[str, Any]) -> list[str]:
    found = ["resume"] if request.get("resume") is not None else []
    return found + [place for place in FORWARDED_PLACES if _forwarded_resume(request, place) is not None]


def _forwarded_resume(request: Mapping[str, Any], place: str) -> Any:
    props: Any = request.get("forwarded_props")
    if not isinstance(props, dict):
        return None
    holder: Any = cast(dict[str, Any], props)
    if place == "forwardedProps.command.resume":
        holder = cast(dict[str, Any], props).get("command")
    return cast(dict[str, Any], holder).get("resume") if isinstance(holder, dict) else None


def _forwarded_answers(place: str, raw: Any) -> list[ResumeAnswer]:
    """A forwarded resume read as AG-UI's model reads a top-level one, refused where AG-UI's passes disagree."""
    items: Any = raw
    if isinstance(raw, dict):
        holder = cast(dict[str, Any], raw)
        items = holder.get("interrupts", holder.get("interrupt", [holder]))
    for item in cast(list[Any], items) if isinstance(items, list) else []:
        entry = cast(dict[str, Any], item) if isinstance(item, dict) else {}
        ids = {str(entry[key]) for key in ID_FIELDS if entry.get(key)}
        if len(ids) > 1:
            raise refuse(f"A resume entry in {place} names several interrupt ids ({sorted(ids)!r}); name one.")
    request = read_request({"messages": [], "resume": raw})
    if request is None or "resume" not in request:
        raise refuse(
            f"The resume in {place} is not a list of entries {{'interruptId', 'status', 'payload'}} "
            "(or an object holding them); nothing was run."
        )
    return [_answer(entry) for entry in cast(list[dict[str, Any]], request["resume"])]


def _answer(entry: Mapping[str, Any]) -> ResumeAnswer:
    return ResumeAnswer(str(entry["interrupt_id"]), str(entry["status"]), entry.get("payload"))


def _tool_message_answers(messages: Any) -> list[ResumeAnswer]:
    """AG-UI's legacy approvals: trailing ``tool`` messages whose JSON content has ``accepted`` (filtered later)."""
    found: list[ResumeAnswer] = []
    for message in reversed(cast(list[Any], messages) if isinstance(messages, list) else []):
        if not isinstance(message, dict) or str(cast(dict[str, Any], message).get("role", "")).lower() != "tool":
            break
        fields = cast(dict[str, Any], message)
        call_id = fields.get("tool_call_id") or fields.get("toolCallId") or fields.get("actionExecutionId")
        content = fields.get("content")
        content = fields.get("result") if content is None else content
        payload = _json_object(content) if isinstance(content, str) else content
        if call_id and isinstance(payload, Mapping) and "accepted" in payload:
            found.append(ResumeAnswer(str(call_id), "resolved", dict(cast(Mapping[str, Any], payload)), True))
    return found


def _json_object(value: Any) -> dict[str, Any] | None:
    """``value`` as AG-UI reads an approval payload: an object, or text holding a JSON object."""
    if isinstance(value, dict):
        return cast(dict[str, Any], value)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return cast(dict[str, Any], parsed) if isinstance(parsed, dict) else None


def payload_answer(request_id: str, payload: Any) -> Content:
    """The answer content for a resume ``payload`` as AG-UI reads it; 400 without a boolean ``approved``."""
    fields = _json_object(payload)
    approved = None if fields is None else fields.get("approved", fields.get("accepted"))
    if fields is None or not isinstance(approved, bool):
        raise refuse(
            f"The resume payload for {request_id!r} must be an object with a boolean 'approved', plus "
            f"'{ANSWER_FIELD}': <value> when the request expects something other than a bool."
        )
    edited: Any = fields.get("editedArgs")
    answer = cast(dict[str, Any], edited).get(ANSWER_FIELD) if isinstance(edited, dict) else fields.get(ANSWER_FIELD)
    if approved and answer is not None:
        return value_result(request_id, answer)
    return approval_answer(request_id, approved)
