"""FunctionalWorkflowAgent: a functional workflow exposed as a core ``BaseAgent``."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal, cast, overload

from agent_framework import (
    AgentContext,
    AgentMiddlewareLayer,
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    BaseAgent,
    CheckpointStorage,
    Message,
    ResponseStream,
    WorkflowEvent,
    normalize_messages,
)
from agent_framework.observability import OBSERVABILITY_SETTINGS, AgentTelemetryLayer
from opentelemetry import trace

from ._agent_plan import AgentResult, CallArgs, CallPlanner
from ._agent_run import AgentRunner
from ._chat import InputMapper, input_mode_for, is_chat_input
from ._core_compat import (
    agent_middleware_of,
    functional_workflows_experimental,
    middleware_pipeline,
    trace_agent_invocation,
)
from ._session import Conversations, session_token
from ._updates import REQUEST_INFO_FUNCTION_NAME, published_requests, token_tag
from ._workflow import FunctionalWorkflow

_UNSET_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_RESUME_ARGS = ("responses", "continuation_token", "checkpoint_id", "checkpoint_storage")


@functional_workflows_experimental
class FunctionalWorkflowAgent(AgentMiddlewareLayer, AgentTelemetryLayer, BaseAgent):
    """A functional workflow as a core agent that carries the continuation token.

    One agent serves every conversation (a workflow instance per session). See "Use it as an agent" in the docs.

    Args:
        workflow: The session-less conversation's instance (the template of the others).

    Keyword Args:
        id: As core's agents.
        name: As core's agents.
        description: As core's agents.
        context_providers: As core's agents.
        middleware: As core's agents.
        additional_properties: As core's agents.
        input_mapper: Maps ``list[Message]`` to the workflow input instead of the annotation rule.
        text_answers: On a session, a plain text reply answers the one pending ``str`` request.
        continuation_token_on_response: False keeps the token in the session only (a session is then required).
        max_conversations: Most paused conversations attached here (None: bounded by the pause TTL only).

    Raises:
        TypeError: ``input_mapper`` is not callable.
    """

    #: The ``function_call`` name of a surfaced ``request_info`` (as core's ``FunctionalWorkflowAgent``).
    REQUEST_INFO_FUNCTION_NAME: str = REQUEST_INFO_FUNCTION_NAME
    #: ``gen_ai.provider.name`` of the ``invoke_agent`` span, as core's ``Agent``.
    AGENT_PROVIDER_NAME: str = "microsoft.agent_framework"

    def __init__(
        self,
        workflow: FunctionalWorkflow,
        *,
        id: str | None = None,
        name: str | None = None,
        description: str | None = None,
        context_providers: Sequence[Any] | None = None,
        middleware: Sequence[Any] | None = None,
        additional_properties: dict[str, Any] | None = None,
        input_mapper: InputMapper | None = None,
        text_answers: bool = True,
        continuation_token_on_response: bool = True,
        max_conversations: int | None = None,
    ) -> None:
        if input_mapper is not None and not callable(input_mapper):
            raise TypeError(
                "'input_mapper' must be a callable that takes list[Message] and returns the workflow input."
            )
        resolved_name = name or workflow.name
        super().__init__(
            id=id or f"FunctionalWorkflowAgent_{resolved_name}",
            name=resolved_name,
            description=description if description is not None else workflow.description,
            context_providers=context_providers,
            middleware=middleware,
            additional_properties=additional_properties,
        )
        self._workflow = workflow
        self._input_mapper: InputMapper | None = input_mapper
        self.continuation_token_on_response: bool = continuation_token_on_response
        self._conversations = Conversations(workflow, self.id, max_conversations)
        mode = input_mode_for(workflow.definition.func)
        self._planner = CallPlanner(self, self._conversations, input_mapper, mode, text_answers)
        self._runner = AgentRunner(self, self._planner, self._conversations, self._run_after_providers)

    @property
    def workflow(self) -> FunctionalWorkflow:
        """The workflow instance this agent drives."""
        return self._workflow

    @property
    def continuation_ttl(self) -> float:
        """Seconds a pause stays resumable: :attr:`FunctionalWorkflow.continuation_ttl` of :attr:`workflow`."""
        return self._workflow.continuation_ttl

    @property
    def input_mapper(self) -> Callable[[list[Message]], Any] | None:
        """The explicit input mapper, or None when the workflow function's annotation decides."""
        return self._input_mapper

    @property
    def pending_requests(self) -> Mapping[str, WorkflowEvent[Any]]:
        """The session-less conversation's pending requests, keyed by the ids the agent publishes."""
        return published_requests(self._workflow.pending_requests, self._workflow.pending_tag())

    def pending_requests_for(self, session: AgentSession) -> Mapping[str, WorkflowEvent[Any]]:
        """One conversation's pending requests (published id -> event); empty if none, or paused elsewhere since."""
        workflow = self._conversations.workflow_for(session, create=False)
        tag = workflow.pending_tag() if workflow is not None else None
        stored = session_token(session, self.id)
        if workflow is None or (stored is not None and tag is not None and token_tag(stored) != tag):
            return MappingProxyType({})
        return published_requests(workflow.pending_requests, tag)

    def workflow_for(self, session: AgentSession | None) -> FunctionalWorkflow | None:
        """:attr:`workflow` without a session, else the instance attached to ``session`` (None: none)."""
        return self._conversations.workflow_for(session, create=False)

    def abandon_continuation(
        self,
        token: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
        session: AgentSession | None = None,
    ) -> None:
        """Abandon the conversation's pending continuation; see :meth:`FunctionalWorkflow.abandon_continuation`.

        Args:
            token: The current token; omitted (and not ``force``): the one stored in ``session``.

        Keyword Args:
            force: Owner-only recovery without a token; never expose it to untrusted callers.
            session: The paused conversation; its stored token is removed once abandoned.

        Raises:
            ContinuationAuthorityError: Missing or wrong token without ``force``; nothing changes.
            WorkflowRunningError: A run is in progress.
        """
        with self._conversations.abandoning(token, force, session) as (workflow, presented):
            workflow.abandon_continuation(presented, force=force)

    async def abandon_continuation_async(
        self,
        token: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
        session: AgentSession | None = None,
    ) -> None:
        """:meth:`abandon_continuation`, also in the continuation store; same arguments and errors."""
        with self._conversations.abandoning(token, force, session) as (workflow, presented):
            await workflow.abandon_continuation_async(presented, force=force)

    @overload
    def run(
        self, messages: Any | None = None, *, stream: Literal[False] = ..., **kwargs: Any
    ) -> Awaitable[AgentResponse]: ...

    @overload
    def run(
        self, messages: Any | None = None, *, stream: Literal[True], **kwargs: Any
    ) -> ResponseStream[AgentResponseUpdate, AgentResponse]: ...

    def run(
        self,
        messages: Any | None = None,
        *,
        stream: bool = False,
        session: AgentSession | None = None,
        middleware: Sequence[Any] | None = None,
        responses: Mapping[str, Any] | None = None,
        continuation_token: Mapping[str, Any] | None = None,
        checkpoint_id: str | None = None,
        checkpoint_storage: CheckpointStorage | None = None,
        options: Mapping[str, Any] | None = None,
        tools: Any | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Awaitable[AgentResponse] | ResponseStream[AgentResponseUpdate, AgentResponse]:
        """Run the workflow and answer as an agent; every check that needs no I/O raises here.

        Args:
            messages: Chat input or any value (passed as given); while paused, answer-only messages resume.

        Keyword Args:
            stream: True for a ``ResponseStream`` whose last update carries the token.
            session: The conversation: providers' state and the token of a pause live in it.
            middleware: Run-level agent middleware, after the agent's own (core's ``Agent`` order).
            responses: Answers keyed by request id, with ``continuation_token`` (or the session's).
            continuation_token: The paused response's token; overrides ``options`` and the session.
            checkpoint_id: Restore this checkpoint (needs no token).
            checkpoint_storage: Checkpoint storage for this run.
            options: Run options (``continuation_token`` read from them; given to context providers).
            tools: Forwarded to the workflow run when not None.
            function_invocation_kwargs: Forwarded like ``tools``.
            client_kwargs: Forwarded like ``tools``.
            **kwargs: Forwarded to :meth:`FunctionalWorkflow.run`.

        Raises:
            ValueError: Wrong argument shape, or an answer that matches no request or does not convert.
            TypeError: ``options`` is not a mapping; an ``input_mapper`` agent got non-chat input.
            ContinuationAuthorityError: A resume without valid authority.
            PendingContinuationError: New input or a checkpoint restore while a continuation is pending.
            WorkflowRunningError: The workflow is already running. A resume only the continuation store can
                judge raises these on the first ``await`` or iteration.
        """
        args = CallArgs(
            messages,
            stream,
            session,
            options,
            tools,
            function_invocation_kwargs,
            client_kwargs,
            responses,
            continuation_token,
            checkpoint_id,
            checkpoint_storage,
            kwargs,
        )
        return run_layered(self, self._opened, args, middleware)

    def _opened(self, args: CallArgs) -> Callable[[], AgentResult]:
        return functools.partial(self._runner.answer, self._planner.open(args))

    def run_stream(
        self, messages: Any | None = None, **kwargs: Any
    ) -> ResponseStream[AgentResponseUpdate, AgentResponse]:
        """Alias of ``run(messages, stream=True, **kwargs)``; passing ``stream`` raises ``TypeError``."""
        if "stream" in kwargs:
            raise TypeError("run_stream() always streams; call run(..., stream=False) for a single response.")
        return self.run(messages, stream=True, **kwargs)


# The raw call: decides the call (raising on a rejection) and returns what starts it.
RawCall = Callable[[CallArgs], Callable[[], Any]]


def run_layered(agent: Any, raw: RawCall, args: CallArgs, middleware: Sequence[Any] | None) -> AgentResult:
    """Run one call through core's agent middleware, then the ``invoke_agent`` span (as core's ``Agent.run``).

    Core's layers' own ``run`` would drop the resume arguments, so middleware gets them in ``AgentContext.kwargs``.
    """
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
    """Start the call inside core's ``invoke_agent`` span; skipped without a tracer provider.

    Not the layer's hooks: they tie a dropped response stream in a cycle only the garbage collector frees.
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
