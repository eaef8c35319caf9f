"""Workflow events to agent updates: the one conversion both agent run modes use (the token update last)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar, cast

from agent_framework import AgentResponse, AgentResponseUpdate, Content, Message, WorkflowEvent
from pydantic_core import to_jsonable_python

from ._answers import response_schema, type_name
from ._authority import raw_token
from ._continuation import presented_secret, request_tag

REQUEST_INFO_FUNCTION_NAME = "request_info"
"""Function name of the ``function_call`` inside each approval request."""

LIVE_DATA_PROPERTY = "data"
"""Key of ``AgentResponseUpdate.additional_properties`` that carries an emitted JSON value."""

PAUSE_TAG_SEPARATOR = "~"
"""Joins core's request id and its pause's tag in the ids the agent publishes (``auto::0~<tag>``)."""

_Event = TypeVar("_Event")


def published_id(request_id: str, tag: str | None) -> str:
    """The id published for core's ``request_id`` of the pause tagged ``tag``: core reuses ids in every run."""
    return request_id if tag is None else f"{request_id}{PAUSE_TAG_SEPARATOR}{tag}"


def token_tag(token: object) -> str | None:
    """The tag of the pause whose token (or ``VerifiedContinuation``) is ``token``; None when malformed."""
    return request_tag(presented_secret(raw_token(token)))


def published_requests(requests: Mapping[str, _Event], tag: str | None) -> Mapping[str, _Event]:
    """``requests`` (core's id -> event) under the ids the agent publishes, read-only."""
    return MappingProxyType({published_id(request_id, tag): event for request_id, event in requests.items()})


def core_ids(answers: Mapping[str, Any], tag: str | None) -> dict[str, Any]:
    """``answers`` with each id published for the pause tagged ``tag`` back to core's id (other ids unchanged)."""
    suffix = f"{PAUSE_TAG_SEPARATOR}{tag}"
    return {
        key[: -len(suffix)] if tag is not None and isinstance(key, str) and key.endswith(suffix) else key: value
        for key, value in answers.items()
    }


def request_data_to_json(data: Any) -> Any:
    """``data`` (a ``request_info`` payload) as JSON-safe values; what pydantic cannot convert becomes ``str()``."""
    return to_jsonable_python(data, fallback=str)


class UpdateConverter:
    """Converts one agent run's workflow events to ``AgentResponseUpdate`` objects."""

    __slots__ = ("_live_text", "agent_id", "author_name", "response_id")

    def __init__(self, *, author_name: str | None, agent_id: str, response_id: str) -> None:
        self.author_name = author_name
        self.agent_id = agent_id
        self.response_id = response_id
        self._live_text = LiveText()

    def convert(self, event: WorkflowEvent[Any], tag: str | None = None) -> list[AgentResponseUpdate]:
        """The updates the caller sees for one workflow event (often none); ``tag``: the pause's, for request ids."""
        if event.type == "intermediate":
            update = self.live_update(event.data)
            if update is None:
                return []
            self._live_text.add(update)
            return [update]
        if event.type == "output":
            contents = output_contents(event.data)
            if self._live_text.repeats(contents):
                return []
        elif event.type == "request_info" and event.request_id:
            contents = approval_request(event, tag)
        else:
            return []
        return [self._update(contents, message_id=uuid.uuid4().hex)] if contents else []

    def token_update(self, token: Any) -> AgentResponseUpdate:
        return self._update([], continuation_token=token)

    def live_update(self, data: Any) -> AgentResponseUpdate | None:
        """The update for an ``intermediate`` payload (None: cannot carry it); a copy drops the token only."""
        if isinstance(data, AgentResponseUpdate):
            return self._update(
                list(data.contents),
                role=data.role or "assistant",
                author_name=data.author_name or self.author_name,
                message_id=data.message_id,
                merge_mode=data.merge_mode,
                created_at=data.created_at,
                additional_properties=dict(data.additional_properties) if data.additional_properties else None,
                raw_representation=data,
            )
        if isinstance(data, (str, Content)):
            return self._update(output_contents(data))
        if data is None or isinstance(data, (bool, int, float, dict, list)):
            return self._update([], additional_properties={LIVE_DATA_PROPERTY: data})
        return None

    def _update(self, contents: list[Content], **fields: Any) -> AgentResponseUpdate:
        fields = {"role": "assistant", "author_name": self.author_name, **fields}
        return AgentResponseUpdate(contents=contents, agent_id=self.agent_id, response_id=self.response_id, **fields)


def approval_request(event: WorkflowEvent[Any], tag: str | None = None) -> list[Content]:
    """A ``request_info`` event's ``function_call`` (hosted), then its approval request (as core's ``Agent``)."""
    request_id = published_id(event.request_id, tag)
    expects = {"response_type": type_name(event.response_type), "response_schema": response_schema(event.response_type)}
    arguments = {"request_id": request_id, "data": request_data_to_json(event.data), **expects}
    call = Content.from_function_call(
        call_id=request_id, name=REQUEST_INFO_FUNCTION_NAME, arguments=arguments, hosted=True
    )
    approval = Content.from_function_approval_request(
        id=request_id, function_call=call, additional_properties={"request_id": request_id, **expects}
    )
    return [call, approval]


def output_contents(data: Any) -> list[Content]:
    """Contents for a workflow output: text, ``Content``, ``Message`` or agent response as-is."""
    if data is None:
        return []
    if isinstance(data, str):
        return [Content.from_text(text=data)]
    if isinstance(data, Content):
        return [data]
    if isinstance(data, Message):
        return list(data.contents)
    if isinstance(data, AgentResponse):
        return [content for message in data.messages for content in message.contents]  # pyright: ignore[reportUnknownVariableType]
    if isinstance(data, list) and all(isinstance(item, (Message, Content)) for item in data):  # pyright: ignore[reportUnknownVariableType]
        return [c for item in data for c in (item.contents if isinstance(item, Message) else [item])]  # pyright: ignore[reportUnknownVariableType]
    return [Content.from_text(text=str(cast(object, data)))]


class LiveText:
    """The text one run streamed live (core's merge rules), so an ``output`` ending with it is not repeated."""

    __slots__ = ("_author", "_message_id", "_message_start", "_open", "_role", "_runs")

    def __init__(self) -> None:
        self._runs: list[list[str]] = []  # text runs, each a list of chunks
        self._message_start = 0  # index in _runs where the current message begins
        self._open = False  # the next text chunk joins the last run
        self._author: str | None = None
        self._message_id: str | None = None
        self._role: Any = None

    def add(self, update: AgentResponseUpdate) -> None:
        opens = (  # core's rule in ``_process_update`` for when an update opens a new message
            (update.message_id and self._message_id and update.message_id != self._message_id)
            or (update.author_name and self._author and update.author_name != self._author)
            or (update.role and update.role != self._role)
        )
        if not self._runs or opens:
            self._message_start = len(self._runs)
            self._open = False
        if update.merge_mode == "replace":
            del self._runs[self._message_start :]
            self._open = False
        for content in update.contents:
            self._add_content(content)
        if update.author_name is not None:
            self._author = update.author_name
        if update.role is not None:
            self._role = update.role
        if update.message_id:
            self._message_id = update.message_id

    def _add_content(self, content: Content) -> None:
        if content.type != "text":
            self._open = False
            return
        text = content.text or ""
        if not self._open:
            self._runs.append([text])
            self._open = True
        elif content.merge_mode == "replace":
            self._runs[-1] = [text]
        else:
            self._runs[-1].append(text)

    def repeats(self, contents: Sequence[Content]) -> bool:
        """True when ``contents`` carry text and the live text so far ends with exactly that text."""
        text = "".join(content.text or "" for content in contents if content.type == "text")
        return bool(text) and "".join("".join(run) for run in self._runs).endswith(text)
