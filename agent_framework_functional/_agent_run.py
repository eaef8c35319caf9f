"""Running one accepted agent call of FunctionalWorkflowAgent: providers, the workflow run as updates, the session.

:class:`AgentRunner` runs a :class:`~._agent_plan.RunPlan` that ``_agent_plan.CallPlanner`` accepted:
it finishes a deferred acceptance (the store read) before anything else, runs the context providers
before and after the workflow run (as core's graph ``WorkflowAgent`` does), converts the workflow's
events with ``_updates.UpdateConverter``, puts the token on the last update and settles the session
(its stored token equal to the live one). Both agent run modes use it: streaming yields its updates,
non-streaming folds them (:meth:`AgentRunner.respond`).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping
from typing import TYPE_CHECKING, Any

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    HistoryProvider,
    InMemoryHistoryProvider,
    SessionContext,
    WorkflowEvent,
)

from ._agent_plan import CallPlanner, RunPlan
from ._chat import map_input
from ._continuation import FunctionalWorkflowContinuationToken
from ._core_compat import set_context_response
from ._session import clear_session_token, session_token, store_session_token
from ._updates import UpdateConverter
from ._workflow import FunctionalWorkflowRunResult, authority_of

if TYPE_CHECKING:
    from ._agent import FunctionalWorkflowAgent


def drop_workflow_stream(plan: RunPlan) -> None:
    """Weak finalizer of an agent stream: let go of the workflow stream it was driving."""
    plan.workflow_stream = None


async def close_workflow_stream(plan: RunPlan) -> None:
    """Cleanup hook of an agent stream: close the workflow stream it holds, if any is left."""
    plan.closed = True
    workflow_stream, plan.workflow_stream = plan.workflow_stream, None
    if workflow_stream is not None:
        await workflow_stream.close()


async def _next_event(plan: RunPlan) -> WorkflowEvent[Any]:
    """The next workflow event; returns before the caller yields, so it keeps no reference."""
    assert plan.workflow_stream is not None
    return await plan.workflow_stream.__anext__()


async def _final_token(plan: RunPlan) -> FunctionalWorkflowContinuationToken | None:
    """The finished workflow run's continuation token (None unless it paused)."""
    assert plan.workflow_stream is not None
    run_result: FunctionalWorkflowRunResult = await plan.workflow_stream.get_final_response()
    return run_result.continuation_token


class AgentRunner:
    """Runs the accepted calls of one :class:`FunctionalWorkflowAgent` (internal).

    Args:
        agent: The agent it serves (its id, name and context providers).
        planner: The agent's :class:`~._agent_plan.CallPlanner` (deferred acceptance, the conversations'
            instances, the session-less conversation's answers so far).
    """

    def __init__(self, agent: FunctionalWorkflowAgent, planner: CallPlanner) -> None:
        self.agent = agent
        self.planner = planner

    # ------------------------------------------------------------------ run (shared by both modes)

    async def respond(self, plan: RunPlan, response_id: str) -> AgentResponse:
        updates = [update async for update in self.updates(plan, response_id)]
        response = AgentResponse.from_updates(updates)
        response.response_id = response_id
        response.agent_id = self.agent.id
        return response

    async def updates(self, plan: RunPlan, response_id: str) -> AsyncIterable[AgentResponseUpdate]:
        """Providers before, the workflow's events as updates, session bookkeeping, providers after.

        Approval requests are held until the run ended and its token is stored in the session (the
        pause is saved before the token is issued), so a caller that stops reading at the approval
        request can still answer it. The token update comes last (nothing may follow it: core's
        ``from_updates`` keeps the last update's token), so the after-run providers see the full
        response before it is yielded. The workflow stream lives only in ``plan`` (no local holds it
        across a ``yield``), so a dropped agent stream releases the workflow run at once.
        """
        token: FunctionalWorkflowContinuationToken | None = None
        finished = False
        updates: list[AgentResponseUpdate] = []
        held: list[AgentResponseUpdate] = []
        converter = UpdateConverter(author_name=self.agent.name, agent_id=self.agent.id, response_id=response_id)
        if plan.closed:
            return  # closed before it was iterated: its run was released, so start nothing
        if plan.deferred is not None:
            # A rejection raises here, before providers, the workflow or the session are touched.
            try:
                await self.planner.accept_deferred(plan, plan.deferred)
            except BaseException:
                if not plan.was_live:
                    self.planner.release(plan.session, plan.workflow)  # a rejected call leaves no instance behind
                raise
        try:
            provider_session, context = await self._before_run(plan)
            if plan.workflow_stream is None:
                conversation = context.get_messages(include_input=True)
                planner = self.planner
                workflow_input = map_input(
                    planner.input_mode, plan.raw_input, plan.input_messages, conversation, planner.input_mapper
                )
                plan.workflow_stream = plan.workflow.run(
                    workflow_input, stream=True, checkpoint_storage=plan.checkpoint_storage, **plan.run_kwargs
                )
            while True:
                try:
                    event = await _next_event(plan)
                except StopAsyncIteration:
                    break
                for update in converter.convert(event):
                    updates.append(update)
                    if event.type == "request_info":
                        held.append(update)
                    else:
                        yield update
            token = await _final_token(plan)
            finished = True
        finally:
            workflow_stream, plan.workflow_stream = plan.workflow_stream, None
            if workflow_stream is not None and not finished:
                await workflow_stream.close()
            # Dropping the last reference lets an unstarted run hand its claim back right away.
            del workflow_stream
            await self._settle_session(plan, token)
            self.planner.release(plan.session, plan.workflow)
        final_update = converter.token_update(token) if token is not None else None
        if final_update is not None:
            updates.append(final_update)
        set_context_response(context, AgentResponse.from_updates(updates))
        await self.agent._run_after_providers(session=provider_session, context=context)  # pyright: ignore[reportPrivateUsage]
        for update in held:
            yield update
        if final_update is not None and self.agent.continuation_token_on_response:
            yield final_update

    async def _before_run(self, plan: RunPlan) -> tuple[AgentSession | None, SessionContext]:
        """Run the context providers' ``before_run`` exactly as core's graph ``WorkflowAgent`` does."""
        if plan.session is not None and not any(
            provider.load_messages for provider in self.agent.context_providers if isinstance(provider, HistoryProvider)
        ):
            self.agent.context_providers.append(InMemoryHistoryProvider())
        provider_session = plan.session
        if provider_session is None and self.agent.context_providers:
            provider_session = AgentSession()
        context = SessionContext(
            session_id=provider_session.session_id if provider_session else None,
            service_session_id=provider_session.service_session_id if provider_session else None,
            input_messages=list(plan.input_messages),
            options=dict(plan.options),
        )
        for provider in self.agent.context_providers:
            if isinstance(provider, HistoryProvider) and not provider.load_messages:
                continue
            assert provider_session is not None
            await provider.before_run(
                agent=self.agent,
                session=provider_session,
                context=context,
                state=provider_session.state.setdefault(provider.source_id, {}),
            )
        return provider_session, context

    async def _settle_session(self, plan: RunPlan, token: Mapping[str, Any] | None) -> None:
        """Keep the conversation's stored token and answers equal to the live pause (stored, or removed).

        With a continuation store "live" is the store's view, so a token spent or abandoned in any
        process is removed, and a token of a pause held by another process is kept while it is valid.
        """
        session = plan.session
        if session is None:
            if token is not None:
                self.planner.answers_so_far, self.planner.answers_token = plan.answers, dict(token)
            elif not plan.workflow.has_pending_continuation:
                self.planner.forget_answers()
            return
        if token is not None:
            store_session_token(session, self.agent.id, token, plan.answers)
            return
        stored = session_token(session, self.agent.id)
        if stored is None:
            return
        try:
            current = await authority_of(plan.workflow).is_resumable(stored)
        except Exception:  # store unreadable: keep the token; a resume checks it again anyway
            current = True
        if not current:
            clear_session_token(session, self.agent.id)
