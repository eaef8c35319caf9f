"""The human-review workflow as a streaming chat agent (``FunctionalWorkflowAgent``).

What it shows:

1. ``workflow.as_agent(...)`` turns the review workflow of ``hitl_review.py`` (same directory) into a
   core ``BaseAgent``.
2. ``agent.run(topic, stream=True)`` streams ``AgentResponseUpdate`` objects: the pause surfaces as a
   ``function_approval_request`` content (its id is the request id, its arguments carry the draft),
   and the LAST update carries the ``continuation_token``, so ``stream.get_final_response()`` (and
   ``AgentResponse.from_updates(updates)``) expose it too.
3. ``agent.pending_requests`` mirrors the workflow's pending requests.
4. The answer goes back with ``agent.run(responses={request_id: answer}, continuation_token=token,
   stream=True)``; the final update holds the revised text and no token.
5. A replayed token is refused at the ``run(...)`` call itself, before any streaming starts.

Deterministic by default; with ``OPENAI_API_KEY`` set the writer is an OpenAI model (see
``hitl_review.py``).

Run it:

.. code-block:: bash

    python samples/agent_hitl.py --feedback "Mention the water temperature."
    python samples/agent_hitl.py            # asks for the feedback on the terminal
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from agent_framework import AgentResponse, AgentResponseUpdate

# The workflow of samples/hitl_review.py; this script's directory is on sys.path when it runs.
from hitl_review import ask_feedback, hitl_review, writer_description

from agent_framework_functional import ContinuationAuthorityError


def _describe(update: AgentResponseUpdate) -> str:
    """One line per streamed update: its contents, and whether it carries the token."""
    parts: list[str] = []
    for content in update.contents:
        if content.type == "function_approval_request":
            parts.append(f"approval request id={content.id}")
        elif content.type == "text":
            parts.append(f"text={content.text!r}")
        else:
            parts.append(content.type)
    if update.continuation_token is not None:
        parts.append(f"continuation_token(kind={update.continuation_token['kind']!r})")
    return ", ".join(parts) or "(empty)"


async def main(argv: list[str] | None = None) -> int:
    """Stream the paused run, answer the approval request, stream the resume; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="green tea", help="what the post is about")
    parser.add_argument("--feedback", help="review feedback; asked on the terminal when omitted")
    args = parser.parse_args(argv)

    print(f"Writer: {writer_description()}")
    agent = hitl_review.build().as_agent(name="reviewer")

    # 1. Stream the first run: it drafts, then pauses with an approval request.
    stream = agent.run(args.topic, stream=True)
    updates: list[AgentResponseUpdate] = []
    async for update in stream:
        updates.append(update)
        print(f"update {len(updates)}: {_describe(update)}")
    paused = await stream.get_final_response()
    token = paused.continuation_token
    assert token is not None, "a paused run always carries a continuation token"
    print(f"Token on the last update: {updates[-1].continuation_token == token}")
    print(f"Token from AgentResponse.from_updates: {AgentResponse.from_updates(updates).continuation_token == token}")
    print(f"Token keys: {sorted(token)}, secret={token['token'][:6]}... (truncated)")

    # 2. The approval request names the request id and carries the draft.
    request: Any = next(c for u in updates for c in u.contents if c.type == "function_approval_request")
    request_id = request.id
    draft = request.function_call.parse_arguments()["data"]["draft"]
    print(f"Approval request: id={request_id}, draft={draft!r}")
    print(f"Pending requests on the agent: {sorted(agent.pending_requests)}")

    feedback = args.feedback if args.feedback is not None else await ask_feedback(draft)
    if not feedback:
        print("No feedback given; pass --feedback TEXT or type it at the prompt.", file=sys.stderr)
        agent.abandon_continuation(token)  # the owner drops the pause explicitly
        return 2
    print(f"Feedback: {feedback}")

    # 3. Resume with the answer and the token, streaming again.
    resume = agent.run(responses={request_id: feedback}, continuation_token=token, stream=True)
    async for update in resume:
        print(f"resume update: {_describe(update)}")
    done = await resume.get_final_response()
    print(f"Resumed: continuation_token={done.continuation_token}, pending={sorted(agent.pending_requests)}")
    print(f"Final text: {done.text}")

    # 4. The token is spent: a replay is refused at the call, before anything streams.
    try:
        agent.run(responses={request_id: feedback}, continuation_token=token, stream=True)
    except ContinuationAuthorityError as exc:
        print(f"Replayed token rejected: {type(exc).__name__}")
    else:
        print("Replayed token was accepted: this is a bug.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
