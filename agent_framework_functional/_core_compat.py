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
"""

from __future__ import annotations

from typing import Any, cast

from agent_framework import AgentResponse, RunContext, SessionContext, WorkflowEvent
from agent_framework._workflows._typing_utils import is_instance_of, try_coerce_to_type
from agent_framework._workflows._workflow import _coerce_request_info_response  # pyright: ignore[reportPrivateUsage]


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
