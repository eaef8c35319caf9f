"""Deciding one agent call of FunctionalWorkflowAgent: a fresh run, a resume or a restore, by one set of rules.

:meth:`CallPlanner.open` runs the rules without I/O at the call (rejections raise, nothing changes); a rule
that needs the store or a write is left to the run (:meth:`CallPlanner.decide_in_run`, same rules).
:meth:`CallPlanner.start` is the one place the agent starts a workflow run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    CheckpointStorage,
    Message,
    ResponseStream,
    SupportsAgentRun,
    WorkflowEvent,
    normalize_messages,
)

from ._authority import VerifiedContinuation
from ._chat import (
    InputMapper,
    InputMode,
    Turn,
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
from ._session import Conversations, lost_its_token, resolve_token, session_token
from ._updates import core_ids, token_tag
from ._workflow import FunctionalWorkflow, FunctionalWorkflowRunResult

WorkflowStream = ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult]
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


class AgentView(SupportsAgentRun, Protocol):
    """What the planner and the runner use of the agent (they do not import its class)."""

    context_providers: list[Any]
    continuation_token_on_response: bool


@dataclass(frozen=True, slots=True)
class Fresh:
    """New input: the workflow runs from the top."""

    input: Any = None
    from_history: bool = False  # the input is mapped from the context providers' messages, in the run


@dataclass(frozen=True, slots=True)
class Resume:
    """Answers to a pause: chat-native ones (``token`` is then the verified pause) or ``responses=``."""

    token: Any
    responses: Any  # what the workflow gets (not a mapping: as given, for the workflow's TypeError)
    answers: dict[str, Any]  # every answer of the run chain, remembered if it pauses again
    input: Any = None  # the caller's messages beside ``responses=`` (the workflow refuses them)
    from_session: bool = False  # the session's token: a refusal of one known spent is StaleContinuationError


@dataclass(frozen=True, slots=True)
class Restore:
    """``checkpoint_id=``: the workflow restores that checkpoint."""

    checkpoint_id: str
    input: Any
    responses: Mapping[str, Any] | None
    token: Any

    @property
    def answers(self) -> dict[str, Any]:
        return dict(self.responses) if isinstance(self.responses, Mapping) else {}


Decision = Fresh | Resume | Restore


@dataclass(eq=False, slots=True)
class AgentCall:
    """One agent call in flight: its arguments, conversation, decision and the workflow stream it drives."""

    args: CallArgs
    workflow: FunctionalWorkflow
    had_instance: bool  # the conversation's instance existed before this call
    decision: Decision | None = None  # None until decided (by the run when the store must answer)
    workflow_stream: WorkflowStream | None = None
    closed: bool = False  # the agent stream was closed: iterating it afterwards runs nothing
    input_messages: list[Message] = field(init=False)
    options: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.input_messages = normalize_messages(self.args.messages) if is_chat_input(self.args.messages) else []
        self.options = dict(self.args.options or {})

    @property
    def session(self) -> AgentSession | None:
        return self.args.session


class _InRun(Exception):
    """Only the run can answer this rule's question (a store read, or a write)."""


def _at_call(rules: Coroutine[Any, Any, Decision]) -> Decision | None:
    """Run the rules without I/O (``in_run`` False): the decision, or None where only the run can decide."""
    try:
        rules.send(None)
    except StopIteration as done:
        return done.value
    except _InRun:
        return None
    rules.close()  # pragma: no cover - the rules at the call never suspend
    raise RuntimeError("an agent call's rules awaited I/O at the call")  # pragma: no cover


class CallPlanner:
    """Decides and starts the calls of one agent (arguments as the agent's)."""

    def __init__(
        self,
        agent: AgentView,
        conversations: Conversations,
        input_mapper: InputMapper | None,
        input_mode: InputMode,
        text_answers: bool,
    ) -> None:
        self.agent = agent
        self.conversations = conversations
        self.input_mapper = input_mapper
        self.input_mode: InputMode = input_mode
        self.text_answers = text_answers

    def open(self, args: CallArgs) -> AgentCall:
        """The call, decided without I/O where it can be and started when its input is known."""
        if args.options is not None and not isinstance(args.options, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError("'options' must be a mapping of run options, for example {'continuation_token': token}.")
        if args.session is None and not self.agent.continuation_token_on_response:
            raise ValueError(
                "This agent keeps continuation tokens in the session only (continuation_token_on_response=False): "
                "pass session=... so the token of a pause is not lost."
            )
        had_instance = args.session is not None and self.conversations.existing_instance(args.session) is not None
        workflow = self.conversations.workflow_for(args.session)
        assert workflow is not None
        call = AgentCall(args, workflow, had_instance)
        try:
            call.decision = _at_call(self._decide(call, in_run=False))
            self._start_known(call)
        except BaseException:
            self.refused(call)
            raise
        return call

    async def decide_in_run(self, call: AgentCall) -> None:
        """Decide a call the pass at the call left open, asking the store."""
        try:
            call.decision = await self._decide(call, in_run=True)
            self._start_known(call)
        except BaseException:
            self.refused(call)
            raise

    def refused(self, call: AgentCall) -> None:
        """A refused call leaves behind no instance it created."""
        if not call.had_instance:
            self.conversations.detach_idle(call.session, call.workflow)

    def _start_known(self, call: AgentCall) -> None:
        decision = call.decision
        if decision is not None and not (isinstance(decision, Fresh) and decision.from_history):
            call.workflow_stream = self.start(call)

    def start(self, call: AgentCall, history: list[Message] | None = None) -> WorkflowStream:
        """Start the call's workflow run (``history``: the providers' messages)."""
        decision = call.decision
        responses = token = checkpoint_id = None
        if isinstance(decision, Fresh):
            message = decision.input if history is None else self.fresh_input(call, history)
        else:
            assert decision is not None
            message, responses, token = decision.input, decision.responses, decision.token
            checkpoint_id = decision.checkpoint_id if isinstance(decision, Restore) else None
        try:
            return call.workflow.run(
                message,
                stream=True,
                responses=responses,
                continuation_token=token,
                checkpoint_id=checkpoint_id,
                checkpoint_storage=call.args.checkpoint_storage,
                **call.args.workflow_kwargs(),
            )
        except ContinuationAuthorityError:
            if isinstance(decision, Resume) and decision.from_session and call.workflow.token_known_stale(token):
                raise StaleContinuationError() from None
            raise

    def fresh_input(self, call: AgentCall, conversation: list[Message]) -> Any:
        return map_input(self.input_mode, call.args.messages, call.input_messages, conversation, self.input_mapper)

    # ------------------------------------------------------------------ the rules (in the workflow's contract order)

    async def _decide(self, call: AgentCall, *, in_run: bool) -> Decision:
        args = call.args
        # A caller that resends history (AG-UI) adds this turn's part after the last assistant message.
        turn = read_turn(call.input_messages, with_answers=args.responses is None and args.checkpoint_id is None)
        stored = session_token(call.session, self.agent.id)
        # A pause whose session lost its token takes answers only alone (then refused); with text, new input.
        paused = call.workflow.has_pending_continuation and not lost_its_token(call.session, call.options)
        if turn.answers and (turn.only_answers or paused or stored is not None):
            return await self._chat_resume(call, turn, in_run)
        if args.responses is not None or args.checkpoint_id is not None:
            return self._explicit(call)
        return await self._new_input(call, turn, stored, in_run)

    async def _chat_resume(self, call: AgentCall, turn: Turn, in_run: bool) -> Resume:
        """Authority, then a conflict with a pause held here, then the answers."""
        token = resolve_token(call.args.continuation_token, call.options, call.session, self.agent.id)
        from_session = _token_from_session(call)
        try:
            verified = await _verify(call.workflow, token, in_run)
        except ContinuationAuthorityError:
            if from_session and token is not None and await _is_stale(call.workflow, token, in_run):  # none: not stale
                raise StaleContinuationError() from None
            raise
        try:  # at the call only a pause held here verifies: nothing to read
            await call.workflow.check_pause_conflict(verified)
        except PendingContinuationError:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE) from None
        if not turn.only_answers:
            raise ValueError(
                "While a continuation is pending, send the answers alone: messages whose contents are only "
                "function_approval_response / function_result contents for the pending requests. Send new "
                "text after the workflow finished. The continuation is still pending."
            )
        answers = pause_answers(turn.answers, verified, verified.token, core_ids=not from_session)
        return self._resumed(call, verified, answers)

    def _resumed(self, call: AgentCall, verified: VerifiedContinuation, given: Mapping[str, Any]) -> Resume:
        answers = {**self._remembered(call.session, verified.token), **given}
        return Resume(verified, answers, answers)

    def _explicit(self, call: AgentCall) -> Resume | Restore:
        """A token resume or checkpoint restore: the workflow checks it when it starts."""
        args = call.args
        if args.checkpoint_id is not None:
            return Restore(args.checkpoint_id, args.messages, args.responses, args.continuation_token)
        token = resolve_token(args.continuation_token, call.options, call.session, self.agent.id)
        mapping = isinstance(args.responses, Mapping)  # not a mapping: given as is, for the workflow's TypeError
        # Ids published for this pause back to core's; earlier rounds' answers too (core's replay forgets them).
        given = core_ids(dict(args.responses or {}) if mapping else {}, token_tag(token))
        answers = {**self._remembered(call.session, token), **given}
        from_session = _token_from_session(call) and call.session is not None
        return Resume(token, answers if mapping else args.responses, answers, args.messages, from_session)

    async def _new_input(self, call: AgentCall, turn: Turn, stored: Any, in_run: bool) -> Decision:
        if call.args.messages is None:
            raise ValueError(
                "Nothing to run: pass messages (a new turn), messages that answer the pending requests, "
                "responses=... with the continuation token, or checkpoint_id=... ."
            )
        if call.args.continuation_token is not None:
            raise ValueError(
                "'continuation_token' is only used to resume a pause (with answers or responses=...); a new turn "
                "needs none. Drop the token from this call."
            )
        workflow = call.workflow
        if workflow.has_pending_continuation:
            if lost_its_token(call.session, call.options):  # orphaned: nobody can answer it; abandoned, then fresh
                if not in_run:  # a write: left to the run
                    raise _InRun
                await workflow.abandon_continuation_async(force=True)
                return self._fresh(call)
            return self._text_reply(call, turn)
        if workflow.is_running:
            raise WorkflowRunningError()
        if self.input_mapper is not None and not is_chat_input(call.args.messages):
            raise TypeError(
                "This agent has an input_mapper, which maps chat input: pass str, Message, Content or a list of them."
            )
        return self._fresh(call) if stored is None else await self._over_stored(call, turn, stored, in_run)

    async def _over_stored(self, call: AgentCall, turn: Turn, stored: Any, in_run: bool) -> Decision:
        """New input over a stored token no pause here has: fresh when stale, else a conflict or a text reply."""
        if call.had_instance or await _is_stale(call.workflow, stored, in_run):
            return self._fresh(call)  # the token goes when the run ends (AgentRunner._write_session)
        if call.workflow.continuation_store is None:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)
        try:
            verified = await _verify(call.workflow, stored, in_run)
        except ContinuationAuthorityError:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE) from None
        text = text_answer(turn.messages, verified) if self.text_answers else None
        if text is None:
            raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)
        return self._resumed(call, verified, text)

    def _text_reply(self, call: AgentCall, turn: Turn) -> Resume:
        """New text while paused here: on a session, the answer to the one pending ``str`` request; else a conflict."""
        token = resolve_token(None, call.options, call.session, self.agent.id)
        if self.text_answers and call.session is not None and token is not None:
            try:
                verified = call.workflow.verify_token_now(token)
            except ContinuationAuthorityError:
                verified = None  # it does not verify here: new text conflicts
            text = text_answer(turn.messages, verified) if verified is not None else None
            if verified is not None and text is not None:
                return self._resumed(call, verified, text)
        raise PendingContinuationError(AGENT_PENDING_CONTINUATION_MESSAGE)

    def _fresh(self, call: AgentCall) -> Fresh:
        if self.input_mapper is not None or self.input_mode == "messages":
            return Fresh(from_history=True)
        return Fresh(self.fresh_input(call, call.input_messages))

    def _remembered(self, session: AgentSession | None, token: Any) -> dict[str, Any]:
        secret = presented_secret(token.token if type(token) is VerifiedContinuation else token)
        # Never raises, whatever the caller passed: the resume fails authority later.
        return {} if secret is None else self.conversations.answers_for(session, secret)


async def _verify(workflow: FunctionalWorkflow, token: Any, in_run: bool) -> VerifiedContinuation:
    """The token's verdict: in the run from the store too, at the call only without I/O."""
    if in_run:
        return await workflow.verify_continuation_token_async(token)
    verdict = workflow.verify_token_now(token)
    if verdict is None:
        raise _InRun
    return verdict


async def _is_stale(workflow: FunctionalWorkflow, token: Any, in_run: bool) -> bool:
    """Whether ``token`` is known to resume nothing: in the run from the store too, at the call only without I/O."""
    stale = await workflow.token_is_stale(token) if in_run else workflow.token_known_stale(token)
    if stale is None:
        raise _InRun
    return stale


def _token_from_session(call: AgentCall) -> bool:
    return call.args.continuation_token is None and call.options.get("continuation_token") is None
