"""Responses hosting adapter: turns the approval answers of a Responses request into agent input.

``agent-framework-hosting-responses`` renders a paused :class:`FunctionalWorkflowAgent` run as an
``mcp_approval_request`` output item, but its input parser (``responses_to_run`` /
``messages_from_responses_input``) refuses the standard answer, an ``mcp_approval_response`` input item
(``ValueError: Unsupported Responses input content type``). These helpers take those items out of the
request body and hand them to the agent as ``function_approval_response`` contents, which resume the
conversation's pause chat-natively (the token comes from the session).

The hosting packages are optional (``pip install "agent-framework-functional[hosting]"``) and imported
only when :func:`responses_to_run_with_approvals` is called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from agent_framework import Content, Message

if TYPE_CHECKING:
    from agent_framework_hosting import AgentRunArgs

MCP_APPROVAL_RESPONSE = "mcp_approval_response"
"""The Responses input item type that answers an ``mcp_approval_request``."""

REQUEST_FUNCTION_NAME = "request_info"
"""The function name :class:`FunctionalWorkflowAgent` gives each pending request's function call."""

# responses_to_run needs a non-empty input; when the request carries only approvals it parses this
# stand-in (for its options and validation) and the stand-in's message is dropped.
_STAND_IN_INPUT = "approval"


def _input_items(body: Mapping[str, Any]) -> Sequence[Any]:
    value = body.get("input")
    return cast("list[Any]", value) if isinstance(value, list) else []


def _is_approval_item(item: Any) -> bool:
    return isinstance(item, Mapping) and cast("Mapping[str, Any]", item).get("type") == MCP_APPROVAL_RESPONSE


def _approval_content(item: Mapping[str, Any]) -> Content:
    request_id = item.get("approval_request_id")
    approve = item.get("approve")
    if not isinstance(request_id, str) or not request_id:
        raise ValueError("`mcp_approval_response` needs a non-empty string `approval_request_id`.")
    if not isinstance(approve, bool):
        raise ValueError("`mcp_approval_response` needs a boolean `approve`.")
    call = Content.from_function_call(call_id=request_id, name=REQUEST_FUNCTION_NAME)
    return Content.from_function_approval_response(approve, id=request_id, function_call=call)


def responses_approval_messages(body: Mapping[str, Any]) -> list[Message]:
    """The ``mcp_approval_response`` items of a Responses request body, as agent input.

    Each item ``{"type": "mcp_approval_response", "approval_request_id": ID, "approve": BOOL}`` becomes a
    ``function_approval_response`` content with ``id=ID`` and ``approved=BOOL`` (the ID is the
    ``mcp_approval_request`` item's ``id``, which is the pending request id). All of them go into one user
    message; an optional ``reason`` is not passed on (the agent's answer to a ``bool`` request is the bool).

    Args:
        body: The Responses request body (``input`` may be a string or a list of items).

    Returns:
        ``[Message("user", [...])]`` with one approval response per item, or ``[]`` when there are none.

    Raises:
        ValueError: An ``mcp_approval_response`` item has no string ``approval_request_id`` or no boolean
            ``approve``.

    Examples:
        .. code-block:: python

            body = {"previous_response_id": "resp_1", "input": [
                {"type": "mcp_approval_response", "approval_request_id": "auto::0", "approve": True}]}
            [answer] = responses_approval_messages(body)
            assert answer.contents[0].type == "function_approval_response"
    """
    contents = [
        _approval_content(cast("Mapping[str, Any]", item)) for item in _input_items(body) if _is_approval_item(item)
    ]
    return [Message("user", contents)] if contents else []


def responses_to_run_with_approvals(body: Mapping[str, Any]) -> AgentRunArgs:
    """``responses_to_run(body)`` that also accepts ``mcp_approval_response`` input items.

    A drop-in for ``agent_framework_hosting_responses.responses_to_run`` in an app-owned Responses route:
    the other input items (and the options, ``stream``, the continuation fields) are parsed by
    ``responses_to_run`` itself; the approval items become a trailing user message of
    ``function_approval_response`` contents (see :func:`responses_approval_messages`). Pair it with an agent
    built with ``continuation_token_on_response=False``, so a paused run renders as ``completed`` with its
    ``mcp_approval_request`` item (the token stays in the session the route stores).

    Args:
        body: The Responses request body.

    Returns:
        The ``AgentRunArgs`` mapping of ``responses_to_run``: ``messages``, ``options``, ``stream``.

    Raises:
        ImportError: ``agent-framework-hosting-responses`` is not installed (the ``hosting`` extra).
        ValueError: Invalid input, continuation fields or approval items (as ``responses_to_run``).

    Examples:
        .. code-block:: python

            run = responses_to_run_with_approvals(body)
            result = await agent.run(run["messages"], session=session)
    """
    try:
        from agent_framework_hosting_responses import responses_to_run
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "responses_to_run_with_approvals needs agent-framework-hosting-responses: "
            'pip install "agent-framework-functional[hosting]"'
        ) from exc

    approvals = responses_approval_messages(body)
    if not approvals:
        return responses_to_run(body)
    rest = [item for item in _input_items(body) if not _is_approval_item(item)]
    run = responses_to_run({**body, "input": rest or _STAND_IN_INPUT})
    parsed = cast("list[Message]", run["messages"]) if rest else []
    run["messages"] = [*parsed, *approvals]
    return run
