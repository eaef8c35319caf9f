"""Helpers of the Responses host tests: a client of the route (JSON and SSE) and the answer items."""

from __future__ import annotations

import json
from typing import Any

import httpx
from hosting_support import parse_sse, sse_data
from request_ids import core_id, naming

from agent_framework_functional.hosting import responses_app


def approve(request_id: str, approved: bool = True) -> dict[str, Any]:
    return {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": approved}


def approval_items(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == "mcp_approval_request"]


def published(response: dict[str, Any], request_id: str = "auto::0") -> str:
    """The id ``response`` published for core's ``request_id`` (unique to its pause: what an answer must name)."""
    (found,) = [item["id"] for item in approval_items(response) if core_id(item["id"]) == request_id]
    return found


def answering(body: Any, response: dict[str, Any]) -> Any:
    """``body`` with each string that is one of core's request ids of ``response`` replaced by its published id."""
    return naming(body, [item["id"] for item in approval_items(response)])


def text_of(response: dict[str, Any]) -> str:
    return "".join(part["text"] for item in response["output"] if item["type"] == "message" for part in item["content"])


class Responses:
    """A client of the route: JSON calls and SSE calls (returning the terminal event's response)."""

    def __init__(self, http: httpx.Client, base: str) -> None:
        self.http = http
        self.url = f"{base}/v1/responses"

    def post(self, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(self.url, json=body)

    def call(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = self.post(body)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def stream(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        reply = self.post({**body, "stream": True})
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"].startswith("text/event-stream")
        events = sse_data(parse_sse(reply.text))
        terminal = [e for e in events if e["type"] in ("response.completed", "response.failed", "response.incomplete")]
        assert [e["type"] for e in terminal] == ["response.completed"], json.dumps(terminal)[:1500]
        return events, terminal[0]["response"]


def serve_agent(serve: Any, http: httpx.Client, definition: Any, **options: Any) -> Responses:
    """``responses_app`` over a fresh agent of ``definition``, served on loopback."""
    return Responses(http, serve(responses_app(definition.build().as_agent(name=definition.name), **options)).base)
