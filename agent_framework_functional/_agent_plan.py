"""Acceptance of one agent call of FunctionalWorkflowAgent: decide what it is before anything runs.

:meth:`CallPlanner.plan` decides synchronously whether a call is a chat-native resume, an explicit
resume or restore, or a fresh run, and raises at the call site for every rejection it can decide
without I/O. A call whose pause is held in a continuation store, not here, is accepted inside the run
(:meth:`CallPlanner.accept_deferred`, one store read), still before any update is yielded. The
planner also owns each conversation's workflow instance (``workflow_for``) and the session-less
conversation's answers so far; ``_agent_run.AgentRunner`` runs the accepted :class:`RunPlan`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_framework import AgentSession, CheckpointStorage, Content, Message, ResponseStream, WorkflowEvent

from ._authority import VerifiedContinuation
from ._chat import (
    InputMapper,
    InputMode,
    answer_contents,
    answer_tail,
    chat_messages,
    check_authority,
    has_other_contents,
    is_chat_input,
    map_input,
    resume_part,
    text_answer,
)
from ._chat import answers_to_responses as _answers_to_responses
from ._continuation import presented_secret
from ._errors import (
    AGENT_PENDING_CONTINUATION_MESSAGE,
    ContinuationAuthorityError,
    PendingContinuationError,
    StaleContinuationError,
    WorkflowRunningError,
)
from ._session import (
    LiveConversations,
    attach_workflow,
    attached_workflow,
    clear_session_token,
    conversation_of,
    detach_workflow,
    register_template,
    resolve_token,
    session_answers,
    session_token,
    touch_workflow,
)
from ._workflow import FunctionalWorkflow, FunctionalWorkflowRunResult, authority_of

if TYPE_CHECKING:
    from ._agent import FunctionalWorkflowAgent


@dataclass(slots=True)
class RunPlan:
    """An accepted agent call (internal): everything the async part needs, decided synchronously."""

    workflow: FunctionalWorkflow
    raw_input: Any
    input_messages: list[Message]
    session: AgentSession | None
    options: dict[str, Any]
    checkpoint_storage: CheckpointStorage | None
    run_kwargs: dict[str, Any] = field(default_factory=dict[str, Any])
    # Every answer this run gives the workflow, remembered if it pauses again (earlier rounds included).
    answers: dict[str, Any] = field(default_factory=dict[str, Any])
    # Started at call time (so the workflow's own checks raise there) unless the workflow input
    # is the conversation, which needs the context providers' messages first.
    workflow_stream: ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult] | None = None
    # Set when the agent stream was closed: iterating it afterwards must run nothing.
    closed: bool = False
    # A resume (or new input over a stored token) whose pause this process does not hold: checked
    # through the continuation store inside the run.
    deferred: Deferred | None = None
    # The conversation's instance was already live here (so a stored token it does not hold is stale).
    was_live: bool = False


@dataclass(frozen=True, slots=True)
class Deferred:
    """A call to accept inside the run, once the store said whether its token is live (internal).

    Attributes:
        token: The token the call resumes with (argument, options or session).
        answers: Chat-native answers of the call (empty for new text).
        only_answers: The resumed part of the input carries nothing but answers.
        messages: The part of the input a plain-text answer is read from.
        from_session: The token is the session's stored one (a stale one then gets its own error).
    """

    token: Any
    answers: list[Content]
    only_answers: bool
    messages: list[Message]
    from_session: bool = False


class CallPlanner:
    """Accepts or rejects the calls of one :class:`FunctionalWorkflowAgent` (internal).

    Without a session the agent is one conversation on its own workflow instance. With a session,
    each conversation has its own instance (built from the same definition, with the same checkpoint
    storage and continuation store, bound to the conversation so a store refuses another's token),
    attached to the session object while it has something pending; its token and the answers so far
    are in ``session.state``. Nothing about a conversation is kept here, except the session-less
    conversation's answers so far.

    Args:
        agent: The agent it serves (its id and options).
        workflow: The workflow instance of the session-less conversation (and the template of the others).
        input_mapper: The agent's explicit input mapper, if any.
        input_mode: What the workflow function's message parameter receives (``_chat.input_mode_for``).
        text_answers: A plain text reply answers the one pending ``str`` request.
        max_conversations: Most conversations whose live instance is kept (``_session.LiveConversations``).
    """

    def __init__(
        self,
        agent: FunctionalWorkflowAgent,
        workflow: FunctionalWorkflow,
        input_mapper: InputMapper | None,
        input_mode: InputMode,
        *,
        text_answers: bool = True,
        max_conversations: int | None = None,
    ) -> None:
        if max_conversations is not None and (
            type(max_conversations) is not int or max_conversations < 1  # pyright: ignore[reportUnnecessaryComparison]
        ):
            raise ValueError("'max_conversations' must be a positive int (or None for no limit but the pause TTL).")
        register_template(
            workflow,
            LiveConversations(
                lambda live: authority_of(live).expires_at(),
                lambda live, now: authority_of(live).lapse(now),
                lambda live: authority_of(live).evict(),
                max_conversations,
            ),
        )
        self.agent = agent
        self.workflow = workflow
        self.input_mapper = input_mapper
        self.input_mode: InputMode = input_mode
        self.text_answers = text_answers
        # The session-less conversation's answers so far, valid only with the token they paused with.
        self.answers_so_far: dict[str, Any] = {}
        self.answers_token: dict[str, Any] | None = None

    def forget_answers(self) -> None:
        """Drop the session-less conversation's remembered answers (its continuation was abandoned)."""
        self.answers_so_far, self.answers_token = {}, None

    def abandon_token(
        self, token: Mapping[str, Any] | None, force: bool, session: AgentSession | None
    ) -> Mapping[str, Any] | None:
        """The token the agent's abandon methods use: the given one, else (without ``force``) the session's."""
        return session_token(session, self.agent.id) if token is None and not force else token

    def forget_abandoned(self, session: AgentSession | None, workflow: FunctionalWorkflow) -> None:
        """After an abandonment: drop the remembered answers and the session's token, and the instance."""
        if session is None:
            self.forget_answers()
            return
        clear_session_token(session, self.agent.id)
        self.release(session, workflow)

    def live_workflow(self, session: AgentSession) -> FunctionalWorkflow | None:
        """The session's live instance; one whose pause expired is released first (then None)."""
        workflow = attached_workflow(self.workflow, session)
        if workflow is not None and not workflow.is_running and authority_of(workflow).lapse():
            detach_workflow(self.workflow, session)
            return None
        return workflow

    def workflow_for(self, session: AgentSession | None, *, create: bool = True) -> FunctionalWorkflow | None:
        """The workflow instance of a conversation: the agent's own without a session, else the session's."""
        if session is None:
            return self.workflow
        workflow = attached_workflow(self.workflow, session)
        if workflow is None and create:
            template = self.workflow
            workflow = template.definition.build(
                checkpoint_storage=template.checkpoint_storage,
                continuation_store=template.continuation_store,
                continuation_ttl=template.continuation_ttl,
            )
            authority_of(workflow).conversation = conversation_of(session)
            attach_workflow(self.workflow, session, workflow)
        return workflow

    def release(self, session: AgentSession | None, workflow: FunctionalWorkflow) -> None:
        """Detach a conversation's instance from its session once it holds nothing (memory back to baseline)."""
        if session is None or workflow is self.workflow or attached_workflow(self.workflow, session) is not workflow:
            return
        if not workflow.has_pending_continuation and not workflow.is_running:
            detach_workflow(self.workflow, session)
        else:
            touch_workflow(self.workflow, session)  # paused (or still running): last in the sweep order

    def _remembered(self, session: AgentSession | None, token: Any) -> dict[str, Any]:
        """The answers given so far in the run chain whose pause ``token`` names."""
        secret = presented_secret(token.token if type(token) is VerifiedContinuation else token)
        if secret is None:
            return {}  # never raises, whatever the caller passed: the resume fails authority later
        if session is not None:
            return session_answers(session, self.agent.id, secret)
        return dict(self.answers_so_far) if presented_secret(self.answers_token) == secret else {}

    # ------------------------------------------------------------------ synchronous acceptance

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
        if session is None and not self.agent.continuation_token_on_response:
            raise ValueError(
                "This agent keeps continuation tokens in the session only (continuation_token_on_response=False): "
                "pass session=... so the token of a pause is not lost."
            )
        input_messages = chat_messages(messages)
        was_live = session is not None and self.live_workflow(session) is not None
        workflow = self.workflow_for(session)
        assert workflow is not None
        plan = RunPlan(
            workflow=workflow,
            raw_input=messages,
            input_messages=input_messages,
            session=session,
            options=dict(options or {}),
            checkpoint_storage=checkpoint_storage,
            run_kwargs=run_kwargs,
            was_live=was_live,
        )
        try:
            self._plan(plan, messages, responses, continuation_token, checkpoint_id)
        except BaseException:
            if not was_live:
                self.release(session, workflow)  # a rejected call leaves behind no instance it created
            raise
        return plan

    def _plan(
        self,
        plan: RunPlan,
        messages: Any,
        responses: Mapping[str, Any] | None,
        continuation_token: Mapping[str, Any] | None,
        checkpoint_id: str | None,
    ) -> None:
        workflow, session, options = plan.workflow, plan.session, plan.options
        # A caller that resends history (AG-UI) adds this turn's part after the last assistant message.
        turn = resume_part(plan.input_messages)
        tail = answer_tail(turn)  # answers at the very end resume, whatever text of this turn preceded them
        answers = answer_contents(tail or turn) if responses is None and checkpoint_id is None else []
        only_answers = bool(answers) and not has_other_contents(tail or turn)
        stored = session_token(session, self.agent.id) if session is not None else None
        from_session = continuation_token is None and options.get("continuation_token") is None
        pending_here = workflow.has_pending_continuation
        if answers and (only_answers or pending_here or stored is not None):
            # Chat-native resume: authority first, then the answers (nothing leaks without the token).
            token = resolve_token(continuation_token, options, session, self.agent.id)
            verified = self._check_authority(workflow, token, from_session)
            if verified is None:
                # A pause held in a continuation store, not here. The store lookup is asynchronous, so
                # authority, conflict and the answers are checked in the run, in the same order.
                plan.deferred = Deferred(token, answers, only_answers, turn, from_session)
                return
            self._start_chat_resume(plan, verified, answers, only_answers)
            return
        if responses is not None or checkpoint_id is not None:
            self._start_explicit(plan, messages, responses, continuation_token, checkpoint_id, from_session)
            return
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
        if pending_here:
            token = resolve_token(None, options, session, self.agent.id)
            if self.text_answers and session is not None and token is not None:
                verified = _verified_or_none(workflow, token)
                text = text_answer(turn, verified) if verified is not None else None
                if verified is not None and text is not None:
                    self._resume(plan, verified, text)
                    return
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)
        if workflow.is_running:
            raise WorkflowRunningError()
        if self.input_mapper is not None and not is_chat_input(messages):
            raise TypeError(
                "This agent has an input_mapper, which maps chat input: pass str, Message, Content or a list of them."
            )
        if stored is not None:
            # A restored session (another worker, a copy) with a token nothing here holds. Known spent or
            # abandoned: a fresh run (the settled session then drops it). Not known here and no store to ask:
            # a pause held elsewhere must never be dropped silently, so it conflicts. Else the store decides,
            # inside the run: live means new input conflicts (or a text reply answers it), stale a fresh run.
            stale = authority_of(workflow).known_stale(stored)
            if stale is False:
                raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)
            if stale is None:
                plan.deferred = Deferred(stored, [], False, turn, True)
                return
        self.start_fresh(plan)

    def _check_authority(self, workflow: FunctionalWorkflow, token: Any, from_session: bool) -> Any:
        """:func:`check_authority`; a session-stored token known to be spent gets its own error."""
        try:
            return check_authority(workflow, token)
        except ContinuationAuthorityError:
            if from_session and authority_of(workflow).known_stale(token):
                raise StaleContinuationError() from None
            raise

    def _start_explicit(
        self,
        plan: RunPlan,
        messages: Any,
        responses: Mapping[str, Any] | None,
        continuation_token: Mapping[str, Any] | None,
        checkpoint_id: str | None,
        from_session: bool,
    ) -> None:
        """Explicit resume or checkpoint restore: the workflow runs every check at this call."""
        workflow, session = plan.workflow, plan.session
        resume = responses is not None and checkpoint_id is None
        token = (
            resolve_token(continuation_token, plan.options, session, self.agent.id) if resume else continuation_token
        )
        mapping = isinstance(responses, Mapping)
        given = dict(responses) if mapping else {}  # not a mapping: the workflow's TypeError below
        # Earlier rounds' answers too, as for chat-native answers (core's replay forgets them).
        plan.answers = {**self._remembered(session, token), **given} if resume else given
        try:
            plan.workflow_stream = workflow.run(
                messages,
                stream=True,
                responses=plan.answers if resume and mapping else responses,
                continuation_token=token,
                checkpoint_id=checkpoint_id,
                checkpoint_storage=plan.checkpoint_storage,
                **plan.run_kwargs,
            )
        except ContinuationAuthorityError:
            if resume and from_session and session is not None and authority_of(workflow).known_stale(token):
                raise StaleContinuationError() from None
            raise

    def start_fresh(self, plan: RunPlan) -> None:
        """Start a fresh run now when its input does not need the context providers (else the run starts it)."""
        if self.input_mapper is None and self.input_mode != "messages":
            workflow_input = map_input(self.input_mode, plan.raw_input, plan.input_messages, plan.input_messages, None)
            plan.workflow_stream = plan.workflow.run(
                workflow_input, stream=True, checkpoint_storage=plan.checkpoint_storage, **plan.run_kwargs
            )

    def _start_chat_resume(
        self, plan: RunPlan, verified: VerifiedContinuation, answers: Sequence[Content], only_answers: bool
    ) -> None:
        """After authority passed: check and convert the answers, then start the workflow's resume."""
        if not only_answers:
            raise ValueError(
                "While a continuation is pending, send the answers alone: messages whose contents are only "
                "function_approval_response / function_result contents for the pending requests. Send new "
                "text after the workflow finished. The continuation is still pending."
            )
        self._resume(plan, verified, _answers_to_responses(answers, verified))

    def _resume(self, plan: RunPlan, verified: VerifiedContinuation, converted: Mapping[str, Any]) -> None:
        """Start the workflow's resume with the answers so far and the verified pause.

        The verified pause goes to the workflow in place of the token, so the workflow does not
        check it again (with a continuation store: no second store or checkpoint read).
        """
        answers_so_far = {**self._remembered(plan.session, verified), **converted}
        plan.workflow_stream = plan.workflow.run(
            stream=True,
            responses=answers_so_far,
            continuation_token=verified,
            checkpoint_storage=plan.checkpoint_storage,
            **plan.run_kwargs,
        )
        plan.answers = answers_so_far

    # ------------------------------------------------------------------ acceptance inside the run

    async def accept_deferred(self, plan: RunPlan, deferred: Deferred) -> None:
        """Accept a call whose pause is held elsewhere: store authority, conflict, then the answers.

        The same order and errors as the synchronous path; a rejection raises before anything ran
        or changed (the store is only read; the claim happens inside the workflow run).
        """
        workflow = plan.workflow
        authority = authority_of(workflow)
        if not deferred.answers:
            # New input over a stored token: a live pause conflicts (or takes a text reply); one the store
            # says is spent or abandoned, or that this conversation's live instance does not hold, is
            # forgotten and the run starts fresh. Otherwise nothing can say it is gone, and a pause must
            # never be dropped silently: it conflicts (abandon to get out).
            if plan.session is not None and (plan.was_live or await authority.is_stale(deferred.token)):
                clear_session_token(plan.session, self.agent.id)
                self.start_fresh(plan)
                return
            try:
                verified = await workflow.verify_continuation_token_async(deferred.token)
            except ContinuationAuthorityError:
                raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE) from None  # held elsewhere
            text = text_answer(deferred.messages, verified) if self.text_answers else None
            if text is None:
                raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)
            self._resume(plan, verified, text)
            return
        try:
            verified = await workflow.verify_continuation_token_async(deferred.token)
        except ContinuationAuthorityError:
            if deferred.from_session and await authority.is_stale(deferred.token):
                raise StaleContinuationError() from None
            raise
        try:
            await authority.check_conflict(verified)
        except PendingContinuationError:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE) from None
        self._start_chat_resume(plan, verified, deferred.answers, deferred.only_answers)


def _verified_or_none(workflow: FunctionalWorkflow, token: Any) -> VerifiedContinuation | None:
    """The verified pause for ``token``, or None when it does not verify here (new text then conflicts)."""
    try:
        return check_authority(workflow, token)
    except ContinuationAuthorityError:
        return None
