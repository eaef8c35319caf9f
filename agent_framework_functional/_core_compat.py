"""The few places this package touches core's private API, kept together so they are easy to audit.

Each name here is used by core itself for the same job; ``tests/test_agent_protocol.py`` imports
every one of them, so an upgrade of core that moves them fails loudly instead of silently.

* ``is_instance_of`` / ``try_coerce_to_type`` (``agent_framework._workflows._typing_utils``): the
  rules core applies to a ``request_info`` response (``_coerce_request_info_response``). Chat-native
  answers are converted with the same rules before a resume is accepted, so core cannot reject the
  value later, after the continuation token was spent.
* ``_coerce_request_info_response`` (``agent_framework._workflows._workflow``): core's exact check of
  a response against its request's ``response_type`` (also turning ``str`` into ``Content``). A
  response-only resume runs it on every answer to a pending request before the token is claimed.
* ``SessionContext._response``: core's graph ``WorkflowAgent`` sets it before the after-run
  providers; ``SessionContext`` has no public setter.
* ``RunContext._events``: the events core's functional engine collected so far in a run (it yields
  them only after the workflow function returns). Live streaming reads it so that those events go
  out ahead of a later live update, in production order (``tests/test_live_streaming.py`` pins it).
* ``agent_framework._feature_stage.experimental``: core's experimental marker (``__feature_stage__``,
  the docstring note, one ``ExperimentalWarning`` per feature), applied to our functional workflow
  API with core's ``FUNCTIONAL_WORKFLOWS`` feature id, so it is marked exactly as core's is.
* ``categorize_middleware`` (``agent_framework._middleware``) and the agent layers' helpers
  ``AgentMiddlewareLayer._get_agent_middleware_pipeline`` / ``AgentTelemetryLayer._trace_agent_invocation``:
  the agent inherits core's two layers but runs them itself (``_agent_layers.py``), because their
  ``run`` drops the agent's resume arguments (``tests/test_agent_layers.py`` pins them).
* ``FunctionalWorkflow._run_core`` / ``_finalize_events`` / ``_run_cleanup`` / ``_ensure_not_running``:
  what core's ``run(stream=False)`` wraps. A non-streaming run must pull core's first events (to
  spend the token right before user code) yet leave ``RunContext.is_streaming()`` False, and core's
  public ``run`` ties the two together (``tests/test_core_parity.py`` pins them).
"""

from __future__ import annotations

import functools
from typing import Any, cast

from agent_framework import (
    AgentResponse,
    ExperimentalFeature,
    ResponseStream,
    RunContext,
    SessionContext,
    WorkflowEvent,
    WorkflowRunResult,
)
from agent_framework import FunctionalWorkflow as _CoreFunctionalWorkflow
from agent_framework._feature_stage import experimental
from agent_framework._middleware import categorize_middleware
from agent_framework._workflows._typing_utils import is_instance_of, try_coerce_to_type
from agent_framework._workflows._workflow import _coerce_request_info_response  # pyright: ignore[reportPrivateUsage]

# Core's marker for its functional workflow API; ours is the same feature (same warning, shown once).
functional_workflows_experimental = experimental(feature_id=ExperimentalFeature.FUNCTIONAL_WORKFLOWS)


def set_context_response(context: SessionContext, response: AgentResponse[Any]) -> None:
    """Give the after-run context providers the run's response, as core's ``WorkflowAgent`` does."""
    context._response = response  # pyright: ignore[reportPrivateUsage]


def coerce_to(value: Any, target_type: Any) -> tuple[bool, Any]:
    """Coerce ``value`` to ``target_type`` with core's response rules.

    Returns:
        ``(True, converted)`` when the converted value is an instance of the type, else ``(False, value)``.
    """
    converted = try_coerce_to_type(value, target_type)
    return (True, converted) if is_instance_of(converted, target_type) else (False, value)


def response_fits(value: Any, response_type: Any, request_id: str) -> bool:
    """True when core would accept ``value`` as the response to ``request_id`` (``None`` included, as core allows)."""
    if value is None or (isinstance(response_type, type) and type(value) is response_type):
        return True  # core accepts None, and a value of exactly the type needs no conversion
    try:
        _coerce_request_info_response(value, response_type, request_id)
    except Exception:
        return False
    return True


def accepts(value: Any, target_type: Any) -> bool:
    """True when ``value`` is an instance of ``target_type`` by core's rules (generics and unions included)."""
    return is_instance_of(value, target_type)


def collected_events(ctx: RunContext) -> list[WorkflowEvent[Any]] | None:
    """Core's list of events collected so far in this run (``RunContext._events``), or None.

    If core renames it, live updates still stream, but core's collected events are no longer moved
    ahead of later live updates; the pinning test fails first.
    """
    events = getattr(ctx, "_events", None)
    return cast("list[WorkflowEvent[Any]]", events) if isinstance(events, list) else None


def core_event_stream(
    core: _CoreFunctionalWorkflow, *, include_status_events: bool, **run_kwargs: Any
) -> ResponseStream[WorkflowEvent[Any], WorkflowRunResult]:
    """Core's ``run(stream=False)`` as the event stream it wraps, so its first events can be pulled.

    Core's non-streaming ``run`` returns ``stream.get_final_response()`` of exactly this stream
    (``_run_core(streaming=False)``, its finalizer and cleanup hook, its run guard), so user code
    sees ``ctx.is_streaming()`` False, as in core; ``run(stream=True)`` would report True.
    """
    core._ensure_not_running()  # pyright: ignore[reportPrivateUsage]
    return ResponseStream(
        core._run_core(streaming=False, **run_kwargs),  # pyright: ignore[reportPrivateUsage]
        finalizer=functools.partial(
            core._finalize_events,  # pyright: ignore[reportPrivateUsage]
            include_status_events=include_status_events,
        ),
        cleanup_hooks=[core._run_cleanup],  # pyright: ignore[reportPrivateUsage]
    )


def agent_middleware_of(*sources: Any) -> list[Any]:
    """The agent middleware among ``sources`` (sequences of core middleware, or None), in order."""
    found: list[Any] = []
    for source in sources:
        if source is not None:
            found.extend(categorize_middleware(list(source))["agent"])
    return found


def middleware_pipeline(agent: Any, chain: list[Any]) -> Any:
    """Core's cached ``AgentMiddlewarePipeline`` of ``agent`` (an ``AgentMiddlewareLayer``) for ``chain``."""
    return agent._get_agent_middleware_pipeline(chain)


def trace_agent_invocation(agent: Any, **arguments: Any) -> Any:
    """Core's ``invoke_agent`` span around ``arguments["execute"]()`` (``AgentTelemetryLayer``)."""
    return agent._trace_agent_invocation(**arguments)
