"""One agent call of FunctionalWorkflowAgent: acceptance, the workflow run as updates, providers, session.

:class:`AgentRunner` is owned by one agent. :meth:`AgentRunner.plan` decides synchronously whether a
call is a chat-native resume, an explicit resume or restore, or a fresh run, and raises at the
call site for every rejection; :meth:`AgentRunner.updates` then runs the context providers before
and after the workflow run (as core's graph ``WorkflowAgent`` does), converts the workflow's events
with ``_updates.UpdateConverter`` and keeps the session's stored token equal to the live one. Both
agent run modes use it: streaming yields its updates, non-streaming folds them (:meth:`respond`).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    CheckpointStorage,
    Content,
    HistoryProvider,
    InMemoryHistoryProvider,
    Message,
    ResponseStream,
    SessionContext,
    WorkflowEvent,
)

from ._authority import VerifiedContinuation
from ._chat import (
    InputMapper,
    InputMode,
    answer_contents,
    chat_messages,
    check_authority,
    has_other_contents,
    is_chat_input,
    map_input,
)
from ._chat import (
    answers_to_responses as _answers_to_responses,
)
from ._continuation import FunctionalWorkflowContinuationToken
from ._core_compat import set_context_response
from ._errors import AGENT_PENDING_CONTINUATION_MESSAGE, PendingContinuationError, WorkflowRunningError
from ._session import clear_session_token, resolve_token, session_token, store_session_token
from ._updates import UpdateConverter
from ._workflow import FunctionalWorkflow, FunctionalWorkflowRunResult, authority_of

if TYPE_CHECKING:
    from ._agent import FunctionalWorkflowAgent


@dataclass(slots=True)
class RunPlan:
    """An accepted agent call (internal): everything the async part needs, decided synchronously."""

    raw_input: Any
    input_messages: list[Message]
    session: AgentSession | None
    options: dict[str, Any]
    checkpoint_storage: CheckpointStorage | None
    run_kwargs: dict[str, Any] = field(default_factory=dict[str, Any])
    # Every answer this run gives the workflow, remembered if it pauses again (see _answers_so_far).
    answers: dict[str, Any] = field(default_factory=dict[str, Any])
    # Started at call time (so the workflow's own checks raise there) unless the workflow input
    # is the conversation, which needs the context providers' messages first.
    workflow_stream: ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] | None = None
    # Set when the agent stream was closed: iterating it afterwards must run nothing.
    closed: bool = False
    # A chat-native resume whose token this process does not hold: verified in the store in the run.
    deferred_resume: _DeferredResume | None = None


@dataclass(frozen=True, slots=True)
class _DeferredResume:
    """A chat-native resume to accept inside the run, after the store vouched for its token (internal)."""

    token: Any
    answers: list[Content]
    only_answers: bool


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
    """The call machinery of one :class:`FunctionalWorkflowAgent` (internal).

    Args:
        agent: The agent it serves (its id, name and context providers).
        workflow: The workflow instance the agent drives.
        input_mapper: The agent's explicit input mapper, if any.
        input_mode: What the workflow function's message parameter receives (``_chat.input_mode_for``).
    """

    def __init__(
        self,
        agent: FunctionalWorkflowAgent,
        workflow: FunctionalWorkflow,
        input_mapper: InputMapper | None,
        input_mode: InputMode,
    ) -> None:
        self.agent = agent
        self.workflow = workflow
        self.input_mapper = input_mapper
        self.input_mode: InputMode = input_mode
        # Core replays from the top and forgets answers to earlier request_info calls, so a
        # chat-native resume (which carries only the new answers, as orchestrations send them)
        # adds the answers given so far in this run. Valid only with the token they paused with.
        self.answers_so_far: dict[str, Any] = {}
        self.answers_token: dict[str, Any] | None = None

    def forget_answers(self) -> None:
        """Drop the remembered answers (the continuation was abandoned)."""
        self.answers_so_far, self.answers_token = {}, None

    # ------------------------------------------------------------------ acceptance (synchronous)

    def plan(
        self,
        messages: Any,
        *,
        session: AgentSession | None,
        responses: Mapping[str, Any] | None,
        continuation_token: Mapping[str, Any] | None,
        checkpoint_id: str | None,
        checkpoint_storage: CheckpointStorage | None,
        options: Mapping[str, Any] | None,
        run_kwargs: dict[str, Any],
    ) -> RunPlan:
        """Accept or reject the call, in the workflow's contract order, before anything runs."""
        if options is not None and not isinstance(options, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError("'options' must be a mapping of run options, for example {'continuation_token': token}.")
        input_messages = chat_messages(messages)
        plan = RunPlan(
            raw_input=messages,
            input_messages=input_messages,
            session=session,
            options=dict(options or {}),
            checkpoint_storage=checkpoint_storage,
            run_kwargs=run_kwargs,
        )
        answers = answer_contents(input_messages) if responses is None and checkpoint_id is None else []
        only_answers = bool(answers) and not has_other_contents(input_messages)
        if answers and (only_answers or self.workflow.has_pending_continuation):
            # Chat-native resume: authority first, then the answers (nothing leaks without the token).
            token = resolve_token(continuation_token, options, session, self.agent.id)
            verified = check_authority(self.workflow, token)
            if verified is None:
                # A pause held in a continuation store, not here. The store lookup is asynchronous, so
                # authority, conflict and the answers are checked in the run, in the same order.
                plan.deferred_resume = _DeferredResume(token=token, answers=answers, only_answers=only_answers)
                return plan
            self._start_chat_resume(plan, verified, answers, only_answers)
            return plan
        if responses is not None or checkpoint_id is not None:
            # Explicit resume or checkpoint restore: the workflow runs every check at this call.
            token = (
                resolve_token(continuation_token, options, session, self.agent.id)
                if responses is not None and checkpoint_id is None
                else continuation_token
            )
            plan.answers = dict(responses) if isinstance(responses, Mapping) else {}
            plan.workflow_stream = self.workflow.run(
                messages,
                stream=True,
                responses=responses,
                continuation_token=token,
                checkpoint_id=checkpoint_id,
                checkpoint_storage=checkpoint_storage,
                **run_kwargs,
            )
            return plan
        # Fresh run. Apply the workflow's acceptance rules for new input here: when the input does
        # not depend on the context providers the workflow run starts right away (its own checks
        # raise here too); otherwise it starts after the providers added their messages.
        if messages is None:
            raise ValueError(
                "Nothing to run: pass messages (a new turn), messages that answer the pending requests, "
                "responses=... with the continuation token, or checkpoint_id=... ."
            )
        if continuation_token is not None:
            raise ValueError(
                "'continuation_token' is only used to resume a pause (with answers or responses=...); a new turn "
                "needs none. Drop the token from this call."
            )
        if self.workflow.has_pending_continuation:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)
        if self.workflow.is_running:
            raise WorkflowRunningError()
        if self.input_mapper is not None and not is_chat_input(messages):
            raise TypeError(
                "This agent has an input_mapper, which maps chat input: pass str, Message, Content or a list of them."
            )
        if self.input_mapper is None and self.input_mode != "messages":
            workflow_input = map_input(self.input_mode, messages, input_messages, input_messages, None)
            plan.workflow_stream = self.workflow.run(
                workflow_input, stream=True, checkpoint_storage=checkpoint_storage, **run_kwargs
            )
        return plan

    def _start_chat_resume(
        self,
        plan: RunPlan,
        verified: VerifiedContinuation,
        answers: Sequence[Content],
        only_answers: bool,
    ) -> None:
        """After authority passed: check and convert the answers, then start the workflow's resume.

        The verified pause goes to the workflow in place of the token, so the workflow does not
        check it again (with a continuation store: no second store or checkpoint read).
        """
        if not only_answers:
            raise ValueError(
                "While a continuation is pending, send the answers alone: messages whose contents are only "
                "function_approval_response / function_result contents for the pending requests. Send new "
                "text after the workflow finished. The continuation is still pending."
            )
        converted = _answers_to_responses(answers, verified)
        earlier = self.answers_so_far if self.answers_token == verified.token else {}
        answers_so_far = {**earlier, **converted}
        plan.workflow_stream = self.workflow.run(
            stream=True,
            responses=answers_so_far,
            continuation_token=verified,
            checkpoint_storage=plan.checkpoint_storage,
            **plan.run_kwargs,
        )
        plan.answers = answers_so_far

    async def _accept_deferred_resume(self, plan: RunPlan, deferred: _DeferredResume) -> None:
        """Accept a chat-native resume of a pause held elsewhere: store authority, conflict, answers.

        The same order and errors as the synchronous path; a rejection raises before anything ran
        or changed (the store is only read; the claim happens inside the workflow run).
        """
        verified = await self.workflow.verify_continuation_token_async(deferred.token)
        try:
            await authority_of(self.workflow).check_conflict(verified)
        except PendingContinuationError:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE) from None
        self._start_chat_resume(plan, verified, deferred.answers, deferred.only_answers)

    # ------------------------------------------------------------------ run (shared by both modes)

    async def respond(self, plan: RunPlan, response_id: str) -> AgentResponse:
        updates = [update async for update in self.updates(plan, response_id)]
        response = AgentResponse.from_updates(updates)
        response.response_id = response_id
        response.agent_id = self.agent.id
        return response

    async def updates(self, plan: RunPlan, response_id: str) -> AsyncIterable[AgentResponseUpdate]:
        """Providers before, the workflow's events as updates, session bookkeeping, providers after.

        The token update comes last (nothing may follow it: core's ``from_updates`` keeps the last
        update's token), so the after-run providers see the full response before it is yielded.
        The workflow stream lives only in ``plan`` (no local holds it across a ``yield``), so a
        dropped agent stream releases the workflow run at once (see :meth:`run`).
        """
        token: FunctionalWorkflowContinuationToken | None = None
        finished = False
        updates: list[AgentResponseUpdate] = []
        converter = UpdateConverter(author_name=self.agent.name, agent_id=self.agent.id, response_id=response_id)
        if plan.closed:
            return  # closed before it was iterated: its run was released, so start nothing
        if plan.deferred_resume is not None:
            # A rejection raises here, before providers, the workflow or the session are touched.
            await self._accept_deferred_resume(plan, plan.deferred_resume)
        try:
            provider_session, context = await self._before_run(plan)
            if plan.workflow_stream is None:
                conversation = context.get_messages(include_input=True)
                workflow_input = map_input(
                    self.input_mode, plan.raw_input, plan.input_messages, conversation, self.input_mapper
                )
                plan.workflow_stream = self.workflow.run(
                    workflow_input, stream=True, checkpoint_storage=plan.checkpoint_storage, **plan.run_kwargs
                )
            while True:
                try:
                    event = await _next_event(plan)
                except StopAsyncIteration:
                    break
                for update in converter.convert(event):
                    updates.append(update)
                    yield update
            token = await _final_token(plan)
            finished = True
        finally:
            workflow_stream, plan.workflow_stream = plan.workflow_stream, None
            if workflow_stream is not None and not finished:
                await workflow_stream.close()
            # Dropping the last reference lets an unstarted run hand its claim back right away.
            del workflow_stream
            await self._settle_session(plan.session, token)
            if token is not None:
                self.answers_so_far, self.answers_token = plan.answers, dict(token)
            elif not self.workflow.has_pending_continuation:
                self.answers_so_far, self.answers_token = {}, None
        final_update = converter.token_update(token) if token is not None else None
        if final_update is not None:
            updates.append(final_update)
        set_context_response(context, AgentResponse.from_updates(updates))
        await self.agent._run_after_providers(session=provider_session, context=context)  # pyright: ignore[reportPrivateUsage]
        if final_update is not None:
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

    async def _settle_session(self, session: AgentSession | None, token: Mapping[str, Any] | None) -> None:
        """Keep the session's stored token equal to the live one (stored, or removed once stale).

        With a continuation store "live" is the store's view, so a token spent or abandoned in any
        process is removed, and a token of a pause held by another process is kept while it is valid.
        """
        if session is None:
            return
        if token is not None:
            store_session_token(session, self.agent.id, token)
            return
        stored = session_token(session, self.agent.id)
        if stored is None:
            return
        try:
            current = await authority_of(self.workflow).is_current(stored)
        except Exception:  # store unreadable: keep the token; a resume checks it again anyway
            current = True
        if not current:
            clear_session_token(session, self.agent.id)
