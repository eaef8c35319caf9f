"""Human review of a draft: pause on ``ctx.request_info``, resume with a continuation token.

What it shows:

1. A functional workflow writes a draft in a ``@step``, then pauses with ``ctx.request_info(...)``
   so a human can review it.
2. The paused result carries ``continuation_token``: an opaque, JSON-safe mapping. The sample
   stores it as JSON (as a host would, in a database or a session) and loads it back.
3. The run resumes with ``run(responses=..., continuation_token=...)``; the draft step is not run
   again (its cached result is replayed), and the revision uses the reviewer's feedback.
4. Tokens are single use: presenting the same token again is rejected with
   ``ContinuationAuthorityError``, whose fixed message reveals nothing.

The writer is deterministic by default. When ``OPENAI_API_KEY`` is set, the draft and the revision
come from an OpenAI model through core's ``agent_framework.openai.OpenAIChatClient`` wrapped in a
core ``Agent`` (``agent-framework-openai`` is a dependency of this package; the model is read from
``OPENAI_CHAT_MODEL``, else ``gpt-4o-mini``).

Run it:

.. code-block:: bash

    python samples/hitl_review.py --feedback "Mention the water temperature."
    python samples/hitl_review.py            # asks for the feedback on the terminal
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
from typing import Any

from agent_framework_functional import ContinuationAuthorityError, RunContext, step, workflow


@functools.cache
def _openai_agent() -> Any | None:
    """Return a core ``Agent`` on an OpenAI chat client when OPENAI_API_KEY is set, else None."""
    if not os.environ.get("OPENAI_API_KEY"):
        return None
    from agent_framework import Agent

    try:
        from agent_framework.openai import OpenAIChatClient
    except ModuleNotFoundError as exc:
        raise SystemExit(
            "OPENAI_API_KEY is set, so this sample uses an OpenAI model, which needs the "
            "agent-framework-openai package: run `pip install agent-framework-openai`, or unset "
            "OPENAI_API_KEY to use the deterministic writer."
        ) from exc

    client = OpenAIChatClient(model=os.environ.get("OPENAI_CHAT_MODEL") or "gpt-4o-mini")
    return Agent(
        client=client,
        name="writer",
        instructions="You write short, plain blog posts of three sentences at most. Answer with the post only.",
    )


def writer_description() -> str:
    """Say which writer the steps use: the OpenAI model or the deterministic fallback."""
    return "OpenAI model" if _openai_agent() is not None else "deterministic (no OPENAI_API_KEY)"


async def _write(prompt: str, fallback: str) -> str:
    """Ask the OpenAI writer when configured; otherwise return the deterministic ``fallback``."""
    agent = _openai_agent()
    if agent is None:
        return fallback
    response = await agent.run(prompt)
    return response.text.strip()


@step
async def write_draft(topic: str) -> str:
    """Write the first draft (runs once: on resume core returns the cached result)."""
    print(f"[step] write_draft({topic!r}) runs")
    return await _write(
        f"Write a first draft of a short post about {topic}.",
        fallback=f"{topic.capitalize()} is worth your time: pick a good one and take it slowly.",
    )


@step
async def revise(draft: str, feedback: str) -> str:
    """Revise the draft with the reviewer's feedback."""
    print("[step] revise(...) runs")
    return await _write(
        f"Revise this post.\n\nPost:\n{draft}\n\nReviewer feedback:\n{feedback}",
        fallback=f"{draft} (Revised after review: {feedback})",
    )


@workflow(name="hitl_review", description="Draft a post, pause for human review, revise with the feedback.")
async def hitl_review(topic: str, ctx: RunContext) -> str:
    """Draft, ask a human for feedback, revise."""
    draft = await write_draft(topic)
    feedback = await ctx.request_info(
        {"draft": draft, "question": "What should change before this is published?"},
        response_type=str,
    )
    return await revise(draft, feedback)


async def ask_feedback(draft: str) -> str:
    """Read the reviewer's feedback from the terminal (stdin)."""
    print(f"Draft for review:\n  {draft}")
    try:
        answer = await asyncio.to_thread(input, "Your feedback: ")
    except EOFError:
        answer = ""
    if not sys.stdin.isatty():
        print()  # piped input is not echoed: end the prompt line
    return answer.strip()


async def main(argv: list[str] | None = None) -> int:
    """Run the draft -> review -> revise cycle; return the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="green tea", help="what the post is about")
    parser.add_argument("--feedback", help="review feedback; asked on the terminal when omitted")
    args = parser.parse_args(argv)

    print(f"Writer: {writer_description()}")
    wf = hitl_review.build()

    # 1. First run: the workflow drafts and pauses for review.
    paused = await wf.run(args.topic)
    request = paused.get_request_info_events()[0]
    token = paused.continuation_token
    assert token is not None, "a paused run always carries a continuation token"
    print(f"Paused: state={paused.get_final_state().name}, request_id={request.request_id}")

    # 2. The token is an opaque JSON mapping: a host can store it anywhere JSON goes.
    stored = json.dumps(token)
    restored_token = json.loads(stored)
    print(f"Token keys: {sorted(token)}")
    print(f"Token kind={token['kind']!r} version={token['version']!r} secret={token['token'][:6]}... (truncated)")
    print(f"Token JSON round trip equal: {restored_token == token}")

    # 3. The human reviews the draft.
    feedback = args.feedback if args.feedback is not None else await ask_feedback(request.data["draft"])
    if not feedback:
        print("No feedback given; pass --feedback TEXT or type it at the prompt.", file=sys.stderr)
        wf.abandon_continuation(restored_token)  # the owner drops the pause explicitly
        return 2
    print(f"Feedback: {feedback}")

    # 4. Resume with the answer and the token loaded from JSON.
    done = await wf.run(responses={request.request_id: feedback}, continuation_token=restored_token)
    print(f"Resumed: state={done.get_final_state().name}, continuation_token={done.continuation_token}")
    print(f"Final text: {done.get_outputs()[-1]}")

    # 5. The token was spent by that resume: presenting it again is refused.
    try:
        await wf.run(responses={request.request_id: feedback}, continuation_token=restored_token)
    except ContinuationAuthorityError as exc:
        print(f"Replayed token rejected: {type(exc).__name__}")
    else:
        print("Replayed token was accepted: this is a bug.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
