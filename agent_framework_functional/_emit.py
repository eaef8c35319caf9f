"""emit_update and stream_agent: what workflow and step code call to send updates to the caller now.

Both put ``intermediate`` events on the run's live channel (``_live``); under core's own
``FunctionalWorkflow`` they fall back to core's ``ctx.add_event``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterable, Awaitable
from typing import Any, cast

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    Content,
    Message,
    ResponseStream,
    SupportsAgentRun,
    WorkflowEvent,
    get_run_context,
)

from ._errors import NotInWorkflowRunError
from ._live import live_channel

_MAX_JSON_DEPTH = 64


def _json_copy(value: Any, depth: int = 0) -> Any:
    """Return a copy of a JSON-safe value, or raise TypeError naming what is not JSON-safe."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError("emit_update() got a non-finite float (nan or infinity), which JSON cannot carry.")
        return value
    if depth >= _MAX_JSON_DEPTH:
        raise TypeError(f"emit_update() data nests deeper than {_MAX_JSON_DEPTH} levels; flatten it.")
    if isinstance(value, dict):
        return {_json_key(key): _json_copy(item, depth + 1) for key, item in cast("dict[Any, Any]", value).items()}
    if isinstance(value, (list, tuple)):
        return [_json_copy(item, depth + 1) for item in cast("list[Any]", value)]
    raise TypeError(
        f"emit_update() cannot send a {type(value).__name__}. Send text (str), a Content, an "
        "AgentResponseUpdate, or JSON-safe data (dict with str keys, list, str, int, float, bool, None); "
        "convert other objects first, e.g. model.model_dump(mode='json')."
    )


def _json_key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"emit_update() data has a {type(key).__name__} dict key; JSON keys must be str.")
    return key


async def emit_update(update: str | Content | AgentResponseUpdate | Any) -> None:
    """Send an update to the caller now, from workflow or step code (or a task they start).

    It reaches the workflow stream at once as an ``intermediate`` event, and the agent's stream as an
    ``AgentResponseUpdate``, in production order (README "Live streaming"). A streaming run holds at
    most 64 updates: a slow consumer makes this call wait, nothing is dropped. JSON data is copied;
    ``Content`` and ``AgentResponseUpdate`` are sent as they are, so do not change them afterwards.

    Replay hazard: on resume, updates emitted outside a ``@step`` are sent again; those inside a
    completed step are not.

    Args:
        update: Text, a ``Content``, an ``AgentResponseUpdate``, or JSON-safe data.

    Raises:
        TypeError: Anything else (a ``Message``, a pydantic model, a NaN float, ...); nothing is sent.
        NotInWorkflowRunError: Called outside a running workflow, or after its run ended.

    Examples:
        .. code-block:: python

            await emit_update({"stage": "research", "topic": topic})
    """
    if isinstance(update, (Message, AgentResponse)):
        raise TypeError(
            f"emit_update() cannot send a whole {type(update).__name__}: stream its parts instead (its text, "
            "its contents, or the AgentResponseUpdates of a streaming run; stream_agent() does that)."
        )
    payload = update if isinstance(update, (str, Content, AgentResponseUpdate)) else _json_copy(update)
    channel = live_channel.get()
    ctx = get_run_context()
    if channel is not None:
        await channel.put_live(WorkflowEvent("intermediate", data=payload, executor_id=channel.source), ctx)
    elif ctx is not None:
        await ctx.add_event(WorkflowEvent("intermediate", data=payload))
    else:
        raise NotInWorkflowRunError(
            "emit_update() was called outside a running workflow. Call it from a @workflow function, "
            "one of its @step functions, or a task they await, while the run is in progress."
        )


async def stream_agent(
    agent: SupportsAgentRun,
    messages: Any | None = None,
    *,
    session: Any | None = None,
    **kwargs: Any,
) -> AgentResponse:
    """Run an agent streaming, forward each update through :func:`emit_update`, return its response.

    Replay hazard: call it inside a ``@step``, so a resume returns the cached response instead of
    running and streaming the agent again. Text the run already streamed is not repeated in the
    workflow agent's answer.

    Args:
        agent: The inner agent.
        messages: Input for the agent, as its ``run`` accepts.

    Keyword Args:
        session: The inner agent's session.
        **kwargs: Forwarded unchanged to ``agent.run``.

    Returns:
        The inner agent's final ``AgentResponse``.

    Raises:
        NotInWorkflowRunError: Called outside a running workflow (before the agent is called).
        TypeError: The agent's stream is not a stream of ``AgentResponseUpdate``.
        Exception: Whatever the inner agent raises, after the updates it produced.
    """
    if live_channel.get() is None and get_run_context() is None:
        raise NotInWorkflowRunError(
            "stream_agent() was called outside a running workflow. Call it from a @workflow function or one of "
            "its @step functions while the run is in progress."
        )
    result: Any = agent.run(messages, stream=True, session=session, **kwargs)
    if not isinstance(result, (ResponseStream, AsyncIterable, AgentResponse)) and isinstance(result, Awaitable):
        result = await cast("Awaitable[Any]", result)
    if isinstance(result, AgentResponse):
        whole = cast("AgentResponse[Any]", result)
        for message in whole.messages:  # a response returned whole: one update per message
            await emit_update(
                AgentResponseUpdate(
                    contents=list(message.contents),
                    role=message.role,
                    author_name=message.author_name,
                    message_id=message.message_id,
                    response_id=whole.response_id,
                )
            )
        return whole
    if not isinstance(result, AsyncIterable):
        raise TypeError(
            f"{type(agent).__name__}.run(stream=True) returned {type(result).__name__}; stream_agent() needs a "
            "ResponseStream or an async iterable of AgentResponseUpdate."
        )
    updates = await _forward(type(agent).__name__, cast("AsyncIterable[Any]", result))
    if isinstance(result, ResponseStream):
        return await cast("ResponseStream[AgentResponseUpdate, AgentResponse]", result).get_final_response()
    return AgentResponse.from_updates(updates)


async def _forward(agent_name: str, stream: AsyncIterable[Any]) -> list[AgentResponseUpdate]:
    """Forward each update of an inner agent's stream as it arrives; close the stream if anything fails."""
    updates: list[AgentResponseUpdate] = []
    try:
        async for update in aiter(stream):
            if not isinstance(update, AgentResponseUpdate):
                raise TypeError(
                    f"{agent_name}.run(stream=True) yielded {type(update).__name__}; "
                    "stream_agent() forwards AgentResponseUpdate only."
                )
            updates.append(update)
            await emit_update(update)
    except BaseException:
        close = getattr(stream, "close" if isinstance(stream, ResponseStream) else "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):  # a failing close must not replace the failure
                await close()
        raise
    return updates
