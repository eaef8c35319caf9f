"""Planning one agent call of FunctionalWorkflowAgent: decide what it is before anything runs.

:meth:`CallPlanner.plan` returns a :class:`CallPlan` (fresh run, chat-native resume, token resume,
checkpoint restore, or a check deferred to the store) and raises at the call for every rejection it
can decide without I/O; :meth:`CallPlanner.start` is the one place the workflow run starts. A pause
only the continuation store knows is accepted inside the run (:meth:`CallPlanner.accept_deferred`).
Each conversation's instance and answers so far come from ``_session.Conversations``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_framework import AgentSession, CheckpointStorage, Message, ResponseStream, WorkflowEvent

from ._authority import VerifiedContinuation
from ._chat import (
    InputMapper,
    InputMode,
    Turn,
    chat_messages,
    is_chat_input,
    map_input,
    pause_answers,
    read_turn,
    text_answer,
)
from ._continuation import presented_secret
from ._errors import (
    AGENT_PENDING_CONTINUATION_MESSAGE,
    ContinuationAuthorityError,
    PendingContinuationError,
    StaleContinuationError,
    WorkflowRunningError,
)
from ._session import Conversations, clear_session_token, lost_its_token, resolve_token, session_token
from ._updates import core_ids, token_tag
from ._workflow import FunctionalWorkflow, FunctionalWorkflowRunResult

if TYPE_CHECKING:
    from ._agent import FunctionalWorkflowAgent

WorkflowStream = ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult]
AFTER_PROVIDERS: Any = object()
"""``CallPlan.workflow_input`` of a fresh run whose input needs the context providers' messages first."""


class CallKind(enum.Enum):
    """What one agent call is."""

    FRESH = "fresh"  # new input: the workflow runs from the top
    CHAT_RESUME = "chat_resume"  # answers in the messages (or a text reply), authority checked here
    TOKEN_RESUME = "token_resume"  # responses=... with a token: the workflow checks it at the call
    RESTORE = "restore"  # checkpoint_id=...
    DEFERRED = "deferred"  # a token only the continuation store can judge: decided inside the run


@dataclass(frozen=True, slots=True)
class DeferredCheck:
    """What a call deferred to the store carries: its token and this turn's input."""

    token: Any
    turn: Turn
    from_session: bool  # the token is the session's stored one (a stale one gets its own error)
    orphaned: bool = False  # new input on a session that lost the token of the pause held here


@dataclass(frozen=True, slots=True)
class CallArgs:
    """The caller's arguments that decide a call."""

    messages: Any
    responses: Mapping[str, Any] | None
    continuation_token: Mapping[str, Any] | None
    checkpoint_id: str | None


@dataclass(frozen=True, slots=True)
class CallPlan:
    """One decided agent call: what it is and everything its workflow run needs."""

    kind: CallKind
    workflow: FunctionalWorkflow
    session: AgentSession | None
    raw_input: Any
    input_messages: list[Message]
    options: dict[str, Any]
    checkpoint_storage: CheckpointStorage | None
    run_kwargs: dict[str, Any]
    had_instance: bool  # the conversation's instance existed before this call
    workflow_input: Any = None
    responses: Any = None
    token: Any = None  # a token, or the VerifiedContinuation of a chat resume
    checkpoint_id: str | None = None
    # Every answer this run gives the workflow, remembered if it pauses again (earlier rounds included).
    answers: dict[str, Any] = field(default_factory=dict[str, Any])
    token_from_session: bool = False  # a refused token resume: StaleContinuationError when known spent
    deferred: DeferredCheck | None = None

    @property
    def starts_now(self) -> bool:
        """The workflow run can start at the call (not after the store check or the providers)."""
        return self.kind is not CallKind.DEFERRED and self.workflow_input is not AFTER_PROVIDERS


class CallPlanner:
    """Plans the calls of one :class:`FunctionalWorkflowAgent` (internal).

    Args:
        agent: The agent (its id and options).
        conversations: The agent's conversations (their instances and answers so far).
        input_mapper: The agent's explicit input mapper, if any.
        input_mode: What the workflow function's message parameter receives (``_chat.input_mode_for``).
        text_answers: A plain text reply answers the one pending ``str`` request.
    """

    def __init__(
        self,
        agent: FunctionalWorkflowAgent,
        conversations: Conversations,
        input_mapper: InputMapper | None,
        input_mode: InputMode,
        *,
        text_answers: bool = True,
    ) -> None:
        self.agent = agent
        self.conversations = conversations
        self.input_mapper = input_mapper
        self.input_mode: InputMode = input_mode
        self.text_answers = text_answers

    def discard(self, plan: CallPlan) -> None:
        """A rejected call leaves behind no instance it created."""
        if not plan.had_instance:
            self.conversations.detach_idle(plan.session, plan.workflow)

    def _remembered(self, session: AgentSession | None, token: Any) -> dict[str, Any]:
        """The answers given so far in the run chain whose pause ``token`` names."""
        secret = presented_secret(token.token if type(token) is VerifiedContinuation else token)
        # Never raises, whatever the caller passed: the resume fails authority later.
        return {} if secret is None else self.conversations.answers_for(session, secret)

    # ------------------------------------------------------------------ plan (synchronous)

    def plan(
        self,
        args: CallArgs,
        *,
        session: AgentSession | None,
        checkpoint_storage: CheckpointStorage | None,
        options: Mapping[str, Any] | None,
        run_kwargs: dict[str, Any],
    ) -> CallPlan:
        """Decide the call in the workflow's contract order; every rejection without I/O raises here."""
        if options is not None and not isinstance(options, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError("'options' must be a mapping of run options, for example {'continuation_token': token}.")
        if session is None and not self.agent.continuation_token_on_response:
            raise ValueError(
                "This agent keeps continuation tokens in the session only (continuation_token_on_response=False): "
                "pass session=... so the token of a pause is not lost."
            )
        input_messages = chat_messages(args.messages)
        had_instance = session is not None and self.conversations.existing_instance(session) is not None
        workflow = self.conversations.workflow_for(session)
        assert workflow is not None
        base = CallPlan(
            CallKind.FRESH,
            workflow,
            session,
            args.messages,
            input_messages,
            dict(options or {}),
            checkpoint_storage,
            run_kwargs,
            had_instance,
        )
        try:
            return self._decide(base, args)
        except BaseException:
            self.discard(base)
            raise

    def _decide(self, base: CallPlan, args: CallArgs) -> CallPlan:
        # A caller that resends history (AG-UI) adds this turn's part after the last assistant message.
        turn = read_turn(base.input_messages, with_answers=args.responses is None and args.checkpoint_id is None)
        stored = session_token(base.session, self.agent.id)
        # A pause whose session lost its token takes answers only alone (then refused); with text, new input.
        paused = base.workflow.has_pending_continuation and not lost_its_token(base.session, base.options)
        if turn.answers and (turn.only_answers or paused or stored is not None):
            return self._chat_resume(base, args, turn)
        if args.responses is not None or args.checkpoint_id is not None:
            return self._explicit(base, args)
        return self._new_input(base, args, turn, stored)

    def _chat_resume(self, base: CallPlan, args: CallArgs, turn: Turn) -> CallPlan:
        """Authority first, then the answers (nothing leaks without the token)."""
        token = resolve_token(args.continuation_token, base.options, base.session, self.agent.id)
        from_session = _token_from_session(base, args)
        verified = self._verify(base.workflow, token, from_session)
        if verified is None:  # kept in the store, not here: checked inside the run, in the same order
            check = DeferredCheck(token, turn, from_session)
            return dataclasses.replace(base, kind=CallKind.DEFERRED, deferred=check)
        return self._answered(base, verified, turn, core_ids=not from_session)

    def _verify(self, workflow: FunctionalWorkflow, token: Any, from_session: bool) -> VerifiedContinuation | None:
        """The synchronous token check; a session-stored token known to be spent gets its own error."""
        try:
            return workflow.verify_token_now(token)
        except ContinuationAuthorityError:
            if from_session and workflow.token_known_stale(token):
                raise StaleContinuationError() from None
            raise

    def _answered(self, base: CallPlan, verified: VerifiedContinuation, turn: Turn, *, core_ids: bool) -> CallPlan:
        """A chat resume whose authority passed: check and convert the answers (``core_ids``: the caller's token)."""
        if not turn.only_answers:
            raise ValueError(
                "While a continuation is pending, send the answers alone: messages whose contents are only "
                "function_approval_response / function_result contents for the pending requests. Send new "
                "text after the workflow finished. The continuation is still pending."
            )
        return self._resumed(base, verified, pause_answers(turn.answers, verified, verified.token, core_ids=core_ids))

    def _resumed(self, base: CallPlan, verified: VerifiedContinuation, converted: Mapping[str, Any]) -> CallPlan:
        """A chat resume with the answers so far; the verified pause spares the workflow a second check."""
        answers = {**self._remembered(base.session, verified), **converted}
        return dataclasses.replace(
            base,
            kind=CallKind.CHAT_RESUME,
            workflow_input=None,
            responses=answers,
            token=verified,
            answers=answers,
            deferred=None,
        )

    def _explicit(self, base: CallPlan, args: CallArgs) -> CallPlan:
        """A token resume or checkpoint restore: the workflow runs every check when it starts."""
        resume = args.responses is not None and args.checkpoint_id is None
        token = args.continuation_token
        if resume:
            token = resolve_token(token, base.options, base.session, self.agent.id)
        mapping = isinstance(args.responses, Mapping)
        given = dict(args.responses or {}) if mapping else {}  # not a mapping: the workflow's TypeError
        if resume:  # ids published for this pause back to core's (core's own ids also name it: the token does)
            given = core_ids(given, token_tag(token))
        # Earlier rounds' answers too, as for chat-native answers (core's replay forgets them).
        answers = {**self._remembered(base.session, token), **given} if resume else given
        return dataclasses.replace(
            base,
            kind=CallKind.TOKEN_RESUME if resume else CallKind.RESTORE,
            workflow_input=args.messages,
            responses=answers if resume and mapping else args.responses,
            token=token,
            checkpoint_id=args.checkpoint_id,
            answers=answers,
            token_from_session=resume and _token_from_session(base, args) and base.session is not None,
        )

    def _new_input(self, base: CallPlan, args: CallArgs, turn: Turn, stored: Any) -> CallPlan:
        """New input: the workflow's acceptance rules for it, then a fresh run (or a text reply's resume)."""
        _check_new_input_args(args)
        if base.workflow.has_pending_continuation:
            if lost_its_token(base.session, base.options):  # orphaned: abandoned in the run (the store), then fresh
                return dataclasses.replace(base, kind=CallKind.DEFERRED, deferred=DeferredCheck(None, turn, True, True))
            return self._text_reply(base, turn)
        if base.workflow.is_running:
            raise WorkflowRunningError()
        if self.input_mapper is not None and not is_chat_input(args.messages):
            raise TypeError(
                "This agent has an input_mapper, which maps chat input: pass str, Message, Content or a list of them."
            )
        if stored is None:
            return self._fresh(base)
        # A restored session (another worker, a copy) with a token nothing here holds. Known spent or
        # abandoned: a fresh run (the settled session then clears it). Not known and no store to ask: a
        # pause held elsewhere is never discarded silently, so it conflicts. Else the store decides in the run.
        stale = base.workflow.token_known_stale(stored)
        if stale is False:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)
        if stale is None:
            return dataclasses.replace(base, kind=CallKind.DEFERRED, deferred=DeferredCheck(stored, turn, True))
        return self._fresh(base)

    def _text_reply(self, base: CallPlan, turn: Turn) -> CallPlan:
        """New text while paused here: on a session, the answer to the one pending ``str`` request; else a conflict."""
        token = resolve_token(None, base.options, base.session, self.agent.id)
        if self.text_answers and base.session is not None and token is not None:
            verified = _verified_or_none(base.workflow, token)
            text = text_answer(turn.messages, verified) if verified is not None else None
            if verified is not None and text is not None:
                return self._resumed(base, verified, text)
        raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)

    def _fresh(self, base: CallPlan) -> CallPlan:
        """A fresh run; its input waits for the context providers when it depends on them."""
        workflow_input = AFTER_PROVIDERS
        if self.input_mapper is None and self.input_mode != "messages":
            workflow_input = self.fresh_input(base, base.input_messages)
        return dataclasses.replace(base, kind=CallKind.FRESH, workflow_input=workflow_input, deferred=None)

    def fresh_input(self, plan: CallPlan, conversation: list[Message]) -> Any:
        """What the workflow function receives for a fresh run, given the conversation so far."""
        return map_input(self.input_mode, plan.raw_input, plan.input_messages, conversation, self.input_mapper)

    # ------------------------------------------------------------------ start

    def start(self, plan: CallPlan, workflow_input: Any = AFTER_PROVIDERS) -> WorkflowStream:
        """Start the plan's workflow run (the one place the agent starts one); its checks raise here."""
        message = plan.workflow_input if workflow_input is AFTER_PROVIDERS else workflow_input
        try:
            return plan.workflow.run(
                message,
                stream=True,
                responses=plan.responses,
                continuation_token=plan.token,
                checkpoint_id=plan.checkpoint_id,
                checkpoint_storage=plan.checkpoint_storage,
                **plan.run_kwargs,
            )
        except ContinuationAuthorityError:
            if plan.token_from_session and plan.workflow.token_known_stale(plan.token):
                raise StaleContinuationError() from None
            raise

    # ------------------------------------------------------------------ deferred check (inside the run)

    async def accept_deferred(self, plan: CallPlan) -> CallPlan:
        """Decide a deferred call through the store: authority, conflict, then the answers.

        The same order and errors as :meth:`plan`; the store is only read (the claim is the run's).
        """
        check = plan.deferred
        assert check is not None
        if not check.turn.answers or check.orphaned:
            return await self._deferred_new_input(plan, check)
        workflow = plan.workflow
        try:
            verified = await workflow.verify_continuation_token_async(check.token)
        except ContinuationAuthorityError:
            if check.from_session and await workflow.token_is_stale(check.token):
                raise StaleContinuationError() from None
            raise
        try:
            await workflow.check_pause_conflict(verified)
        except PendingContinuationError:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE) from None
        return self._answered(plan, verified, check.turn, core_ids=not check.from_session)

    async def _deferred_new_input(self, plan: CallPlan, check: DeferredCheck) -> CallPlan:
        """New input over a stored token: stale runs fresh; a resumable pause conflicts or takes a text reply.

        Nothing else can say the pause is gone, and a pause must never be discarded silently. An orphaned
        pause (its session lost the token: evicted, expired) is abandoned first: nobody can answer it.
        """
        if check.orphaned:
            await plan.workflow.abandon_continuation_async(force=True)
            return self._fresh(plan)
        if plan.session is not None and (plan.had_instance or await plan.workflow.token_is_stale(check.token)):
            clear_session_token(plan.session, self.agent.id)
            return self._fresh(plan)
        try:
            verified = await plan.workflow.verify_continuation_token_async(check.token)
        except ContinuationAuthorityError:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE) from None  # kept elsewhere
        text = text_answer(check.turn.messages, verified) if self.text_answers else None
        if text is None:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)
        return self._resumed(plan, verified, text)


def _token_from_session(base: CallPlan, args: CallArgs) -> bool:
    """No token as argument or in ``options``: a resume uses the session's."""
    return args.continuation_token is None and base.options.get("continuation_token") is None


def _check_new_input_args(args: CallArgs) -> None:
    """New input needs messages and no token."""
    if args.messages is None:
        raise ValueError(
            "Nothing to run: pass messages (a new turn), messages that answer the pending requests, "
            "responses=... with the continuation token, or checkpoint_id=... ."
        )
    if args.continuation_token is not None:
        raise ValueError(
            "'continuation_token' is only used to resume a pause (with answers or responses=...); a new turn "
            "needs none. Drop the token from this call."
        )


def _verified_or_none(workflow: FunctionalWorkflow, token: Any) -> VerifiedContinuation | None:
    """The verified pause for ``token``, or None when it does not verify here (new text then conflicts)."""
    try:
        return workflow.verify_token_now(token)
    except ContinuationAuthorityError:
        return None
