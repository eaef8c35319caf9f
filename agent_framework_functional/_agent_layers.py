"""Core's agent layers around one agent call: agent middleware, then the ``invoke_agent`` span.

Core's layers' own ``run`` would drop the resume arguments: :func:`run_layered` applies them in core's order
and hands those to middleware in ``AgentContext.kwargs``. With middleware a rejected call raises on the
first ``await`` or iteration (core's behaviour), else at ``run(...)``.
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
    CheckpointStorage,
    ResponseStream,
    normalize_messages,
)
from agent_framework.observability import OBSERVABILITY_SETTINGS
from opentelemetry import trace

from ._chat import is_chat_input
from ._core_compat import agent_middleware_of, middleware_pipeline, trace_agent_invocation

_UNSET_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_RESUME_ARGS = ("responses", "continuation_token", "checkpoint_id", "checkpoint_storage")
AgentResult = Awaitable[AgentResponse] | ResponseStream[AgentResponseUpdate, AgentResponse]


@dataclass(frozen=True, slots=True)
class CallArgs:
    """One agent call's arguments, packed once by ``run`` (agent middleware may replace each of them)."""

    messages: Any
    stream: bool
    session: AgentSession | None
    options: Mapping[str, Any] | None
    tools: Any
    function_invocation_kwargs: Mapping[str, Any] | None
    client_kwargs: Mapping[str, Any] | None
    responses: Mapping[str, Any] | None
    continuation_token: Mapping[str, Any] | None
    checkpoint_id: str | None
    checkpoint_storage: CheckpointStorage | None
    run_kwargs: dict[str, Any]  # run's other keyword arguments, for the workflow run

    def workflow_kwargs(self) -> dict[str, Any]:
        given = {
            "tools": self.tools,
            "function_invocation_kwargs": self.function_invocation_kwargs,
            "client_kwargs": self.client_kwargs,
        }
        return {**{name: value for name, value in given.items() if value is not None}, **self.run_kwargs}


# The raw call: decides the call (raising on a rejection) and returns what starts it.
RawCall = Callable[[CallArgs], Callable[[], Any]]


def run_layered(agent: Any, raw: RawCall, args: CallArgs, middleware: Sequence[Any] | None) -> AgentResult:
    """Run one agent call through core's agent middleware and telemetry layers (as core's ``Agent.run``)."""
    chain = agent_middleware_of(agent.middleware, middleware)
    if not chain:
        return _traced(agent, raw(args), args, args.client_kwargs)
    messages = args.messages
    chat = is_chat_input(messages) or messages is None
    given = normalize_messages(messages) if chat else []
    seen = list(given)
    context = AgentContext(
        agent=agent,
        messages=given,
        session=args.session,
        tools=args.tools,
        options=args.options,
        stream=args.stream,
        kwargs={
            "responses": args.responses,
            "continuation_token": args.continuation_token,
            "checkpoint_id": args.checkpoint_id,
            "checkpoint_storage": args.checkpoint_storage,
            **args.run_kwargs,
        },
        client_kwargs=args.client_kwargs,
        function_invocation_kwargs=args.function_invocation_kwargs,
    )

    def final_handler(context: AgentContext) -> AgentResult:
        unchanged = (
            context.messages is given
            and len(given) == len(seen)
            and all(a is b for a, b in zip(given, seen, strict=True))
        )
        kwargs = dict(context.kwargs)
        # Input middleware did not touch reaches the workflow as the caller gave it (a str stays a str).
        layered = CallArgs(
            messages if unchanged or not chat else context.messages,
            context.stream,
            context.session,
            context.options,
            context.tools,
            context.function_invocation_kwargs or None,
            context.client_kwargs or None,
            *(kwargs.pop(name, None) for name in _RESUME_ARGS),
            run_kwargs=kwargs,
        )
        return _traced(agent, raw(layered), layered, args.client_kwargs)

    pipeline = middleware_pipeline(agent, chain)
    if not args.stream:
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
    agent: Any, start: Callable[[], Any], args: CallArgs, client_kwargs: Mapping[str, Any] | None
) -> AgentResult:
    """Start the call inside core's ``invoke_agent`` span, skipped without a tracer provider.

    (The layer's hooks would tie a dropped response stream in a cycle only the garbage collector frees.)
    """
    if not OBSERVABILITY_SETTINGS.ENABLED or isinstance(trace.get_tracer_provider(), _UNSET_PROVIDERS):
        return cast("AgentResult", start())
    return cast(
        "AgentResult",
        trace_agent_invocation(
            agent,
            messages=args.messages if is_chat_input(args.messages) else None,
            session=args.session,
            merged_options=dict(args.options or {}),
            client_kwargs=dict(client_kwargs or {}),
            stream=args.stream,
            execute=start,
        ),
    )


async def _nothing() -> Any:
    return
    yield  # pragma: no cover - makes this an async generator
