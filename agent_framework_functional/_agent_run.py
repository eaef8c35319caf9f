"""Running one agent call of FunctionalWorkflowAgent: providers, events as updates, the session written.

The context providers run around the workflow run (as core's graph ``WorkflowAgent``); approval requests and
the token come last, after the session is written. Non-streaming folds the same updates.
"""

from __future__ import annotations

import functools
import uuid
import weakref
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from typing import Any

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    HistoryProvider,
    InMemoryHistoryProvider,
    ResponseStream,
    SessionContext,
    WorkflowEvent,
)

from ._agent_plan import AgentCall, AgentResult, AgentView, CallPlanner, Fresh
from ._continuation import FunctionalWorkflowContinuationToken
from ._core_compat import set_context_response
from ._session import Conversations, clear_session_token, session_token, store_session_token
from ._updates import UpdateConverter, token_tag
from ._workflow import FunctionalWorkflowRunResult

AfterProviders = Callable[..., Awaitable[None]]  # core's BaseAgent._run_after_providers, handed in by the agent


def _drop_workflow_stream(call: AgentCall) -> None:
    call.workflow_stream = None


async def _close_workflow_stream(call: AgentCall) -> None:
    call.closed = True
    workflow_stream, call.workflow_stream = call.workflow_stream, None
    if workflow_stream is not None:
        await workflow_stream.close()


async def _next_event(call: AgentCall) -> WorkflowEvent[Any] | None:
    """The next workflow event (None at the end), held by no frame across the caller's ``yield``."""
    assert call.workflow_stream is not None
    try:
        return await call.workflow_stream.__anext__()
    except StopAsyncIteration:
        return None


class _Reply:
    """The updates of one call, the approval requests kept for the end."""

    __slots__ = ("converter", "paused_on", "requests", "updates")

    def __init__(self, converter: UpdateConverter) -> None:
        self.converter = converter
        self.updates: list[AgentResponseUpdate] = []
        self.requests: list[AgentResponseUpdate] = []
        self.paused_on: list[WorkflowEvent[Any]] = []

    def add(self, event: WorkflowEvent[Any]) -> list[AgentResponseUpdate]:
        """Convert ``event``; returns the updates to yield now (approval requests wait)."""
        if event.type == "request_info":
            self.paused_on.append(event)  # converted once the pause's token, and so its ids, are known
            return []
        converted = self.converter.convert(event)
        self.updates.extend(converted)
        return converted

    def publish(self, token: Mapping[str, Any] | None) -> None:
        tag = token_tag(token) if token is not None else None
        for event in self.paused_on:
            self.requests.extend(self.converter.convert(event, tag))
        self.updates.extend(self.requests)


class AgentRunner:
    """Runs the calls of one agent."""

    def __init__(
        self, agent: AgentView, planner: CallPlanner, conversations: Conversations, after_providers: AfterProviders
    ) -> None:
        self.agent = agent
        self.planner = planner
        self.conversations = conversations
        self.after_providers = after_providers

    def answer(self, call: AgentCall) -> AgentResult:
        response_id = uuid.uuid4().hex
        if not call.args.stream:
            return self.respond(call, response_id)
        agent_stream: ResponseStream[AgentResponseUpdate, AgentResponse] = ResponseStream(
            self.updates(call, response_id),
            finalizer=AgentResponse.from_updates,
            # close() before iterating closes the workflow stream too (an unstarted resume hands its claim back).
            cleanup_hooks=[functools.partial(_close_workflow_stream, call)],
        )
        # Only the agent stream keeps the workflow stream alive: dropping it unfinished frees the instance at
        # once (the weak finalizer), instead of waiting for the event loop to close the abandoned generator.
        weakref.finalize(agent_stream, _drop_workflow_stream, call).atexit = False
        return agent_stream

    async def respond(self, call: AgentCall, response_id: str) -> AgentResponse:
        updates = [update async for update in self.updates(call, response_id)]
        response = AgentResponse.from_updates(updates)
        response.response_id = response_id
        response.agent_id = self.agent.id
        return response

    async def updates(self, call: AgentCall, response_id: str) -> AsyncIterable[AgentResponseUpdate]:
        """Providers before, events as updates, session written, providers after, requests and token.

        No local holds the workflow stream across a ``yield``: dropping the agent stream frees the run.
        """
        if call.closed:
            return  # closed before it was iterated: its run was freed, so start nothing
        if call.decision is None:
            await self.planner.decide_in_run(call)
        reply = _Reply(UpdateConverter(author_name=self.agent.name, agent_id=self.agent.id, response_id=response_id))
        token: FunctionalWorkflowContinuationToken | None = None
        try:
            provider_session, context = await self._before_run(call)
            if call.workflow_stream is None:
                call.workflow_stream = self.planner.start(call, context.get_messages(include_input=True))
            while (event := await _next_event(call)) is not None:
                for update in reply.add(event):
                    yield update
            run_result: FunctionalWorkflowRunResult = await call.workflow_stream.get_final_response()
            call.workflow_stream, token = None, run_result.continuation_token
        finally:
            await _close_workflow_stream(call)  # its frame gone, an unstarted run hands its claim back at once
            await self._write_session(call, token)
            self.conversations.detach_idle(call.session, call.workflow)
        for update in await self._after_run(reply, token, provider_session, context):
            yield update

    async def _before_run(self, call: AgentCall) -> tuple[AgentSession | None, SessionContext]:
        providers = self.agent.context_providers
        session = call.session
        if session is not None and not any(p.load_messages for p in providers if isinstance(p, HistoryProvider)):
            providers.append(InMemoryHistoryProvider())
        provider_session = session if session is not None or not providers else AgentSession()
        context = SessionContext(
            session_id=provider_session.session_id if provider_session else None,
            service_session_id=provider_session.service_session_id if provider_session else None,
            input_messages=list(call.input_messages),
            options=dict(call.options),
        )
        for provider in providers:
            if isinstance(provider, HistoryProvider) and not provider.load_messages:
                continue
            assert provider_session is not None
            state = provider_session.state.setdefault(provider.source_id, {})
            await provider.before_run(agent=self.agent, session=provider_session, context=context, state=state)
        return provider_session, context

    async def _after_run(
        self,
        reply: _Reply,
        token: FunctionalWorkflowContinuationToken | None,
        provider_session: AgentSession | None,
        context: SessionContext,
    ) -> list[AgentResponseUpdate]:
        """Providers see the full response; returns what is yielded last."""
        reply.publish(token)
        final_update = reply.converter.token_update(token) if token is not None else None
        if final_update is not None:
            reply.updates.append(final_update)
        set_context_response(context, AgentResponse.from_updates(reply.updates))
        await self.after_providers(session=provider_session, context=context)
        if final_update is not None and self.agent.continuation_token_on_response:
            return [*reply.requests, final_update]
        return reply.requests

    async def _write_session(self, call: AgentCall, token: Mapping[str, Any] | None) -> None:
        """Keep the conversation's stored token and answers equal to its resumable pause (the store's view)."""
        session, decision = call.session, call.decision
        answers = decision.answers if decision is not None and not isinstance(decision, Fresh) else {}
        if session is None:
            if token is not None or not call.workflow.has_pending_continuation:
                self.conversations.remember_answers(answers, token)
            return
        if token is not None:
            store_session_token(session, self.agent.id, token, answers)
            return
        stored = session_token(session, self.agent.id)
        if stored is None:
            return
        if isinstance(decision, Fresh):  # the rules ran fresh over it: it names no pause to keep
            clear_session_token(session, self.agent.id)
            return
        try:
            resumable = await call.workflow.token_is_resumable(stored)
        except Exception:  # store unreadable: keep the token; a resume checks it again anyway
            resumable = True
        if not resumable:
            clear_session_token(session, self.agent.id)
