"""A terminal chat over a functional workflow agent that asks for approval mid-conversation.

What it shows:

* ``FunctionalWorkflowAgent`` as a chat agent: ``agent.run_stream(text, session=session)`` per turn,
  with one ``AgentSession`` for the whole conversation (history and the pending continuation
  token live in it).
* A pause in the middle of a turn: when you ask to order something, the workflow calls
  ``ctx.request_info(..., response_type=bool)``; the agent answers with a
  ``function_approval_request``. You type yes or no, the app sends
  ``request.to_function_approval_response(approved=...)`` on the same session (no token handling
  needed: the session carries it), and the workflow resumes where it paused. The order step runs
  once, on approval only.
* The conversation then goes on with new turns.

How to run it::

    python samples/chat_app.py            # deterministic replies, no API key needed
    OPENAI_API_KEY=sk-... python samples/chat_app.py   # replies drafted by an OpenAI model

Type ``order a teapot`` to see the approval, ``quit`` (or end the input) to leave. With
``OPENAI_API_KEY`` set, ``OPENAI_CHAT_MODEL`` picks the model (default ``gpt-4o-mini``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys

from agent_framework import Agent, Content, Message

from agent_framework_functional import RunContext, step, workflow

_order_numbers = itertools.count(1)
_model_agent: Agent | None = None


def _model() -> Agent | None:
    """An OpenAI-backed agent when ``OPENAI_API_KEY`` is set, else None (deterministic replies)."""
    global _model_agent
    if _model_agent is None and os.environ.get("OPENAI_API_KEY"):
        from agent_framework.openai import OpenAIChatClient

        _model_agent = Agent(
            client=OpenAIChatClient(model=os.environ.get("OPENAI_CHAT_MODEL", "gpt-4o-mini")),
            name="shop_assistant",
            instructions="You are a friendly shop assistant. Answer in one short sentence.",
        )
    return _model_agent


@step
async def draft_reply(text: str) -> str:
    """Draft the assistant's reply (cached: a resumed turn does not draft it again)."""
    model = _model()
    if model is None:
        return f"You said: {text}."
    return (await model.run(text)).text


@step
async def place_order(item: str) -> str:
    """The side effect the human approves; runs at most once per approved order."""
    return f"Order #{next(_order_numbers)} placed for {item}."


@workflow(name="shop_assistant", description="Chats, and places orders after you approve them.")
async def shop_assistant(text: str, ctx: RunContext) -> str:
    """One chat turn: reply, and for an order ask for approval before placing it."""
    reply = await draft_reply(text)
    if not text.lower().startswith("order "):
        return reply
    item = text[len("order ") :].strip()
    approved = await ctx.request_info({"action": "place order", "item": item}, response_type=bool)
    if not approved:
        return "Okay, I did not place the order."
    return await place_order(item)


def _question(request: Content) -> str:
    """The approval prompt shown to the user, built from the request's JSON-safe data."""
    data = request.function_call.parse_arguments()["data"] if request.function_call else {}
    return f"Approve: {data.get('action')} for {data.get('item')}? [yes/no]"


async def main() -> None:
    """Run the chat loop on standard input until ``quit`` or end of input."""
    agent = shop_assistant.build().as_agent(name="shop")
    session = agent.create_session()
    pending: Content | None = None
    print("Chat with the shop assistant. Type 'order <item>' to order, 'quit' to leave.")
    while True:
        line = sys.stdin.readline()
        if not line or line.strip().lower() in {"quit", "exit"}:
            break
        text = line.strip()
        if not text:
            continue
        print(f"you> {text}")
        if pending is not None:
            approved = text.lower() in {"y", "yes"}
            turn: str | Message = Message("user", [pending.to_function_approval_response(approved=approved)])
        else:
            turn = text
        stream = agent.run_stream(turn, session=session)
        print("bot> ", end="", flush=True)
        async for update in stream:
            print(update.text, end="", flush=True)
        response = await stream.get_final_response()
        pending = response.user_input_requests[0] if response.user_input_requests else None
        print(_question(pending) if pending is not None else "")
    print("bye")


if __name__ == "__main__":
    asyncio.run(main())
