"""FunctionalWorkflowAgent: a functional workflow exposed as a core ``BaseAgent``."""

from __future__ import annotations

import functools
import uuid
import weakref
from collections.abc import AsyncIterable, Awaitable, Mapping, Sequence
from typing import Any, Literal, overload

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    BaseAgent,
    CheckpointStorage,
    Content,
    Message,
    ResponseStream,
    WorkflowEvent,
)
from pydantic_core import to_jsonable_python

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


class FunctionalWorkflowAgent(BaseAgent):
    """A functional workflow as a chat agent that carries the continuation token.

    * Non-streaming: ``AgentResponse.continuation_token`` is the workflow's token (None when the
      workflow finished).
    * Streaming: the last ``AgentResponseUpdate`` of the stream carries the token, so both
      ``AgentResponse.from_updates(updates)`` and ``stream.get_final_response()`` expose it (core's
      ``from_updates`` keeps the last update's token, so nothing may follow the token update).
    * Each pending ``request_info`` surfaces as a ``function_approval_request`` content whose ``id``
      (and function call ``call_id``) is the request id and whose arguments carry JSON-safe request
      data, as core's functional agent does.
    * :attr:`pending_requests` is read from the workflow, so it always equals the workflow's
      pending continuation: set when a run pauses, empty from the moment a resume is accepted,
      untouched by a rejected call, empty after a failed or cancelled run and after abandonment.

    Args:
        workflow: The workflow instance this agent drives (one agent per instance).

    Keyword Args:
        id: Agent id; defaults to ``FunctionalWorkflowAgent_<name>``.
        name: Agent name; defaults to the workflow name.
        description: Agent description; defaults to the workflow description.
        context_providers: Core context providers, kept on the agent.
        middleware: Core middleware, kept on the agent.
        additional_properties: Extra properties of the agent.

    Examples:
        .. code-block:: python

            agent = review.build().as_agent(name="reviewer")
            paused = await agent.run("tea")
            request_id = next(iter(agent.pending_requests))
            done = await agent.run(
                responses={request_id: "ship it"}, continuation_token=paused.continuation_token
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
    ) -> None:
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

    @property
    def workflow(self) -> FunctionalWorkflow:
        """The workflow instance this agent drives."""
        return self._workflow

    @property
    def pending_requests(self) -> Mapping[str, WorkflowEvent[Any]]:
        """Read-only mapping request id -> ``request_info`` event, always the workflow's pending view."""
        return self._workflow.pending_requests

    def abandon_continuation(self, token: Mapping[str, Any] | None = None, *, force: bool = False) -> None:
        """Abandon the workflow's pending continuation; see :meth:`FunctionalWorkflow.abandon_continuation`.

        Args:
            token: The current continuation token (required unless ``force``).

        Keyword Args:
            force: Owner-only recovery without a token; never expose it to untrusted callers.

        Raises:
            ContinuationAuthorityError: Missing or wrong token without ``force``; nothing changes.
            WorkflowRunningError: A run is in progress.
        """
        self._workflow.abandon_continuation(token, force=force)

    @overload
    def run(
        self,
        messages: Any | None = None,
        *,
        stream: Literal[False] = ...,
        session: Any | None = None,
        responses: Mapping[str, Any] | None = None,
        continuation_token: Mapping[str, Any] | None = None,
        checkpoint_id: str | None = None,
        checkpoint_storage: CheckpointStorage | None = None,
        **kwargs: Any,
    ) -> Awaitable[AgentResponse]: ...

    @overload
    def run(
        self,
        messages: Any | None = None,
        *,
        stream: Literal[True],
        session: Any | None = None,
        responses: Mapping[str, Any] | None = None,
        continuation_token: Mapping[str, Any] | None = None,
        checkpoint_id: str | None = None,
        checkpoint_storage: CheckpointStorage | None = None,
        **kwargs: Any,
    ) -> ResponseStream[AgentResponseUpdate, AgentResponse]: ...

    def run(
        self,
        messages: Any | None = None,
        *,
        stream: bool = False,
        session: Any | None = None,
        responses: Mapping[str, Any] | None = None,
        continuation_token: Mapping[str, Any] | None = None,
        checkpoint_id: str | None = None,
        checkpoint_storage: CheckpointStorage | None = None,
        **kwargs: Any,
    ) -> Awaitable[AgentResponse] | ResponseStream[AgentResponseUpdate, AgentResponse]:
        """Run the workflow and answer as an agent; the workflow's checks raise here, synchronously.

        Args:
            messages: Input for a fresh run, passed to the workflow as given.

        Keyword Args:
            stream: True for ``ResponseStream[AgentResponseUpdate, AgentResponse]``.
            session: Accepted for the agent protocol; not used by this adapter yet.
            responses: Answers keyed by request id (see :attr:`pending_requests`).
            continuation_token: The token from the paused response.
            checkpoint_id: Restore this checkpoint; needs no token.
            checkpoint_storage: Checkpoint storage for this run.
            **kwargs: Forwarded to :meth:`FunctionalWorkflow.run`.

        Returns:
            An awaitable ``AgentResponse`` or a response stream whose last update carries the token.

        Raises:
            ValueError: Wrong argument shape, or no response names a pending request.
            ContinuationAuthorityError: A resume without valid authority.
            PendingContinuationError: New input while a continuation is pending.
            WorkflowRunningError: The workflow is already running.
        """
        del session
        response_id = uuid.uuid4().hex
        if stream:
            workflow_stream = self._workflow.run(
                messages,
                stream=True,
                responses=responses,
                continuation_token=continuation_token,
                checkpoint_id=checkpoint_id,
                checkpoint_storage=checkpoint_storage,
                **kwargs,
            )
            # Only the agent stream owns the workflow stream (the generator reads it through the
            # holder), so dropping the agent stream drops the workflow stream at once and its weak
            # finalizer frees the instance. A generator frame holding it would keep it alive until
            # the event loop gets round to closing the abandoned generator.
            holder = [workflow_stream]
            del workflow_stream
            agent_stream: ResponseStream[AgentResponseUpdate, AgentResponse] = ResponseStream(
                self._stream_updates(holder, response_id),
                finalizer=AgentResponse.from_updates,
                # Closing, failing or finishing the agent stream closes the workflow stream (also
                # when the agent stream was never iterated).
                cleanup_hooks=[functools.partial(_close_held_stream, holder)],
            )
            weakref.finalize(agent_stream, holder.clear).atexit = False
            return agent_stream
        result = self._workflow.run(
            messages,
            responses=responses,
            continuation_token=continuation_token,
            checkpoint_id=checkpoint_id,
            checkpoint_storage=checkpoint_storage,
            **kwargs,
        )
        return self._respond(result, response_id)

    def run_stream(self, messages: Any | None = None, **kwargs: Any) -> ResponseStream[AgentResponseUpdate, AgentResponse]:
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

    # ------------------------------------------------------------------ conversion (shared)

    async def _respond(self, result: Awaitable[FunctionalWorkflowRunResult], response_id: str) -> AgentResponse:
        run_result = await result
        updates = [update for event in run_result for update in self._event_to_updates(event, response_id)]
        response = AgentResponse.from_updates(updates)
        response.response_id = response_id
        response.agent_id = self.id
        response.continuation_token = run_result.continuation_token
        return response

    async def _stream_updates(
        self,
        holder: list[ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult]],
        response_id: str,
    ) -> AsyncIterable[AgentResponseUpdate]:
        # No local reference to the workflow stream survives a yield: see run(stream=True).
        while True:
            try:
                event = await holder[0].__anext__()
            except StopAsyncIteration:
                break
            for update in self._event_to_updates(event, response_id):
                yield update
        run_result = await holder[0].get_final_response()
        if run_result.continuation_token is not None:
            # Last update, nothing after it: core's from_updates keeps the last update's token.
            yield AgentResponseUpdate(
                contents=[],
                role="assistant",
                author_name=self.name,
                agent_id=self.id,
                response_id=response_id,
                continuation_token=run_result.continuation_token,
            )

    def _event_to_updates(self, event: WorkflowEvent[Any], response_id: str) -> list[AgentResponseUpdate]:
        """Convert one workflow event to agent updates; the one conversion both run modes use."""
        if event.type == "output":
            contents = _output_contents(event.data)
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


async def _close_held_stream(holder: list[ResponseStream[WorkflowEvent[Any], FunctionalWorkflowRunResult]]) -> None:
    """Cleanup hook of an agent stream: close the workflow stream it holds, if it still holds one."""
    if holder:
        await holder[0].close()


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
    return [Content.from_text(text=str(data))]
