"""Core's agent layers around one agent call: agent middleware, then the ``invoke_agent`` span.

The agent inherits core's ``AgentMiddlewareLayer`` and ``AgentTelemetryLayer`` for their state and
helpers, not their ``run`` (which would drop ``responses``, ``continuation_token``, ``checkpoint_id``,
``checkpoint_storage`` and workflow run keyword arguments): :func:`run_layered` applies them in core's
order and hands those extras to middleware in ``AgentContext.kwargs``. Without middleware a rejected
call raises at ``run(...)``; with it, on the first ``await`` or iteration (core's behaviour).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from agent_framework import (
    AgentContext,
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    Content,
    Message,
    ResponseStream,
    normalize_messages,
)
from agent_framework.observability import OBSERVABILITY_SETTINGS
from opentelemetry import trace

from ._core_compat import agent_middleware_of, middleware_pipeline, trace_agent_invocation

_UNSET_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
AgentResult = Awaitable[AgentResponse] | ResponseStream[AgentResponseUpdate, AgentResponse]


@dataclass(frozen=True)
class LayeredCall:
    """One agent call's arguments as they pass core's layers (agent middleware may replace each of them).

    ``extras`` holds the resume arguments and workflow run keyword arguments (``AgentContext.kwargs``).
    """

    messages: Any
    stream: bool
    session: AgentSession | None
    options: Mapping[str, Any] | None
    tools: Any
    function_invocation_kwargs: Mapping[str, Any] | None
    client_kwargs: Mapping[str, Any] | None
    extras: dict[str, Any]


# The raw call: plans the call (raising on a rejection) and returns what starts it.
RawCall = Callable[[LayeredCall], Callable[[], Any]]


def is_chat_input(messages: Any) -> bool:
    """True for what core's agents take as messages (``str``, ``Message``, ``Content`` or a list of them)."""
    if isinstance(messages, (str, Message, Content)):
        return True
    items = cast("list[Any]", messages) if isinstance(messages, list) else None
    return items is not None and all(isinstance(item, (str, Message, Content)) for item in items)


def run_layered(agent: Any, raw: RawCall, call: LayeredCall, middleware: Sequence[Any] | None) -> AgentResult:
    """Run one agent call through core's agent middleware and telemetry layers (as core's ``Agent.run``).

    ``raw`` plans the call (raising on a rejection) and returns what starts it; ``call.extras`` (the
    resume arguments and workflow run keyword arguments) reach middleware as ``AgentContext.kwargs``.
    """
    chain = agent_middleware_of(agent.middleware, middleware)
    if not chain:
        return _traced(agent, raw(call), call, call.client_kwargs)
    messages = call.messages
    chat = is_chat_input(messages) or messages is None
    given = normalize_messages(messages) if chat else []
    seen = list(given)
    context = AgentContext(
        agent=agent,
        messages=given,
        session=call.session,
        tools=call.tools,
        options=call.options,
        stream=call.stream,
        kwargs=call.extras,
        client_kwargs=call.client_kwargs,
        function_invocation_kwargs=call.function_invocation_kwargs,
    )

    def final_handler(context: AgentContext) -> AgentResult:
        unchanged = (
            context.messages is given
            and len(given) == len(seen)
            and all(a is b for a, b in zip(given, seen, strict=True))
        )
        # Input middleware did not touch reaches the workflow as the caller gave it (a str stays a str).
        layered = LayeredCall(
            messages if unchanged or not chat else context.messages,
            context.stream,
            context.session,
            context.options,
            context.tools,
            context.function_invocation_kwargs or None,
            context.client_kwargs or None,
            dict(context.kwargs),
        )
        return _traced(agent, raw(layered), layered, call.client_kwargs)

    pipeline = middleware_pipeline(agent, chain)
    if not call.stream:
        return cast("Awaitable[AgentResponse]", pipeline.execute(context=context, final_handler=final_handler))

    async def resolve() -> ResponseStream[AgentResponseUpdate, AgentResponse]:
        result = await pipeline.execute(context=context, final_handler=final_handler)
        if result is None:  # a middleware stopped the call without a result: an empty stream, as core
            return ResponseStream(_nothing(), finalizer=AgentResponse.from_updates)
        if isinstance(result, ResponseStream):
            return cast("ResponseStream[AgentResponseUpdate, AgentResponse]", result)
        raise ValueError("Agent middleware of a streaming call must leave a ResponseStream as context.result.")

    return ResponseStream[AgentResponseUpdate, AgentResponse].from_awaitable(resolve())


def _traced(
    agent: Any, start: Callable[[], Any], call: LayeredCall, client_kwargs: Mapping[str, Any] | None
) -> AgentResult:
    """Start the call inside core's ``invoke_agent`` span (core's instrumentation on and a tracer provider set).

    The span records ``client_kwargs`` as the caller passed them to ``run``.

    Without a tracer provider the span could not record; skipping it also keeps a dropped response
    stream free of the layer's hooks, which reference the stream (a cycle only the garbage collector
    frees), so the workflow is freed the moment the stream is dropped.
    """
    if not OBSERVABILITY_SETTINGS.ENABLED or isinstance(trace.get_tracer_provider(), _UNSET_PROVIDERS):
        return cast("AgentResult", start())
    return cast(
        "AgentResult",
        trace_agent_invocation(
            agent,
            messages=call.messages if is_chat_input(call.messages) else None,
            session=call.session,
            merged_options=dict(call.options or {}),
            client_kwargs=dict(client_kwargs or {}),
            stream=call.stream,
            execute=start,
        ),
    )


async def _nothing() -> Any:
    return
    yield  # pragma: no cover - makes this an async generator
