"""A worker process for the durable agent tests: pause via the agent, or answer a pause chat-natively.

Usage: ``python durable_agent_worker.py <command> <store spec json> <checkpoint dir> <state file> <workflow>
<answer> [barrier dir] [name]``.

* ``pause``: runs the agent of ``DEFINITIONS[workflow]`` with a new session until it pauses and
  writes ``{"session": session.to_dict(), "request": <approval request content>.to_dict()}`` to the
  state file (``answer`` is ignored).
* ``answer``: restores the session with ``AgentSession.from_dict`` (it carries the token), waits at
  the barrier if one is given, and sends one message: ``approve`` / ``reject`` -> a
  ``function_approval_response`` for the request; ``result:<json>`` -> a ``function_result`` with
  that JSON text for the request's call id; ``result-for:<id>:<json>`` -> the same for another id.

The last stdout line is a JSON outcome: ``resumed`` (with the text), ``rejected`` (authority error),
``invalid`` (another ``ValueError``), each with whether the session still holds a token.
"""

from __future__ import annotations

from typing import Any

from agent_framework import AgentSession, Content, Message
from durable_support import close_store, open_worker_stores, read_json, wait_at_barrier, worker_entry_point, write_json
from durable_workflows import CHECKPOINT_TYPES, DEFINITIONS

from agent_framework_functional import ContinuationAuthorityError
from agent_framework_functional._session import session_token


def _message(request: Content, answer: str) -> Message:
    if answer in ("approve", "reject"):
        return Message("user", [request.to_function_approval_response(approved=answer == "approve")])
    if answer.startswith("result-for:"):
        call_id, _, result = answer[len("result-for:") :].partition(":")
        return Message("tool", [Content.from_function_result(call_id=call_id, result=result)])
    assert answer.startswith("result:"), answer
    return Message("tool", [Content.from_function_result(call_id=request.id, result=answer[len("result:") :])])


async def main(argv: list[str]) -> dict[str, Any]:
    command, spec_json, checkpoint_dir, state_file, name, answer = argv[:6]
    store, storage = open_worker_stores(spec_json, checkpoint_dir, allowed_checkpoint_types=CHECKPOINT_TYPES)
    agent = DEFINITIONS[name].build(checkpoint_storage=storage, continuation_store=store).as_agent()
    try:
        if command == "pause":
            session = agent.create_session()
            paused = await agent.run("tea", session=session)
            state = {"session": session.to_dict(), "request": paused.user_input_requests[0].to_dict()}
            write_json(state_file, state)
            return {"outcome": "paused", "token": paused.continuation_token}
        if command != "answer":
            raise SystemExit(f"unknown command {command!r}")
        state = read_json(state_file)
        session = AgentSession.from_dict(state["session"])
        message = _message(Content.from_dict(state["request"]), answer)
        if len(argv) > 7:
            wait_at_barrier(argv[6], argv[7])
        try:
            done = await agent.run(message, session=session)
        except ContinuationAuthorityError as exc:
            outcome: dict[str, Any] = {"outcome": "rejected", "message": str(exc)}
        except ValueError as exc:
            outcome = {"outcome": "invalid", "message": str(exc)}
        else:
            outcome = {"outcome": "resumed", "text": done.text, "token": done.continuation_token}
        outcome["session_has_token"] = session_token(session, agent.id) is not None
        return outcome
    finally:
        await close_store(store)
        await close_store(storage)


if __name__ == "__main__":
    worker_entry_point(main)
