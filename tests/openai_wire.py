"""OpenAI Responses API bodies in the real wire format, for respx routes (a helper, not a test module).

``OpenAIChatClient`` (``agent_framework.openai``), the client core's OpenAI integration uses by
default, calls ``POST /v1/responses``. These builders return what the service sends back: a
``response`` object as JSON, or the server-sent events of a streamed response.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

BASE_URL = "https://api.openai.com/v1"
RESPONSES_URL = f"{BASE_URL}/responses"
MODEL = "gpt-4o-mini"


def response_object(text: str, *, response_id: str = "resp_1", status: str = "completed") -> dict[str, Any]:
    """A Responses API ``response`` object whose only output is one assistant message."""
    output = (
        [
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
        if status == "completed"
        else []
    )
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_764_000_000,
        "status": status,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "usage": {
            "input_tokens": 12,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 19,
        }
        if status == "completed"
        else None,
    }


def json_response(text: str, *, response_id: str = "resp_1") -> httpx.Response:
    """A non-streaming ``POST /v1/responses`` answer."""
    return httpx.Response(200, json=response_object(text, response_id=response_id))


def sse_response(chunks: list[str], *, response_id: str = "resp_1") -> httpx.Response:
    """A streaming ``POST /v1/responses`` answer: the event sequence the service sends for one text message."""
    item_id = f"msg_{response_id}"
    text = "".join(chunks)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_object("", response_id=response_id, status="in_progress")},
        {
            "type": "response.in_progress",
            "response": response_object("", response_id=response_id, status="in_progress"),
        },
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        *[
            {
                "type": "response.output_text.delta",
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "delta": chunk,
                "logprobs": [],
            }
            for chunk in chunks
        ],
        {
            "type": "response.output_text.done",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "text": text,
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": text, "annotations": []},
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {
                "type": "message",
                "id": item_id,
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            },
        },
        {"type": "response.completed", "response": response_object(text, response_id=response_id)},
    ]
    body = "".join(
        f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': number})}\n\n"
        for number, event in enumerate(events)
    )
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


def is_streaming_request(request: httpx.Request) -> bool:
    """True when the client asked for a streamed response (``"stream": true`` in the JSON body)."""
    return bool(json.loads(request.content).get("stream"))


def request_input_text(request: httpx.Request) -> str:
    """All text the client sent as input items, for asserting what the model saw."""
    payload = json.loads(request.content)
    texts: list[str] = []
    for item in payload.get("input", []):
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(part.get("text", "") for part in content if isinstance(part, dict))
    return "\n".join(texts)


def chat_client() -> Any:
    """An ``OpenAIChatClient`` whose HTTP goes through ``httpx``, where respx intercepts it.

    openai 3 sends through ``httpx2`` by default, which respx does not patch; it still accepts a
    plain ``httpx.AsyncClient`` as ``http_client``, and openai 2 uses ``httpx`` anyway.
    """
    from agent_framework.openai import OpenAIChatClient
    from openai import AsyncOpenAI

    async_client = AsyncOpenAI(api_key="sk-test", base_url=BASE_URL, http_client=httpx.AsyncClient())
    return OpenAIChatClient(model=MODEL, async_client=async_client)
