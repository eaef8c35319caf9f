"""emit_update and stream_agent: what workflow and step code call to send updates to the caller now.

Both put ``intermediate`` events on the run's live channel (``_live``); under core's own
``FunctionalWorkflow`` (not this package's) they fall back to core's ``ctx.add_event``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Sequence
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
        return _json_dict_copy(cast("dict[Any, Any]", value), depth)
    if isinstance(value, (list, tuple)):
        return [_json_copy(item, depth + 1) for item in cast("Sequence[Any]", value)]
    raise TypeError(
        f"emit_update() cannot send a {type(value).__name__}. Send text (str), a Content, an "
        "AgentResponseUpdate, or JSON-safe data (dict with str keys, list, str, int, float, bool, None); "
        "convert other objects first, e.g. model.model_dump(mode='json')."
    )


def _json_dict_copy(value: dict[Any, Any], depth: int) -> dict[str, Any]:
    copied: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"emit_update() data has a {type(key).__name__} dict key; JSON keys must be str.")
        copied[key] = _json_copy(item, depth + 1)
    return copied


def _checked_payload(update: Any) -> Any:
    if isinstance(update, (str, Content, AgentResponseUpdate)):
        return update
    kind = type(cast(object, update)).__name__
    if isinstance(update, (Message, AgentResponse)):
        raise TypeError(
            f"emit_update() cannot send a whole {kind}: stream its parts instead (its text, "
            "its contents, or the AgentResponseUpdates of a streaming run; stream_agent() does that)."
        )
    return _json_copy(update)


async def emit_update(update: str | Content | AgentResponseUpdate | Any) -> None:
    """Send an update to the caller now, while the workflow is still running.

    Usable anywhere inside a running workflow: the workflow function, its ``@step`` functions, and
    tasks they start. In a run of :class:`~agent_framework_functional.FunctionalWorkflow`, the update
    reaches the workflow stream at once as a ``WorkflowEvent`` of type ``intermediate`` (core's type
    for visible progress; ``event.data`` is the update, ``event.executor_id`` the workflow name), and
    the stream of :class:`~agent_framework_functional.FunctionalWorkflowAgent` as an
    ``AgentResponseUpdate``: text and ``Content`` become message contents, an ``AgentResponseUpdate``
    is forwarded (restamped with the agent's response id, never carrying a continuation token), and
    JSON data rides in ``additional_properties["data"]`` with no contents.

    Rules:

    * Order: updates, ``request_info`` events and outputs reach the caller in the order the code
      produced them; events core collects are never delivered twice.
    * Backpressure (streaming runs, ``run(..., stream=True)``, which the agent adapter always
      uses): the live channel holds 64 entries per run. When the consumer is slower than the
      workflow, this call waits until there is room; nothing is dropped or buffered beyond that
      bound.
    * Non-streaming ``run()`` has no reader before the function returns: the updates are collected
      with the run's other events (as core collects its own) and the result carries the same events
      in the same order as a streaming run; ``WorkflowRunResult.get_outputs()`` is unchanged
      (updates are ``intermediate``, not ``output``).
    * Under core's own ``FunctionalWorkflow`` (not this package's), the update is added with core's
      ``ctx.add_event`` and arrives when core yields its collected events, after the function returns.
    * Replay hazard: on resume the workflow function runs again from the top, so updates emitted
      outside a ``@step`` are sent again; updates emitted inside a completed step are not (its body
      does not run again).

    JSON data is copied when emitted; ``Content`` and ``AgentResponseUpdate`` objects are sent as
    they are, so do not change them afterwards.

    Args:
        update: Text (``str``), a core ``Content``, an ``AgentResponseUpdate``, or JSON-safe data
            (``dict`` with ``str`` keys, ``list``/``tuple``, ``int``, finite ``float``, ``bool``,
            ``None``).

    Raises:
        TypeError: ``update`` is none of the above (for example a ``Message``, an ``AgentResponse``,
            a pydantic model, a NaN float, or a dict with non-string keys). Nothing is sent.
        NotInWorkflowRunError: Called outside a running workflow, or after the run it belongs to ended
            (also a ``RuntimeError``).
            Outside a workflow there is no caller to send to, and dropping the update silently would
            hide the mistake.

    Examples:
        .. code-block:: python

            from agent_framework_functional import emit_update, step, workflow


            @step
            async def research(topic: str) -> list[str]:
                await emit_update({"stage": "research", "topic": topic})
                return [f"fact about {topic}"]


            @workflow
            async def report(topic: str) -> str:
                facts = await research(topic)
                await emit_update("Writing the report...")
                return f"{topic}: {facts[0]}"
    """
    payload = _checked_payload(update)
    channel = live_channel.get()
    ctx = get_run_context()
    if channel is None:
        if ctx is None:
            raise NotInWorkflowRunError(
                "emit_update() was called outside a running workflow. Call it from a @workflow function, "
                "one of its @step functions, or a task they await, while the run is in progress."
            )
        await ctx.add_event(WorkflowEvent("intermediate", data=payload))
        return
    await channel.put_live(WorkflowEvent("intermediate", data=payload, executor_id=channel.source), ctx)


def _require_running(name: str) -> None:
    if live_channel.get() is None and get_run_context() is None:
        raise NotInWorkflowRunError(
            f"{name}() was called outside a running workflow. Call it from a @workflow function or one of "
            "its @step functions while the run is in progress."
        )


async def stream_agent(
    agent: SupportsAgentRun,
    messages: Any | None = None,
    *,
    session: Any | None = None,
    **kwargs: Any,
) -> AgentResponse:
    """Run an agent in streaming mode, forward each of its updates live, and return its final response.

    Works with anything that satisfies core's agent protocol (``SupportsAgentRun``): core's
    ``Agent``, a ``BaseAgent`` subclass, another workflow's agent. Each ``AgentResponseUpdate`` goes
    through :func:`emit_update` as it arrives, so the caller of the workflow sees the agent write.

    Call it inside a ``@step`` so that a resumed run returns the step's cached ``AgentResponse``
    without calling the agent again or re-sending its updates (core replays completed steps).
    Outside a step it runs again, and streams again, on every replay.

    The agent adapter does not repeat text the run already streamed: returning the response (or its
    ``.text``) from the workflow adds no second copy to the agent's answer (see
    :class:`~agent_framework_functional.FunctionalWorkflowAgent`).

    Args:
        agent: The inner agent.
        messages: Input for the agent, as its ``run`` accepts.

    Keyword Args:
        session: The inner agent's session, passed as ``session=``.
        **kwargs: Forwarded unchanged to ``agent.run`` (for example ``function_invocation_kwargs``
            or ``client_kwargs``).

    Returns:
        The inner agent's final ``AgentResponse`` (``get_final_response()`` of its stream; built
        with ``AgentResponse.from_updates`` when the agent returns a plain async iterable).

    Raises:
        NotInWorkflowRunError: Called outside a running workflow (checked before the agent is called;
            also a ``RuntimeError``).
        TypeError: The agent's streaming run returned neither a ``ResponseStream``, an async
            iterable of updates, nor an ``AgentResponse``, or it yielded something that is not an
            ``AgentResponseUpdate``.
        Exception: Whatever the inner agent raises, after the updates it produced before failing.

    Examples:
        .. code-block:: python

            @step
            async def answer(question: str) -> str:
                response = await stream_agent(writer_agent, question)
                return response.text
    """
    _require_running("stream_agent")
    result: Any = agent.run(messages, stream=True, session=session, **kwargs)
    if not isinstance(result, (ResponseStream, AsyncIterable, AgentResponse)) and isinstance(result, Awaitable):
        result = await cast("Awaitable[Any]", result)
    if isinstance(result, AgentResponse):
        return await _emit_whole(cast("AgentResponse[Any]", result))
    if not isinstance(result, AsyncIterable):
        raise TypeError(
            f"{type(agent).__name__}.run(stream=True) returned {type(result).__name__}; stream_agent() needs a "
            "ResponseStream or an async iterable of AgentResponseUpdate."
        )
    updates = await _forward(type(agent).__name__, cast("AsyncIterable[Any]", result))
    if isinstance(result, ResponseStream):
        return await cast("ResponseStream[AgentResponseUpdate, AgentResponse]", result).get_final_response()
    return AgentResponse.from_updates(updates)


async def _emit_whole(whole: AgentResponse[Any]) -> AgentResponse[Any]:
    """Forward a response an agent returned whole, one update per message; return it."""
    for message in whole.messages:
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


async def _forward(agent_name: str, stream: AsyncIterable[Any]) -> list[AgentResponseUpdate]:
    """Forward each update of an inner agent's stream as it arrives; close the stream if anything fails."""
    updates: list[AgentResponseUpdate] = []
    iterator: AsyncIterator[Any] = aiter(stream)
    try:
        async for update in iterator:
            if not isinstance(update, AgentResponseUpdate):
                raise TypeError(
                    f"{agent_name}.run(stream=True) yielded {type(update).__name__}; "
                    "stream_agent() forwards AgentResponseUpdate only."
                )
            updates.append(update)
            await emit_update(update)
    except BaseException:
        await _close_inner(cast(object, stream))
        raise
    return updates


async def _close_inner(stream: object) -> None:
    """Close an inner agent's stream after a failure; a failing close must not replace that failure."""
    close = getattr(stream, "close" if isinstance(stream, ResponseStream) else "aclose", None)
    if close is None:
        return
    with contextlib.suppress(Exception):
        await close()
