"""FunctionalWorkflowAgent: a functional workflow exposed as a core ``BaseAgent``."""

from __future__ import annotations

import functools
import uuid
import weakref
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast, overload

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    BaseAgent,
    CheckpointStorage,
    Content,
    HistoryProvider,
    InMemoryHistoryProvider,
    Message,
    ResponseStream,
    SessionContext,
    WorkflowEvent,
)
from pydantic_core import to_jsonable_python

from ._chat import (
    InputMapper,
    InputMode,
    answer_contents,
    chat_messages,
    check_authority,
    check_authority_async,
    clear_session_token,
    has_other_contents,
    input_mode_for,
    is_chat_input,
    map_input,
    resolve_token,
    session_token,
    store_session_token,
    token_is_current,
)
from ._chat import (
    answers_to_responses as _answers_to_responses,
)
from ._continuation import FunctionalWorkflowContinuationToken
from ._core_compat import set_context_response
from ._errors import PendingContinuationError, WorkflowRunningError
from ._streaming import LiveText, live_update_to_agent_update
from ._workflow import FunctionalWorkflow, FunctionalWorkflowRunResult

REQUEST_INFO_FUNCTION_NAME = "request_info"


def request_data_to_json(data: Any) -> Any:
    """Return ``data`` as JSON-safe values (pydantic models, dataclasses, datetimes included).

    Args:
        data: The ``request_info`` payload.

    Returns:
        A JSON-serialisable value; types pydantic cannot convert become their ``str()``.
    """
    return to_jsonable_python(data, fallback=str)


@dataclass(slots=True)
class _RunPlan:
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


def _drop_workflow_stream(plan: _RunPlan) -> None:
    """Weak finalizer of an agent stream: let go of the workflow stream it was driving."""
    plan.workflow_stream = None


_AGENT_PENDING_MESSAGE = (
    "This agent's workflow has a pending continuation (a run paused on request_info). Answer the pending "
    "requests first: send a message whose contents are function_approval_response / function_result "
    "contents for them (on the same session, or with the continuation token), or call "
    "agent.abandon_continuation(token) / agent.abandon_continuation(session=session) before sending new input."
)


async def _close_workflow_stream(plan: _RunPlan) -> None:
    """Cleanup hook of an agent stream: close the workflow stream it holds, if any is left."""
    plan.closed = True
    workflow_stream, plan.workflow_stream = plan.workflow_stream, None
    if workflow_stream is not None:
        await workflow_stream.close()


async def _next_event(plan: _RunPlan) -> WorkflowEvent[Any]:
    """The next workflow event; returns before the caller yields, so it keeps no reference."""
    assert plan.workflow_stream is not None
    return await plan.workflow_stream.__anext__()


async def _final_token(plan: _RunPlan) -> FunctionalWorkflowContinuationToken | None:
    """The finished workflow run's continuation token (None unless it paused)."""
    assert plan.workflow_stream is not None
    run_result: FunctionalWorkflowRunResult = await plan.workflow_stream.get_final_response()
    return run_result.continuation_token


class FunctionalWorkflowAgent(BaseAgent):
    """A functional workflow as a drop-in chat agent that carries the continuation token.

    Use it wherever Agent Framework takes an agent: ``agent.run(...)`` / ``agent.run(..., stream=True)``
    / :meth:`run_stream` in a chat app, or as a participant of an orchestration
    (``agent-framework-orchestrations``).

    **Input mapping** (fresh runs with chat input: ``str``, ``Message``, ``Content`` or a list of them).
    The workflow function's message parameter decides what it receives:

    * annotated ``str``: the text of the caller's messages, joined by newlines;
    * annotated ``Message``: the caller's last message;
    * annotated ``list[Message]`` or ``Sequence[Message]``: the conversation, that is the messages
      of the context providers (history) followed by the caller's messages, as core's graph
      ``WorkflowAgent`` passes them;
    * unannotated, ``Any`` or any other type: the input exactly as given (non-chat input, such as
      a dict, is always passed as given).

    ``input_mapper=`` overrides the rule: it receives the conversation (``list[Message]``) and
    returns the workflow input.

    **Pauses.** Each pending ``request_info`` surfaces as a ``function_approval_request`` content
    whose ``id`` (and function call ``call_id``) is the request id and whose arguments carry
    JSON-safe request data, as core's functional agent does. The token travels in
    ``AgentResponse.continuation_token``; when streaming, the last update carries it, so both
    ``AgentResponse.from_updates(updates)`` and ``stream.get_final_response()`` expose it. When the
    paused run had a ``session``, the token is also stored in that session's state (JSON-safe, so
    ``session.to_dict()`` / ``AgentSession.from_dict`` keep it) and removed once spent or abandoned.

    **Resuming**, either way:

    * ``run(responses={request_id: value}, continuation_token=token)``, as on the workflow;
    * chat-native: send messages whose contents answer the pending requests, a
      ``function_approval_response`` (matched by ``id``) or a ``function_result`` (matched by
      ``call_id``). An approval gives ``approved`` when the request's ``response_type`` is ``bool``
      and the ``Content`` itself when it is ``Content``; a function result gives its ``result``
      converted to the ``response_type`` (JSON for pydantic models and dataclasses), or the
      ``Content`` when the type is ``Content``. This is how orchestrations deliver answers. Send
      answers for the pending requests only: when a run pauses more than once, the agent adds the
      answers given earlier in the run itself (core's replay forgets them otherwise).

    The token for a resume comes from, first match wins: the ``continuation_token=`` argument,
    ``options={"continuation_token": ...}``, then the session the paused run was called with.

    **Across processes.** When the workflow was built with a ``continuation_store``, any process
    with the same definition, store and checkpoint storage can resume chat-natively, also one that
    never saw the pause: send the answers with the token (argument, ``options``, or a session
    restored with ``AgentSession.from_dict``). The token is then verified in the store and the
    pause's requests (with their ``response_type``) are loaded from its checkpoint, which is
    asynchronous, so for a token not held in this process a rejection (authority, pending conflict,
    an answer that matches no request or cannot be converted) surfaces on the first ``await`` or
    iteration instead of at ``run(...)``; it still changes nothing. The session's stored token
    follows the store: removed once spent or abandoned in any process. Answers given in earlier
    rounds of the same run are only remembered in the process that received them, so a later
    round resumed elsewhere must send ``responses=`` with all answers so far.

    **Rejected calls** raise at ``run(...)`` (also with ``stream=True``) and change nothing (the
    workflow, :attr:`pending_requests`, the session): bad or missing token (one fixed
    :class:`ContinuationAuthorityError`, checked before anything about the answers), an answer
    that matches no pending request or cannot be converted (``ValueError``), new input while a
    continuation is pending (:class:`PendingContinuationError`), a run in progress
    (:class:`WorkflowRunningError`).

    **Context providers** run before and after every run the way core's graph ``WorkflowAgent``
    runs them: with a ``session`` and no history provider an ``InMemoryHistoryProvider`` is added,
    history providers load before the run and store the input and the response after it.

    **Live updates** (:func:`~agent_framework_functional.emit_update`,
    :func:`~agent_framework_functional.stream_agent`) become updates as the workflow sends them, in
    both run modes. No text twice: an output whose text the run already streamed live (the streamed
    text ends with it, e.g. ``return response.text`` after ``stream_agent``) adds nothing, so
    ``get_final_response()`` of a streaming run and a non-streaming run have the same text.

    :attr:`pending_requests` is read from the workflow, so it always equals the workflow's pending
    continuation: set when a run pauses, empty from the moment a resume is accepted, untouched by a
    rejected call, empty after a failed or cancelled run and after abandonment.

    Replay hazard: a resume runs the workflow function again from the top; ``@step`` bodies that
    completed do not run again, code outside steps does.

    Args:
        workflow: The workflow instance this agent drives (one agent per instance).

    Keyword Args:
        id: Agent id; defaults to ``FunctionalWorkflowAgent_<name>``.
        name: Agent name; defaults to the workflow name.
        description: Agent description; defaults to the workflow description.
        context_providers: Core context providers, run before and after each run.
        middleware: Core middleware, kept on the agent (not executed, as in core's ``WorkflowAgent``).
        additional_properties: Extra properties of the agent.
        input_mapper: Maps the conversation (``list[Message]``) to the workflow input, instead of
            the annotation rule above.

    Examples:
        .. code-block:: python

            agent = review.build().as_agent(name="reviewer")
            session = agent.create_session()
            paused = await agent.run("tea", session=session)
            request = paused.user_input_requests[0]
            # Chat-native: answer the approval request; the token comes from the session.
            done = await agent.run(
                Message("user", [request.to_function_approval_response(approved=True)]), session=session
            )
    """

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
        self._input_mode: InputMode = input_mode_for(workflow.definition.func)
        # Core replays from the top and forgets answers to earlier request_info calls, so a
        # chat-native resume (which carries only the new answers, as orchestrations send them)
        # adds the answers given so far in this run. Valid only with the token they paused with.
        self._answers_so_far: dict[str, Any] = {}
        self._answers_token: dict[str, Any] | None = None

    @property
    def workflow(self) -> FunctionalWorkflow:
        """The workflow instance this agent drives."""
        return self._workflow

    @property
    def input_mapper(self) -> Callable[[list[Message]], Any] | None:
        """The explicit input mapper, or None when the workflow function's annotation decides."""
        return self._input_mapper

    @property
    def pending_requests(self) -> Mapping[str, WorkflowEvent[Any]]:
        """Read-only mapping request id -> ``request_info`` event, always the workflow's pending view."""
        return self._workflow.pending_requests

    def abandon_continuation(
        self,
        token: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
        session: AgentSession | None = None,
    ) -> None:
        """Abandon the workflow's pending continuation; see :meth:`FunctionalWorkflow.abandon_continuation`.

        Args:
            token: The current continuation token. When omitted (and not ``force``), the token
                stored in ``session`` is used.

        Keyword Args:
            force: Owner-only recovery without a token; never expose it to untrusted callers.
            session: The session the paused run was called with; its stored token is removed
                once the continuation is abandoned.

        Raises:
            ContinuationAuthorityError: Missing or wrong token without ``force``; nothing changes.
            WorkflowRunningError: A run is in progress.
        """
        if token is None and not force:
            token = session_token(session, self.id)
        self._workflow.abandon_continuation(token, force=force)
        self._forget_abandoned(session)

    async def abandon_continuation_async(
        self,
        token: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
        session: AgentSession | None = None,
    ) -> None:
        """Abandon the pending continuation, also in the workflow's continuation store.

        Use this on a workflow built with ``continuation_store=...`` (the synchronous
        :meth:`abandon_continuation` cannot update a store and raises ``RuntimeError`` there); see
        :meth:`FunctionalWorkflow.abandon_continuation_async`. Without a store it behaves exactly
        like :meth:`abandon_continuation`.

        Args:
            token: The current continuation token. When omitted (and not ``force``), the token
                stored in ``session`` is used.

        Keyword Args:
            force: Owner-only recovery without a token; never expose it to untrusted callers.
            session: The session the paused run was called with; its stored token is removed
                once the continuation is abandoned.

        Raises:
            ContinuationAuthorityError: Missing, wrong, spent or expired token without ``force``;
                nothing changes.
            WorkflowRunningError: A run is in progress.
        """
        if token is None and not force:
            token = session_token(session, self.id)
        await self._workflow.abandon_continuation_async(token, force=force)
        self._forget_abandoned(session)

    def _forget_abandoned(self, session: AgentSession | None) -> None:
        self._answers_so_far, self._answers_token = {}, None
        if session is not None:
            clear_session_token(session, self.id)

    @overload
    def run(
        self,
        messages: Any | None = None,
        *,
        stream: Literal[False] = ...,
        session: AgentSession | None = None,
        responses: Mapping[str, Any] | None = None,
        continuation_token: Mapping[str, Any] | None = None,
        checkpoint_id: str | None = None,
        checkpoint_storage: CheckpointStorage | None = None,
        options: Mapping[str, Any] | None = None,
        tools: Any | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Awaitable[AgentResponse]: ...

    @overload
    def run(
        self,
        messages: Any | None = None,
        *,
        stream: Literal[True],
        session: AgentSession | None = None,
        responses: Mapping[str, Any] | None = None,
        continuation_token: Mapping[str, Any] | None = None,
        checkpoint_id: str | None = None,
        checkpoint_storage: CheckpointStorage | None = None,
        options: Mapping[str, Any] | None = None,
        tools: Any | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ResponseStream[AgentResponseUpdate, AgentResponse]: ...

    def run(
        self,
        messages: Any | None = None,
        *,
        stream: bool = False,
        session: AgentSession | None = None,
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
        """Run the workflow and answer as an agent; every check raises here, synchronously.

        Args:
            messages: Chat input (``str``, ``Message``, ``Content`` or a list of them; mapped to the
                workflow input as the class docstring says) or any other value (passed as given).
                While a continuation is pending, messages that carry only answers
                (``function_approval_response`` / ``function_result`` contents) resume it.

        Keyword Args:
            stream: True for ``ResponseStream[AgentResponseUpdate, AgentResponse]``.
            session: The conversation session: context providers keep their state in it, and a
                run that pauses stores its continuation token there for a later resume.
            responses: Answers keyed by request id (see :attr:`pending_requests`), passed to the
                workflow unchanged.
            continuation_token: The token from the paused response; overrides ``options`` and
                the session.
            checkpoint_id: Restore this checkpoint; needs no token.
            checkpoint_storage: Checkpoint storage for this run.
            options: Run options. ``continuation_token`` is read as the resume token (core's
                convention for resumable agents); the mapping is given to context providers as
                ``SessionContext.options``.
            tools: Forwarded to the workflow run as a run keyword argument when not None.
            function_invocation_kwargs: Forwarded like ``tools`` (orchestrations pass it).
            client_kwargs: Forwarded like ``tools`` (orchestrations pass it).
            **kwargs: Forwarded to :meth:`FunctionalWorkflow.run`.

        Returns:
            An awaitable ``AgentResponse`` or a response stream whose last update carries the token.

        Raises:
            ValueError: Wrong argument shape; no response names a pending request; an answer
                matches no pending request or cannot be converted to its ``response_type``.
            TypeError: ``options`` is not a mapping; an ``input_mapper`` agent got non-chat input.
            ContinuationAuthorityError: A resume without valid authority.
            PendingContinuationError: New input or a checkpoint restore while a continuation is pending.
            WorkflowRunningError: The workflow is already running.

        With a continuation store, a resume whose token this process does not hold raises these
        (except the argument-shape errors and a malformed token, which still raise here) on the
        first ``await`` of the result or the first iteration of the stream, not at this call; the
        rejected call changes nothing.
        """
        plan = self._plan(
            messages,
            session=session,
            responses=responses,
            continuation_token=continuation_token,
            checkpoint_id=checkpoint_id,
            checkpoint_storage=checkpoint_storage,
            options=options,
            run_kwargs={
                **{
                    name: value
                    for name, value in (
                        ("tools", tools),
                        ("function_invocation_kwargs", function_invocation_kwargs),
                        ("client_kwargs", client_kwargs),
                    )
                    if value is not None
                },
                **kwargs,
            },
        )
        response_id = uuid.uuid4().hex
        if stream:
            agent_stream: ResponseStream[AgentResponseUpdate, AgentResponse] = ResponseStream(
                self._run_updates(plan, response_id),
                finalizer=AgentResponse.from_updates,
                # close() of an agent stream that was never iterated closes the workflow stream too,
                # so the workflow run is released (and an unstarted resume hands its claim back).
                cleanup_hooks=[functools.partial(_close_workflow_stream, plan)],
            )
            # Only the agent stream keeps the workflow stream alive: dropping it unfinished drops the
            # workflow stream at once, whose weak finalizer frees the workflow instance (instead of
            # waiting for the event loop to close the abandoned generator).
            weakref.finalize(agent_stream, _drop_workflow_stream, plan).atexit = False
            return agent_stream
        return self._respond(plan, response_id)

    def run_stream(
        self, messages: Any | None = None, **kwargs: Any
    ) -> ResponseStream[AgentResponseUpdate, AgentResponse]:
        """Alias of ``run(messages, stream=True, **kwargs)``.

        Args:
            messages: As for :meth:`run`.
            **kwargs: Any keyword argument of :meth:`run` except ``stream``.

        Returns:
            The response stream.

        Raises:
            TypeError: If ``stream`` is passed.
        """
        if "stream" in kwargs:
            raise TypeError("run_stream() always streams; call run(..., stream=False) for a single response.")
        return self.run(messages, stream=True, **kwargs)

    # ------------------------------------------------------------------ acceptance (synchronous)

    def _plan(
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
    ) -> _RunPlan:
        """Accept or reject the call, in the workflow's contract order, before anything runs."""
        if options is not None and not isinstance(options, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError("'options' must be a mapping of run options, for example {'continuation_token': token}.")
        input_messages = chat_messages(messages)
        plan = _RunPlan(
            raw_input=messages,
            input_messages=input_messages,
            session=session,
            options=dict(options or {}),
            checkpoint_storage=checkpoint_storage,
            run_kwargs=run_kwargs,
        )
        answers = answer_contents(input_messages) if responses is None and checkpoint_id is None else []
        only_answers = bool(answers) and not has_other_contents(input_messages)
        if answers and (only_answers or self._workflow.has_pending_continuation):
            # Chat-native resume: authority first, then the answers (nothing leaks without the token).
            token = resolve_token(continuation_token, options, session, self.id)
            pending = check_authority(self._workflow, token)
            if pending is None:
                # Durable: a pause this process does not hold. The store lookup is asynchronous, so
                # authority, conflict and the answers are checked in the run, in the same order.
                plan.deferred_resume = _DeferredResume(token=token, answers=answers, only_answers=only_answers)
                return plan
            self._start_chat_resume(plan, token, answers, only_answers, pending)
            return plan
        if responses is not None or checkpoint_id is not None:
            # Explicit resume or checkpoint restore: the workflow runs every check at this call.
            token = (
                resolve_token(continuation_token, options, session, self.id)
                if responses is not None and checkpoint_id is None
                else continuation_token
            )
            plan.answers = dict(responses) if isinstance(responses, Mapping) else {}
            plan.workflow_stream = self._workflow.run(
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
        if self._workflow.has_pending_continuation:
            raise PendingContinuationError(_AGENT_PENDING_MESSAGE)
        if self._workflow.is_running:
            raise WorkflowRunningError()
        if self._input_mapper is not None and not is_chat_input(messages):
            raise TypeError(
                "This agent has an input_mapper, which maps chat input: pass str, Message, Content or a list of them."
            )
        if self._input_mapper is None and self._input_mode != "messages":
            workflow_input = map_input(self._input_mode, messages, input_messages, input_messages, None)
            plan.workflow_stream = self._workflow.run(
                workflow_input, stream=True, checkpoint_storage=checkpoint_storage, **run_kwargs
            )
        return plan

    def _start_chat_resume(
        self,
        plan: _RunPlan,
        token: Any,
        answers: Sequence[Content],
        only_answers: bool,
        pending: Mapping[str, WorkflowEvent[Any]],
    ) -> None:
        """After authority passed: check and convert the answers, then start the workflow's resume."""
        if not only_answers:
            raise ValueError(
                "While a continuation is pending, send the answers alone: messages whose contents are only "
                "function_approval_response / function_result contents for the pending requests. Send new "
                "text after the workflow finished. The continuation is still pending."
            )
        converted = _answers_to_responses(answers, pending)
        earlier = self._answers_so_far if self._answers_token == dict(token) else {}
        answers_so_far = {**earlier, **converted}
        plan.workflow_stream = self._workflow.run(
            stream=True,
            responses=answers_so_far,
            continuation_token=token,
            checkpoint_storage=plan.checkpoint_storage,
            **plan.run_kwargs,
        )
        plan.answers = answers_so_far

    async def _accept_deferred_resume(self, plan: _RunPlan, deferred: _DeferredResume) -> None:
        """Accept a chat-native resume of a pause held elsewhere: store authority, conflict, answers.

        The same order and errors as the synchronous path; a rejection raises before anything ran
        or changed (the store is only read; the claim happens inside the workflow run).
        """
        pending = await check_authority_async(self._workflow, deferred.token)
        if self._workflow.has_pending_continuation:
            raise PendingContinuationError(_AGENT_PENDING_MESSAGE)
        self._start_chat_resume(plan, deferred.token, deferred.answers, deferred.only_answers, pending)

    # ------------------------------------------------------------------ run (shared by both modes)

    async def _respond(self, plan: _RunPlan, response_id: str) -> AgentResponse:
        updates = [update async for update in self._run_updates(plan, response_id)]
        response = AgentResponse.from_updates(updates)
        response.response_id = response_id
        response.agent_id = self.id
        return response

    async def _run_updates(self, plan: _RunPlan, response_id: str) -> AsyncIterable[AgentResponseUpdate]:
        """Providers before, the workflow's events as updates, session bookkeeping, providers after.

        The token update comes last (nothing may follow it: core's ``from_updates`` keeps the last
        update's token), so the after-run providers see the full response before it is yielded.
        The workflow stream lives only in ``plan`` (no local holds it across a ``yield``), so a
        dropped agent stream releases the workflow run at once (see :meth:`run`).
        """
        token: FunctionalWorkflowContinuationToken | None = None
        finished = False
        updates: list[AgentResponseUpdate] = []
        live_text = LiveText()
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
                    self._input_mode, plan.raw_input, plan.input_messages, conversation, self._input_mapper
                )
                plan.workflow_stream = self._workflow.run(
                    workflow_input, stream=True, checkpoint_storage=plan.checkpoint_storage, **plan.run_kwargs
                )
            while True:
                try:
                    event = await _next_event(plan)
                except StopAsyncIteration:
                    break
                for update in self._event_to_updates(event, response_id, live_text):
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
                self._answers_so_far, self._answers_token = plan.answers, dict(token)
            elif not self._workflow.has_pending_continuation:
                self._answers_so_far, self._answers_token = {}, None
        final_update = (
            AgentResponseUpdate(
                contents=[],
                role="assistant",
                author_name=self.name,
                agent_id=self.id,
                response_id=response_id,
                continuation_token=token,
            )
            if token is not None
            else None
        )
        if final_update is not None:
            updates.append(final_update)
        set_context_response(context, AgentResponse.from_updates(updates))
        await self._run_after_providers(session=provider_session, context=context)
        if final_update is not None:
            yield final_update

    async def _before_run(self, plan: _RunPlan) -> tuple[AgentSession | None, SessionContext]:
        """Run the context providers' ``before_run`` exactly as core's graph ``WorkflowAgent`` does."""
        if plan.session is not None and not any(
            provider.load_messages for provider in self.context_providers if isinstance(provider, HistoryProvider)
        ):
            self.context_providers.append(InMemoryHistoryProvider())
        provider_session = plan.session
        if provider_session is None and self.context_providers:
            provider_session = AgentSession()
        context = SessionContext(
            session_id=provider_session.session_id if provider_session else None,
            service_session_id=provider_session.service_session_id if provider_session else None,
            input_messages=list(plan.input_messages),
            options=dict(plan.options),
        )
        for provider in self.context_providers:
            if isinstance(provider, HistoryProvider) and not provider.load_messages:
                continue
            assert provider_session is not None
            await provider.before_run(
                agent=self,
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
            store_session_token(session, self.id, token)
            return
        stored = session_token(session, self.id)
        if stored is not None and not await token_is_current(self._workflow, stored):
            clear_session_token(session, self.id)

    # ------------------------------------------------------------------ conversion (shared)

    def _event_to_updates(
        self, event: WorkflowEvent[Any], response_id: str, live_text: LiveText | None = None
    ) -> list[AgentResponseUpdate]:
        """Convert one workflow event to agent updates; the one conversion both run modes use.

        ``live_text`` records what the run streamed live, so an output that repeats it adds nothing
        (no text twice; see ``LiveText``).
        """
        if event.type == "intermediate":
            update = live_update_to_agent_update(
                event.data, author_name=self.name, agent_id=self.id, response_id=response_id
            )
            if update is None:
                return []
            if live_text is not None:
                live_text.add(update)
            return [update]
        if event.type == "output":
            contents = _output_contents(event.data)
            if live_text is not None and live_text.repeats(contents):
                return []
        elif event.type == "request_info" and event.request_id:
            contents = [self._approval_request(event)]
        else:
            return []
        if not contents:
            return []
        return [
            AgentResponseUpdate(
                contents=contents,
                role="assistant",
                author_name=self.name,
                agent_id=self.id,
                response_id=response_id,
                message_id=uuid.uuid4().hex,
            )
        ]

    def _approval_request(self, event: WorkflowEvent[Any]) -> Content:
        request_id = event.request_id
        function_call = Content.from_function_call(
            call_id=request_id,
            name=REQUEST_INFO_FUNCTION_NAME,
            arguments={"request_id": request_id, "data": request_data_to_json(event.data)},
        )
        return Content.from_function_approval_request(
            id=request_id,
            function_call=function_call,
            additional_properties={"request_id": request_id},
        )


def _output_contents(data: Any) -> list[Content]:
    """Contents for a workflow output: text, ``Content``, ``Message`` or agent response as-is."""
    if data is None:
        return []
    if isinstance(data, str):
        return [Content.from_text(text=data)]
    if isinstance(data, Content):
        return [data]
    if isinstance(data, Message):
        return list(data.contents)
    if isinstance(data, AgentResponse):
        return [content for message in data.messages for content in message.contents]  # pyright: ignore[reportUnknownVariableType]
    if isinstance(data, list) and all(isinstance(item, (Message, Content)) for item in data):  # pyright: ignore[reportUnknownVariableType]
        return [c for item in data for c in (item.contents if isinstance(item, Message) else [item])]  # pyright: ignore[reportUnknownVariableType]
    return [Content.from_text(text=str(cast(object, data)))]
