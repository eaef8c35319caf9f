"""Chat plumbing of the agent adapter: input mapping, chat-native answers, session-stored tokens.

Three jobs, each small and pure enough to test on its own:

* **Input mapping.** Decide what the workflow function's message parameter receives when the agent
  is called with chat input (``str``, ``Message``, ``Content`` or a list of them), from the
  parameter's annotation or an explicit ``input_mapper``.
* **Chat-native answers.** Turn ``function_approval_response`` / ``function_result`` contents of the
  incoming messages into ``responses`` for the pending requests, converted to each request's
  ``response_type`` the way core converts responses, so a bad answer is rejected before the
  continuation is touched.
* **Session-stored tokens.** Keep the pending continuation token in ``AgentSession.state`` (JSON-safe)
  so a caller that only has the session, such as an orchestration's ``AgentExecutor``, can resume.

Authority is checked through the workflow's public read-only ``verify_continuation_token`` (in
memory) and ``verify_continuation_token_async`` (continuation store), never its private state;
core's private helpers are reached only through ``_core_compat``.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Union

from agent_framework import AgentSession, Content, Message, RunContext, WorkflowEvent, normalize_messages

from ._continuation import presented_secret
from ._core_compat import accepts, coerce_to
from ._errors import ContinuationAuthorityError

if TYPE_CHECKING:
    from ._workflow import FunctionalWorkflow

InputMode = Literal["text", "message", "messages", "as_given"]
InputMapper = Callable[[list[Message]], Any]

SESSION_STATE_KEY = "agent_framework_functional"
"""Key of this package's entry in ``AgentSession.state``: ``{agent_id: {"continuation_token": token}}``."""

ANSWER_CONTENT_TYPES = frozenset({"function_approval_response", "function_result"})


# ---------------------------------------------------------------------------------------------- input


def is_chat_input(value: Any) -> bool:
    """True when ``value`` is agent chat input: ``str``, ``Message``, ``Content`` or a list/tuple of them."""
    if isinstance(value, (str, Message, Content)):
        return True
    if isinstance(value, (list, tuple)):
        items = typing.cast(Sequence[Any], value)
        return all(isinstance(item, (str, Message, Content)) for item in items)
    return False


def chat_messages(value: Any) -> list[Message]:
    """Normalise chat input to messages (core's ``normalize_messages``); non-chat input gives none."""
    return normalize_messages(value) if is_chat_input(value) else []


def input_mode_for(func: Callable[..., Any]) -> InputMode:
    """Decide what the workflow function's message parameter receives, from its annotation.

    Core gives the message to the first parameter that is not the ``RunContext`` (annotated
    ``RunContext`` or named ``ctx``); this reads that parameter's annotation:
    ``str`` -> ``"text"``, ``Message`` -> ``"message"``, ``list[Message]`` / ``Sequence[Message]``
    -> ``"messages"``, anything else (unannotated, ``Any``, other types) -> ``"as_given"``.
    ``X | None`` counts as ``X``.

    Args:
        func: The workflow function.

    Returns:
        The input mode.
    """
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
    """Return what the workflow function receives for a fresh run.

    Args:
        mode: From :func:`input_mode_for`.
        raw: The ``messages`` argument exactly as the caller passed it.
        caller_messages: ``raw`` normalised to messages (empty for non-chat input).
        conversation: Context-provider messages followed by ``caller_messages``.
        mapper: Explicit ``input_mapper``; receives ``conversation``.

    Returns:
        The workflow input.
    """
    if mapper is not None:
        return mapper(conversation)
    if not is_chat_input(raw) or mode == "as_given":
        return raw
    if mode == "text":
        return "\n".join(message.text for message in caller_messages if message.text)
    if mode == "message":
        return caller_messages[-1] if caller_messages else None
    return conversation


# ---------------------------------------------------------------------------------------------- answers


def answer_contents(messages: Sequence[Message]) -> list[Content]:
    """The ``function_approval_response`` and ``function_result`` contents of ``messages``, in order."""
    return [content for message in messages for content in message.contents if content.type in ANSWER_CONTENT_TYPES]


def has_other_contents(messages: Sequence[Message]) -> bool:
    """True when ``messages`` carry anything besides answers (text, images, calls, ...)."""
    return any(
        content.type not in ANSWER_CONTENT_TYPES and not (content.type == "text" and not content.text)
        for message in messages
        for content in message.contents
    )


def answers_to_responses(answers: Sequence[Content], pending: Mapping[str, WorkflowEvent[Any]]) -> dict[str, Any]:
    """Map chat-native answers to ``responses`` for the pending requests, converting each value.

    Matching: a ``function_approval_response`` answers the request whose id equals its ``id``; a
    ``function_result`` answers the request whose id equals its ``call_id``.

    Values: an approval gives ``approved`` when the request's ``response_type`` is ``bool`` and the
    ``Content`` itself when the type accepts it (``Content``, ``Any``); a function result gives the
    ``Content`` itself when the type is ``Content``, else its ``result`` text converted to the type
    (kept as text when the type accepts text; otherwise parsed as JSON and coerced with core's
    rules, so pydantic models and dataclasses work).

    Args:
        answers: From :func:`answer_contents`.
        pending: The workflow's pending requests (request id -> ``request_info`` event).

    Returns:
        Request id -> converted value, ready for ``FunctionalWorkflow.run(responses=...)``.

    Raises:
        ValueError: An answer has no id, matches no pending request, answers a request twice, or
            cannot be converted to the request's ``response_type``. Nothing has changed.
    """
    responses: dict[str, Any] = {}
    for answer in answers:
        request_id = answer.id if answer.type == "function_approval_response" else answer.call_id
        key = "id" if answer.type == "function_approval_response" else "call_id"
        if not request_id or request_id not in pending:
            raise ValueError(
                f"A {answer.type} content in the input does not answer a pending request (its {key} must be "
                f"one of {sorted(pending)!r}). The continuation is still pending: resend the answers with "
                "those ids."
            )
        if request_id in responses:
            raise ValueError(
                f"The input answers request {request_id!r} more than once; send one answer per request. "
                "The continuation is still pending."
            )
        responses[request_id] = _answer_value(answer, request_id, pending[request_id].response_type)
    return responses


def _answer_value(answer: Content, request_id: str, response_type: Any) -> Any:
    if answer.type == "function_approval_response":
        if response_type is bool:
            return bool(answer.approved)
        if accepts(answer, response_type):
            return answer
        raise ValueError(
            f"Request {request_id!r} expects a {_type_name(response_type)}, which an approval cannot give. "
            f"Answer it with a function_result content (call_id={request_id!r}) whose result is the value. "
            "The continuation is still pending."
        )
    if response_type is Content:
        return answer
    converted = _convert_result(answer.result, response_type)
    if converted is _UNCONVERTIBLE:
        raise ValueError(
            f"The function_result for request {request_id!r} cannot be converted to "
            f"{_type_name(response_type)}. Send a result that is valid for that type (JSON for structured "
            "types). The continuation is still pending."
        )
    return converted


_UNCONVERTIBLE: Any = object()


def _convert_result(result: Any, response_type: Any) -> Any:
    if accepts(result, response_type):
        return result
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except ValueError:
            return _UNCONVERTIBLE
    converted, value = coerce_to(result, response_type)
    return value if converted else _UNCONVERTIBLE


def _type_name(response_type: Any) -> str:
    return getattr(response_type, "__name__", None) or repr(response_type)


# ---------------------------------------------------------------------------------------------- authority


def check_authority(workflow: FunctionalWorkflow, token: object) -> Mapping[str, WorkflowEvent[Any]] | None:
    """Validate ``token`` without starting a run; return the pending requests it authorises answers to.

    A chat-native resume must check authority before it looks at the answers (DESIGN.md rule 2:
    nothing about the pending requests may leak to a caller without the token), and the answers
    must be converted before ``run`` accepts the resume (a bad value would otherwise fail after
    the token is spent). Uses the workflow's public, read-only
    :meth:`~FunctionalWorkflow.verify_continuation_token`.

    Args:
        workflow: The workflow instance.
        token: Whatever the caller presented.

    Returns:
        The pending requests when this process holds the continuation; None when the workflow has
        a continuation store and ``token`` is a well-shaped token it does not hold here: the caller
        must then verify it with :func:`check_authority_async` inside the (asynchronous) run.

    Raises:
        ContinuationAuthorityError: The token does not authorise a resume (fixed message).
    """
    try:
        return workflow.verify_continuation_token(token)
    except ContinuationAuthorityError:
        if workflow.continuation_store is None or presented_secret(token) is None:
            raise
    return None


async def check_authority_async(workflow: FunctionalWorkflow, token: object) -> Mapping[str, WorkflowEvent[Any]]:
    """Validate ``token`` in the workflow's continuation store (read-only); see :func:`check_authority`.

    Returns:
        The pending requests of the pause, loaded from its checkpoint when another process paused.

    Raises:
        ContinuationAuthorityError: The token does not authorise a resume (fixed message).
    """
    return await workflow.verify_continuation_token_async(token)


async def token_is_current(workflow: FunctionalWorkflow, token: object) -> bool:
    """True when ``token`` still authorises a resume of ``workflow`` (asks the store when it has one).

    Read-only. A store or checkpoint that cannot be read counts as current, so a transient outage
    never drops a token the caller may still need.
    """
    try:
        if workflow.continuation_store is None:
            workflow.verify_continuation_token(token)
        else:
            await workflow.verify_continuation_token_async(token)
    except ContinuationAuthorityError:
        return False
    except Exception:  # store or checkpoint unreadable: keep the token; a resume re-checks it anyway
        return True
    return True


# ---------------------------------------------------------------------------------------------- session


def session_token(session: AgentSession | None, agent_id: str) -> Mapping[str, Any] | None:
    """The continuation token this agent stored in ``session``, if any."""
    if session is None:
        return None
    entry = session.state.get(SESSION_STATE_KEY)
    if not isinstance(entry, Mapping):
        return None
    agent_entry = typing.cast(Mapping[str, Any], entry).get(agent_id)
    if not isinstance(agent_entry, Mapping):
        return None
    token = typing.cast(Mapping[str, Any], agent_entry).get("continuation_token")
    return typing.cast(Mapping[str, Any], token) if isinstance(token, Mapping) else None


def store_session_token(session: AgentSession, agent_id: str, token: Mapping[str, Any]) -> None:
    """Store ``token`` (as a plain JSON-safe dict) under this agent's entry of ``session.state``."""
    entry = session.state.get(SESSION_STATE_KEY)
    entries: dict[str, Any] = dict(typing.cast(Mapping[str, Any], entry)) if isinstance(entry, Mapping) else {}
    entries[agent_id] = {"continuation_token": dict(token)}
    session.state[SESSION_STATE_KEY] = entries


def clear_session_token(session: AgentSession, agent_id: str) -> None:
    """Remove this agent's token from ``session.state`` (and the package entry once it is empty)."""
    entry = session.state.get(SESSION_STATE_KEY)
    if not isinstance(entry, Mapping):
        return
    entries = dict(typing.cast(Mapping[str, Any], entry))
    if entries.pop(agent_id, None) is None:
        return
    if entries:
        session.state[SESSION_STATE_KEY] = entries
    else:
        del session.state[SESSION_STATE_KEY]


def resolve_token(
    continuation_token: Mapping[str, Any] | None,
    options: Mapping[str, Any] | None,
    session: AgentSession | None,
    agent_id: str,
) -> Any:
    """Pick the token for a resume; first match wins.

    Order: the ``continuation_token`` argument; ``options["continuation_token"]`` (core's convention
    for resumable agents); the token this agent stored in ``session`` when a run with that session
    paused.

    Returns:
        The token, or None when no source has one (the resume then fails authority).
    """
    if continuation_token is not None:
        return continuation_token
    if options is not None and options.get("continuation_token") is not None:
        return options["continuation_token"]
    return session_token(session, agent_id)
