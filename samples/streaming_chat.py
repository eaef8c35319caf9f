"""Live streaming chat: an inner agent's answer reaches the chat app while the workflow runs.

What it shows:

1. An inner agent that streams its answer in chunks. By default it is ``LocalStreamingAgent``, a
   small core ``BaseAgent`` subclass in this file that implements core's agent protocol
   (``run(messages, stream=True)`` returns a ``ResponseStream`` of ``AgentResponseUpdate``) and
   writes a canned answer word by word, so the sample is deterministic and needs no network.
2. A functional workflow that sends a progress note with ``emit_update({...})`` and calls the inner
   agent with ``stream_agent(...)`` inside a ``@step``: every chunk is forwarded live.
3. The workflow as a chat agent (``as_agent()``): ``agent.run(question, stream=True)`` prints each
   chunk as it arrives, before the workflow function has returned (core alone shows nothing until
   the end).
4. ``get_final_response()`` holds the answer once, with the same text as a non-streaming run: the
   workflow returns the text it streamed, and the agent does not repeat it.

When ``OPENAI_API_KEY`` is set, the inner agent is core's ``Agent`` on
``agent_framework.openai.OpenAIChatClient`` (``agent-framework-openai`` is a dependency of this package; the
model is read from ``OPENAI_CHAT_MODEL``, else ``gpt-4o-mini``).

Run it:

.. code-block:: bash

    python samples/streaming_chat.py
    python samples/streaming_chat.py --question "Why is the sky blue?" --delay-ms 80
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import AsyncIterable
from typing import Any

from agent_framework import AgentResponse, AgentResponseUpdate, BaseAgent, Content, ResponseStream

from agent_framework_functional import emit_update, step, stream_agent, workflow

CANNED_ANSWERS = {
    "why is the sky blue?": (
        "Sunlight scatters off the molecules in the air, and blue light scatters far more than red, "
        "so blue reaches your eyes from every part of the sky."
    ),
}


class LocalStreamingAgent(BaseAgent):
    """A deterministic chat agent that streams a canned answer word by word (core's agent protocol).

    Keyword Args:
        delay: Seconds to wait before each chunk, like a model writing.
    """

    def __init__(self, *, delay: float) -> None:
        super().__init__(name="assistant", description="Answers from a fixed script, word by word.")
        self.delay = delay

    def run(  # type: ignore[override]
        self,
        messages: Any = None,
        *,
        stream: bool = False,
        session: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Answer ``messages``: a ``ResponseStream`` when ``stream`` is True, else an awaitable response."""
        question = messages if isinstance(messages, str) else str(messages)
        if stream:
            return ResponseStream(self._chunks(question), finalizer=AgentResponse.from_updates)
        return self._whole(question)

    def answer_for(self, question: str) -> str:
        """The canned answer for a question."""
        return CANNED_ANSWERS.get(question.strip().lower(), f"I have no notes on {question!r} yet, sorry.")

    async def _chunks(self, question: str) -> AsyncIterable[AgentResponseUpdate]:
        words = self.answer_for(question).split(" ")
        for index, word in enumerate(words):
            await asyncio.sleep(self.delay)
            yield AgentResponseUpdate(
                contents=[Content.from_text(text=word if index == 0 else f" {word}")],
                role="assistant",
                author_name=self.name,
                message_id="answer",
            )

    async def _whole(self, question: str) -> AgentResponse:
        return AgentResponse.from_updates([update async for update in self._chunks(question)])


def build_inner_agent(delay: float) -> Any:
    """Core ``Agent`` on OpenAI when OPENAI_API_KEY is set, else the deterministic local agent."""
    if not os.environ.get("OPENAI_API_KEY"):
        return LocalStreamingAgent(delay=delay)
    from agent_framework import Agent

    try:
        from agent_framework.openai import OpenAIChatClient
    except ModuleNotFoundError as exc:
        raise SystemExit(
            "OPENAI_API_KEY is set, so this sample streams from an OpenAI model, which needs the "
            "agent-framework-openai package: run `pip install agent-framework-openai`, or unset "
            "OPENAI_API_KEY to use the deterministic local agent."
        ) from exc

    client = OpenAIChatClient(model=os.environ.get("OPENAI_CHAT_MODEL") or "gpt-4o-mini")
    return Agent(client=client, name="assistant", instructions="Answer in two short sentences.")


INNER: dict[str, Any] = {}
STATE = {"workflow_returned": False}


@step
async def answer(question: str) -> str:
    """Stream the inner agent's answer live; on a replay core returns this step's cached text."""
    response = await stream_agent(INNER["agent"], question)
    return response.text


@workflow(name="streaming_chat", description="Answer a question, streaming the answer as it is written.")
async def streaming_chat(question: str) -> str:
    """Send a progress note, stream the answer, return it."""
    STATE["workflow_returned"] = False
    await emit_update({"stage": "answering", "question": question})
    text = await answer(question)
    STATE["workflow_returned"] = True
    return text


async def main(argv: list[str] | None = None) -> int:
    """Stream one answer through the workflow agent, then compare with a non-streaming run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--question", default="Why is the sky blue?", help="what to ask")
    parser.add_argument("--delay-ms", type=float, default=40.0, help="local agent: milliseconds per chunk")
    args = parser.parse_args(argv)

    INNER["agent"] = build_inner_agent(args.delay_ms / 1000)
    live = "OpenAI model" if os.environ.get("OPENAI_API_KEY") else "deterministic local agent (no OPENAI_API_KEY)"
    print(f"Inner agent: {live}")
    print(f"Question: {args.question}")

    agent = streaming_chat.build().as_agent(name="chat")
    stream = agent.run(args.question, stream=True)
    started = time.perf_counter()
    first_chunk_at: float | None = None
    chunks = 0
    returned_at_first_chunk: bool | None = None
    async for update in stream:
        data = (update.additional_properties or {}).get("data")
        if data is not None:
            print(f"Progress: {data}")
            continue
        if not update.text:
            continue
        if first_chunk_at is None:
            first_chunk_at = time.perf_counter() - started
            returned_at_first_chunk = STATE["workflow_returned"]
            print("Answer: ", end="")
        chunks += 1
        print(update.text, end="", flush=True)
    total = time.perf_counter() - started
    print()
    final = await stream.get_final_response()
    print(f"Chunks: {chunks}; first after {1000 * (first_chunk_at or 0):.0f} ms, all after {1000 * total:.0f} ms")
    print(f"First chunk arrived while the workflow was still running: {returned_at_first_chunk is False}")
    print(f"Final text: {final.text}")

    again = await streaming_chat.build().as_agent(name="chat").run(args.question)
    print(f"Same text without streaming: {again.text == final.text}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
