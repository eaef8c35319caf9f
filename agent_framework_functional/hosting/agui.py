"""AG-UI in one call: :func:`agui_endpoint` serves a FunctionalWorkflowAgent to CopilotKit and other AG-UI clients."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from inspect import isawaitable
from typing import Any

from agent_framework import (
    AgentResponseUpdate,
    AgentSession,
    Content,
    ContextProvider,
    SessionStore,
    WorkflowEvent,
)
from agent_framework_ag_ui import (
    AgentFrameworkAgent,
    AGUIThreadSnapshot,
    AGUIThreadSnapshotStore,
    add_agent_framework_fastapi_endpoint,
)
from fastapi import Depends, FastAPI, Request

from .._agent import FunctionalWorkflowAgent
from .._answers import value_result
from .._chat import answers_to_responses
from .._core_compat import agui_approval_state, agui_session_id_for_thread, expire_agui_open_approvals
from .._errors import ContinuationAuthorityError, ResponseMismatchError
from .._session import SESSION_STATE_KEY, session_token
from .._updates import REQUEST_INFO_FUNCTION_NAME, published_requests, token_tag
from ._adapter import ANSWER_FIELD, HostedAgent, as_messages, replace_contents
from ._agui_approvals import UnsavedThreads, bound_approval_state, restore_open_approvals
from ._agui_resume import ResumeAnswer, payload_answer, read_answers, read_request, refuse
from ._body_limit import BodyLimit
from ._snapshots import snapshot_store_for
from ._sweep import DEFAULT_RELEASE_MEMORY_EVERY, DEFAULT_SWEEP_EVERY, add_upkeep

DEFAULT_MAX_BODY_BYTES = 1_000_000
"""Largest request body :func:`agui_endpoint` reads (bytes); a larger one is refused with 413."""

DEFAULT_MAX_RUNS = 512
"""Runs one endpoint keeps going at once (AG-UI's ``max_detached_runs``); more get 503 until one ends."""


class ReservedSessionState(ContextProvider):
    """Names the package's ``session.state`` key (AG-UI merges no client ``state`` into a provider's key)."""

    def __init__(self) -> None:
        super().__init__(SESSION_STATE_KEY)


def _with_answer_slot(content: Content) -> Content:
    """A ``request_info`` call (or its approval request) with an ``answer`` slot AG-UI's edited arguments can fill."""
    call = content.function_call if content.type == "function_approval_request" else content
    if call is None or call.type != "function_call" or call.name != REQUEST_INFO_FUNCTION_NAME:
        return content
    arguments = call.parse_arguments() or {}
    if ANSWER_FIELD in arguments:
        return content
    raw = content.to_dict()
    target = raw["function_call"] if content.type == "function_approval_request" else raw
    target["arguments"] = {**arguments, ANSWER_FIELD: None}
    return Content.from_dict(raw)


def _approval_as_answer(content: Content) -> Content:
    """An approval whose edited arguments carry a non-null ``answer``, as that answer's ``function_result``."""
    if content.type != "function_approval_response" or content.approved is not True or content.function_call is None:
        return content
    value = (content.function_call.parse_arguments() or {}).get(ANSWER_FIELD)
    request_id = content.id or content.function_call.call_id
    if value is None or not request_id:
        return content
    return value_result(request_id, value)


class AGUIAgent(HostedAgent):
    """The agent as AG-UI sees it: its session key protected, resume payloads turned into answer contents."""

    def __init__(self, agent: FunctionalWorkflowAgent, unsaved: UnsavedThreads | None = None) -> None:
        super().__init__(agent)
        self.unsaved = unsaved

    def run(
        self, messages: Any = None, *, stream: bool = False, session: AgentSession | None = None, **kwargs: Any
    ) -> Any:
        """The agent's run as a turn of the thread until its snapshot is saved or it fails (else ConversationBusy)."""
        unsaved = self.unsaved
        if unsaved is None or session is None or not stream:
            return super().run(messages, stream=stream, session=session, **kwargs)
        turn = unsaved.begin(session)
        failed = functools.partial(unsaved.end, session.session_id)
        try:
            return turn.stream(super().run(messages, stream=True, session=session, **kwargs), save=False, failed=failed)
        except BaseException:
            turn.end()
            failed()
            raise

    @property
    def context_providers(self) -> list[Any]:
        """The wrapped agent's providers plus :class:`ReservedSessionState` (read by AG-UI, never run)."""
        return [*self.agent.context_providers, ReservedSessionState()]

    def answers_in(self, messages: Any, session: AgentSession | None) -> Any:
        """Approvals carrying an ``answer`` become ``function_result`` contents; everything else is unchanged."""
        found = as_messages(messages)
        return messages if found is None else replace_contents(found, _approval_as_answer)

    def updates_out(self, stream: Any) -> Any:
        """Each streamed ``request_info`` call gets its ``answer`` slot."""

        def slot(update: AgentResponseUpdate) -> AgentResponseUpdate:
            update.contents = [_with_answer_slot(content) for content in update.contents]
            return update

        return stream.with_update_transform(slot)


async def check_request(
    body: Any,
    agent: FunctionalWorkflowAgent,
    scope: str,
    snapshot_store: AGUIThreadSnapshotStore,
    runner: AgentFrameworkAgent | None = None,
) -> None:
    """Refuse (``HTTPException`` 400) what AG-UI would let through and leave a paused thread stuck.

    Refused: client ``state`` naming our session key; an entry not ``resolved``, not pending, or whose answer does
    not convert (also for another worker's pause, whose interrupts are then registered in ``runner``). A pause
    whose thread lost its snapshot is not pending; new input expires its approvals (the only change made here).
    """
    request = read_request(body)
    if request is None:
        return  # AG-UI refuses the body itself
    _refuse_reserved_state(request.get("state"))
    answers = read_answers(request)
    thread_id = request.get("thread_id")
    if not isinstance(thread_id, str):
        return
    session = AgentSession(session_id=agui_session_id_for_thread(scope=scope, thread_id=thread_id))
    pending = agent.pending_requests_for(session)
    local = agent.workflow_for(session)
    if pending and local is not None:
        orphaned, not_its_pause = await _local_pause_state(snapshot_store, scope, thread_id, agent, local.pending_tag())
        if orphaned or not_its_pause:
            pending = {}  # answers are checked against the thread's own pause (its token), if it has one
        if orphaned and not answers:
            if runner is not None:
                expire_agui_open_approvals(runner, scope=scope, thread_id=thread_id)
            return
    if answers:
        await _check_answers(answers, agent, session, pending, (scope, thread_id, snapshot_store, runner))


async def _local_pause_state(
    snapshot_store: AGUIThreadSnapshotStore, scope: str, thread_id: str, agent: FunctionalWorkflowAgent, tag: str | None
) -> tuple[bool, bool]:
    """Whether the pause held here is orphaned (no snapshot or key, none unsaved), and not the snapshot token's."""
    if isinstance(snapshot_store, UnsavedThreads) and snapshot_store.unsaved(scope, thread_id):
        return False, False
    snapshot = await snapshot_store.get(scope=scope, thread_id=thread_id)
    state = (snapshot.session_state or {}) if snapshot is not None else {}
    if SESSION_STATE_KEY not in state:
        return True, True
    thread_session = AgentSession(session_id=thread_id)
    thread_session.state.update(state)
    token = session_token(thread_session, agent.id)
    return False, token is None or token_tag(token) != tag


async def _check_answers(
    answers: list[ResumeAnswer],
    agent: FunctionalWorkflowAgent,
    session: AgentSession,
    pending: Mapping[str, WorkflowEvent[Any]],
    where: tuple[str, str, AGUIThreadSnapshotStore, AgentFrameworkAgent | None],
) -> None:
    """The answers against the pause's requests, held here or (through the snapshot's token) elsewhere."""
    scope, thread_id, snapshot_store, runner = where
    snapshot = None if pending else await snapshot_store.get(scope=scope, thread_id=thread_id)
    open_ids = set(pending) or {str(i.get("id")) for i in (snapshot.interrupt or [] if snapshot is not None else [])}
    answers = [a for a in answers if not a.from_tool_message or a.interrupt_id in open_ids]
    if not answers:
        return  # tool results AG-UI does not read as approvals
    _refuse_unfit(answers, open_ids)
    if not pending:
        pending = await _held_elsewhere(agent, session, snapshot)
    for answer in answers:  # converted as the agent will, so a wrong one is refused before AG-UI claims it
        try:
            answers_to_responses([payload_answer(answer.interrupt_id, answer.payload)], pending)
        except ResponseMismatchError as exc:
            raise refuse(str(exc)) from None
    if runner is not None and snapshot is not None:
        restore_open_approvals(runner, scope, thread_id, snapshot)


async def _held_elsewhere(
    agent: FunctionalWorkflowAgent, session: AgentSession, snapshot: AGUIThreadSnapshot | None
) -> Mapping[str, WorkflowEvent[Any]]:
    """The requests of a pause this process does not hold, read through the snapshot's token (the claim decides)."""
    restored = AgentSession(session_id=session.session_id)
    restored.state.update(copy.deepcopy(snapshot.session_state or {}) if snapshot is not None else {})
    try:
        verified = await agent.workflow.verify_continuation_token_async(session_token(restored, agent.id))
    except ContinuationAuthorityError:
        raise refuse(
            "This thread's pause can no longer be resumed (answered, abandoned, expired, or kept by no "
            "continuation store this server reads); nothing was run. Send new input as a run without 'resume'."
        ) from None
    return published_requests(verified, token_tag(verified))  # the interrupts' ids, as the agent published them


def _refuse_reserved_state(state: Any) -> None:
    if isinstance(state, dict) and SESSION_STATE_KEY in state:
        raise refuse(
            f"The state key {SESSION_STATE_KEY!r} is reserved: the server keeps each thread's pause there. "
            "Remove it from the client state and send the request again."
        )


def _refuse_unfit(answers: list[ResumeAnswer], open_ids: set[str]) -> None:
    """Each entry must be ``resolved`` and name an interrupt pending here, or open in the thread's snapshot."""
    for answer in answers:
        if answer.status != "resolved":
            raise refuse(
                "Only status 'resolved' is accepted: a cancelled interrupt never reaches the workflow, which stays "
                "paused, and the thread then accepts nothing. Decline a bool request with "
                "{'approved': false}, or answer the request; its owner can abandon the pause."
            )
    for answer in answers:
        if answer.interrupt_id not in open_ids:
            raise refuse(
                f"Interrupt {answer.interrupt_id!r} is not pending on this thread (already answered, or never "
                "raised); nothing was run. Read the thread's latest run (its RUN_FINISHED) before answering, and "
                "send new input as a run without 'resume'."
            )


def agui_endpoint(
    app: FastAPI,
    agent: FunctionalWorkflowAgent,
    path: str = "/",
    *,
    snapshot_store: AGUIThreadSnapshotStore | SessionStore | None = None,
    single_user: bool = False,
    authorization_scope_resolver: Callable[..., str | Awaitable[str]] | None = None,
    dependencies: Sequence[Any] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_runs: int = DEFAULT_MAX_RUNS,
    release_memory_every: float | None = DEFAULT_RELEASE_MEMORY_EVERY,
    sweep_every: float | None = DEFAULT_SWEEP_EVERY,
) -> None:
    """Serve ``agent`` at ``POST path`` over AG-UI, set up the way a pausing agent needs ("AG-UI" in the docs).

    Args:
        app: The FastAPI app, not started yet.
        agent: The agent; one object serves every thread.
        path: The route.

    Keyword Args:
        snapshot_store: Where thread snapshots live: a package session store (shared by workers), any
            ``AGUIThreadSnapshotStore``, or None (bounded, in memory).
        single_user: Every caller is one user (one scope). Give exactly one of this and the resolver.
        authorization_scope_resolver: A FastAPI dependency returning the caller's scope; scopes are kept apart.
        dependencies: More FastAPI dependencies for the route (authentication), run first.
        max_body_bytes: The largest request body read.
        max_runs: Runs kept going at once (AG-UI's ``max_detached_runs``); more get 503.
        release_memory_every: Seconds between two ``malloc_trim`` after requests (glibc only); None: never.
        sweep_every: Seconds between two sweeps of expired pauses (at most a quarter TTL); None: on access only.

    Raises:
        ValueError: Not exactly one of ``single_user`` and the resolver, or a bad interval.
        TypeError: ``snapshot_store`` is a core ``SessionStore`` that is not one of the package's.
    """
    if single_user == (authorization_scope_resolver is not None):
        raise ValueError(
            "agui_endpoint needs exactly one of single_user=True (every caller is one user) and "
            "authorization_scope_resolver= (a dependency returning the caller's scope)."
        )
    snapshots = UnsavedThreads(snapshot_store_for(snapshot_store, agent), agent)
    runner = AgentFrameworkAgent(agent=AGUIAgent(agent, snapshots), snapshot_store=snapshots)  # pyright: ignore[reportArgumentType]
    bound_approval_state(runner, agent)
    # One scope on every worker serving this agent at this path (a shared store finds the thread on any of them).
    single_scope = f"agent-framework-functional:single-user:{path}:{agent.name or agent.id}"

    async def single_user_scope() -> str:  # async: FastAPI runs a plain function in a worker thread
        return single_scope

    resolver = authorization_scope_resolver or single_user_scope

    async def guard(request: Request, scope: Any = Depends(resolver)) -> None:  # noqa: B008 (FastAPI's way)
        if isawaitable(scope):
            scope = await scope
        if not isinstance(scope, str) or not scope:
            return  # AG-UI answers a bad scope itself
        try:
            body = json.loads(await request.body())
        except (ValueError, RecursionError):
            return  # FastAPI has refused it already
        await check_request(body, agent, scope, snapshots, runner)

    async def purge_approvals() -> int:  # AG-UI expires and drops approvals past their retention on any read
        agui_approval_state(runner).lifecycle.pending_interrupt_ids(thread_id="")
        return 0  # AG-UI does not say how many; the agent's lapse of the same pauses counts them

    add_upkeep(app, agent, release_memory_every, sweep_every, stores=[snapshots.store], purges=[purge_approvals])
    add_agent_framework_fastapi_endpoint(
        app,
        runner,
        path,
        snapshot_store=snapshots,
        authorization_scope_resolver=resolver,
        dependencies=[*dependencies, Depends(guard)],
        detached_runs=True,
        max_detached_runs=max_runs,
    )
    app.add_middleware(BodyLimit, path=path, max_bytes=max_body_bytes)
