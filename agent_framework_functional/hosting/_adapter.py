"""A host's view of one FunctionalWorkflowAgent: the same agent (nothing per conversation), answers converted in."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from agent_framework import AgentSession, Content, Message

from .._agent import FunctionalWorkflowAgent
from .._updates import REQUEST_INFO_FUNCTION_NAME

ANSWER_FIELD = "answer"  # the field of a host answer that carries a typed value (any JSON)


def as_messages(messages: Any) -> list[Message] | None:
    """``messages`` as a list of ``Message`` when it is one or a list of them, else None (text, nothing)."""
    if isinstance(messages, Message):
        return [messages]
    if isinstance(messages, list) and all(isinstance(m, Message) for m in cast(list[Any], messages)):
        return list(cast(list[Message], messages))
    return None


def approval_answer(request_id: str, approved: bool) -> Content:
    """A host's approval (or rejection) of the request ``request_id``."""
    call = Content.from_function_call(call_id=request_id, name=REQUEST_INFO_FUNCTION_NAME, arguments={})
    return Content.from_function_approval_response(approved, request_id, call)


def parse_typed_text(text: str) -> Any:
    """A typed reply as a value: its JSON when it parses, else the text itself (an enum member's name)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


class HostedAgent:
    """The wrapped agent as a host sees it; a subclass converts one host's answers (``answers_in``)."""

    def __init__(self, agent: FunctionalWorkflowAgent) -> None:
        self.agent = agent
        self.id = agent.id
        self.name = agent.name
        self.description = agent.description

    def __getattr__(self, name: str) -> Any:
        if name == "agent":  # not set yet (copy, pickle): never recurse
            raise AttributeError(name)
        return getattr(self.agent, name)

    def create_session(self, **kwargs: Any) -> AgentSession:
        """The wrapped agent's ``create_session``."""
        return self.agent.create_session(**kwargs)

    def get_session(self, *args: Any, **kwargs: Any) -> AgentSession:
        """The wrapped agent's ``get_session``."""
        return self.agent.get_session(*args, **kwargs)

    def answers_in(self, messages: Any, session: AgentSession | None) -> Any:
        """The messages the wrapped agent gets (here: ``messages``)."""
        return messages

    def updates_out(self, stream: Any) -> Any:
        """The stream the host gets (here: ``stream``)."""
        return stream

    def run(
        self, messages: Any = None, *, stream: bool = False, session: AgentSession | None = None, **kwargs: Any
    ) -> Any:
        """Convert the host's answers, run the wrapped agent (same arguments), return what it returns."""
        converted = self.answers_in(messages, session)
        if stream:
            return self.updates_out(self.agent.run(converted, stream=True, session=session, **kwargs))
        return self.agent.run(converted, stream=False, session=session, **kwargs)


def replace_contents(messages: Sequence[Message], convert: Any) -> list[Message]:
    """``messages`` with each content passed through ``convert`` (a new ``Message`` only where one changed)."""
    out: list[Message] = []
    for message in messages:
        contents = [convert(content) for content in message.contents]
        if all(new is old for new, old in zip(contents, message.contents, strict=True)):
            out.append(message)
            continue
        out.append(
            Message(
                role=message.role,
                contents=contents,
                author_name=message.author_name,
                message_id=message.message_id,
                additional_properties=dict(message.additional_properties or {}),
            )
        )
    return out
