"""``mcp_app`` over loopback Streamable HTTP with the real ``mcp`` client (MCP 2026-07-28 input-required rounds).

A pause must be an ``input_required`` result with one form elicitation per request (the answer's schema) and a
sealed ``requestState``; the client's retry with the answers resumes the workflow exactly once (``DEPLOYS`` /
``PUBLISHED`` count the side effects). Forged, swapped or replayed state and wrong answers are MCP errors, and
the pause still answers with the original state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hosting_support import (
    DEPLOYS,
    PUBLISHED,
    ROOT,
    ServerThread,
    deployer,
    editor,
    make_agent,
    reviewer,
    run_sample_self_check,
)
from mcp import Client, MCPError, types
from request_ids import core_ids

from agent_framework_functional import RunContext, workflow
from agent_framework_functional.hosting.mcp import first_text, mcp_app

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

KEY = b"test-host-key-0123456789abcdef01"


def serve_mcp(serve: Callable[[Any], ServerThread], definition: Any = deployer) -> str:
    """Serve ``definition``'s agent as an MCP tool on a free loopback port; return the endpoint URL."""
    return f"{serve(mcp_app(make_agent(definition), key=KEY)).base}/mcp"


def answering(content: dict[str, Any] | None, action: str = "accept", seen: list[Any] | None = None) -> Any:
    """An elicitation callback that answers every form with ``content`` (and notes each request in ``seen``)."""

    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        if seen is not None:
            seen.append(params)
        return types.ElicitResult(action=action, content=content)  # pyright: ignore[reportArgumentType]

    return callback


async def pause(client: Client, tool: str, task: str) -> types.InputRequiredResult:
    """Call ``tool`` and stop at its pause (the client's own loop would answer it)."""
    first = await client.session.call_tool(tool, {"task": task}, allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult), first
    return first


def accept(paused: types.InputRequiredResult, value: dict[str, Any]) -> dict[str, types.ElicitResult]:
    """The answer to the one request of ``paused``, under the id it published (unique to the pause)."""
    (request_id,) = paused.input_requests or {}
    return {request_id: types.ElicitResult(action="accept", content=value)}  # pyright: ignore[reportArgumentType]


async def test_bool_approval_round_trip(serve: Any) -> None:
    seen: list[Any] = []
    async with Client(serve_mcp(serve), elicitation_callback=answering({"answer": True}, seen=seen)) as client:
        result = await client.call_tool("deployer", {"task": "mcp-bool"})
    assert first_text(result) == "deployed: mcp-bool"
    (form,) = seen
    assert form.requested_schema == {
        "type": "object",
        "properties": {"answer": {"type": "boolean"}},
        "required": ["answer"],
    }
    assert '"target": "mcp-bool"' in form.message
    assert DEPLOYS["mcp-bool"] == 1


async def test_older_protocol_clients_get_elicitation_in_the_call(serve: Any) -> None:
    seen: list[Any] = []
    callback = answering({"answer": True}, seen=seen)
    async with Client(serve_mcp(serve), elicitation_callback=callback, mode="legacy") as client:
        result = await client.call_tool("deployer", {"task": "mcp-legacy"})
    assert first_text(result) == "deployed: mcp-legacy"
    assert seen[0].requested_schema["properties"] == {"answer": {"type": "boolean"}}
    assert DEPLOYS["mcp-legacy"] == 1


async def test_declined_approval_is_a_rejection(serve: Any) -> None:
    async with Client(serve_mcp(serve), elicitation_callback=answering(None, action="decline")) as client:
        assert first_text(await client.call_tool("deployer", {"task": "mcp-no"})) == "not deployed: mcp-no"


async def test_str_and_structured_answers(serve: Any) -> None:
    async with Client(serve_mcp(serve, reviewer), elicitation_callback=answering({"answer": "fine"})) as client:
        assert first_text(await client.call_tool("reviewer", {"task": "memo"})) == "published: memo (fine)"
    seen: list[Any] = []
    edited = {"title": "mcp-title", "body": "Edited.", "approved": True}
    async with Client(serve_mcp(serve, editor), elicitation_callback=answering(edited, seen=seen)) as client:
        assert first_text(await client.call_tool("editor", {"task": "mcp-title"})) == "published: mcp-title / Edited."
    assert set(seen[0].requested_schema["properties"]) == {"title", "body", "approved"}  # the model is the form
    assert PUBLISHED["mcp-title"] == 1


async def test_two_calls_at_once(serve: Any) -> None:
    async with Client(serve_mcp(serve), elicitation_callback=answering({"answer": True})) as client:
        results = await asyncio.gather(*(client.call_tool("deployer", {"task": f"mcp-{n}"}) for n in range(3)))
    assert [first_text(result) for result in results] == [f"deployed: mcp-{n}" for n in range(3)]
    assert all(DEPLOYS[f"mcp-{n}"] == 1 for n in range(3))


async def test_client_gone_at_the_pause_answers_later_and_replay_is_refused(serve: Any) -> None:
    url = serve_mcp(serve)
    async with Client(url) as first:
        paused = await pause(first, "deployer", "mcp-later")
    assert core_ids(paused.input_requests or {}) == {"auto::0"}
    async with Client(url) as later:
        state = paused.request_state
        done = await later.call_tool(
            "deployer", {"task": "mcp-later"}, input_responses=accept(paused, {"answer": True}), request_state=state
        )
        assert first_text(done) == "deployed: mcp-later"
        with pytest.raises(MCPError, match="continuation"):
            await later.call_tool(
                "deployer", {"task": "mcp-later"}, input_responses=accept(paused, {"answer": True}), request_state=state
            )
    assert DEPLOYS["mcp-later"] == 1


async def test_an_earlier_pauses_answer_sent_with_the_next_pause_is_invalid_params(serve: Any) -> None:
    """Core numbers requests per run (``auto::0`` again in the next call's pause); the published ids are unique to
    their pause, so round one's ``inputResponses`` sent with round two's ``requestState`` answer nothing there."""
    async with Client(serve_mcp(serve)) as client:
        first = await pause(client, "deployer", "mcp-round-one")
        round_one = accept(first, {"answer": True})  # the answers, kept by a client that mixes them up later
        done = await client.call_tool(
            "deployer", {"task": "mcp-round-one"}, input_responses=round_one, request_state=first.request_state
        )
        assert first_text(done) == "deployed: mcp-round-one"
        second = await pause(client, "deployer", "mcp-round-two")
        assert core_ids(second.input_requests or {}) == core_ids(round_one)
        with pytest.raises(MCPError, match="answer no pending request"):
            await client.session.call_tool(
                "deployer",
                {"task": "mcp-round-two"},
                input_responses=round_one,
                request_state=second.request_state,
                allow_input_required=True,
            )
        assert DEPLOYS["mcp-round-two"] == 0  # nothing ran
        done = await client.call_tool(
            "deployer",
            {"task": "mcp-round-two"},
            input_responses=accept(second, {"answer": True}),
            request_state=second.request_state,
        )
    assert first_text(done) == "deployed: mcp-round-two"


async def test_two_answers_with_one_state_resume_once(serve: Any) -> None:
    async with Client(serve_mcp(serve)) as client:
        paused = await pause(client, "deployer", "mcp-race")

        async def answer() -> Any:
            return await client.call_tool(
                "deployer",
                {"task": "mcp-race"},
                input_responses=accept(paused, {"answer": True}),
                request_state=paused.request_state,
            )

        results = await asyncio.gather(*(answer() for _ in range(3)), return_exceptions=True)
    done = [result for result in results if isinstance(result, types.CallToolResult)]
    assert [first_text(result) for result in done] == ["deployed: mcp-race"], results
    assert all(isinstance(result, MCPError) for result in results if result not in done)
    assert DEPLOYS["mcp-race"] == 1


async def test_hostile_state_and_answers_are_errors_and_the_pause_stays(serve: Any) -> None:
    async with Client(serve_mcp(serve)) as client:
        paused = await pause(client, "deployer", "mcp-hostile")
        other = await pause(client, "deployer", "mcp-other")
        state = paused.request_state
        assert state is not None and other.request_state is not None
        forged = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
        for arguments, responses, sent_state, says in [
            ({"task": "mcp-hostile"}, accept(paused, {"answer": True}), forged, "Invalid or expired requestState"),
            (
                {"task": "mcp-hostile"},
                accept(paused, {"answer": True}),
                "not-a-state",
                "Invalid or expired requestState",
            ),
            # another call's state (swapped): bound to that call's arguments
            (
                {"task": "mcp-hostile"},
                accept(paused, {"answer": True}),
                other.request_state,
                "Invalid or expired requestState",
            ),
            ({"task": "mcp-hostile"}, accept(paused, {"answer": "yes"}), state, "bool"),
            ({"task": "mcp-hostile"}, accept(paused, {"wrong": True}), state, "needs the field"),
            (
                {"task": "mcp-hostile"},
                {"auto::9": types.ElicitResult(action="accept", content={"answer": True})},
                state,
                "answer no pending request",
            ),
            ({"task": "mcp-hostile"}, {}, state, "inputResponses"),
        ]:
            with pytest.raises(MCPError, match=says):
                await client.session.call_tool(
                    "deployer",
                    arguments,
                    input_responses=responses,
                    request_state=sent_state,
                    allow_input_required=True,
                )
        with pytest.raises(MCPError, match="Unknown tool"):
            await client.session.call_tool("other", {"task": "x"}, allow_input_required=True)
        with pytest.raises(MCPError, match="non-empty string"):
            await client.session.call_tool("deployer", {"task": " "}, allow_input_required=True)
        done = await client.call_tool(
            "deployer", {"task": "mcp-hostile"}, input_responses=accept(paused, {"answer": True}), request_state=state
        )
    assert first_text(done) == "deployed: mcp-hostile"
    assert DEPLOYS["mcp-hostile"] == 1
    assert DEPLOYS["mcp-other"] == 0


@workflow(name="copier", description="Asks how many copies (an int), then makes them.")
async def copier(text: str, ctx: RunContext) -> str:
    copies = await ctx.request_info({"copies_of": text}, response_type=int)
    return f"{copies!r} copies of {text}"


@workflow(name="tally", description="Asks for a list of counts, the form's answer field holding its JSON.")
async def tally(text: str, ctx: RunContext) -> str:
    counts = await ctx.request_info({"counts_of": text}, response_type=list[int])
    return f"{sum(counts)} in {text}"


async def test_a_number_takes_only_a_json_number(serve: Any) -> None:
    """The form says integer: an answer of true, "3" or " 3 " is refused naming the request (core would take true,
    and a string kept as result text would read as 3); the pause stays and 3 answers it. A type that is no
    primitive is answered with its JSON in a string field, read as JSON: "[1, 2]" is a list, '["1"]' is refused."""
    for definition, refused, good, expected in [
        (copier, [True, "3", " 3 "], 3, "3 copies of memo"),
        (tally, ['["1", 2]', "[true]", '"[1]"'], "[1, 2]", "3 in memo"),
    ]:
        async with Client(serve_mcp(serve, definition)) as client:
            paused = await pause(client, definition.name, "memo")
            for lax in refused:
                with pytest.raises(MCPError, match=r"valid integer|valid list"):
                    await client.session.call_tool(
                        definition.name,
                        {"task": "memo"},
                        input_responses=accept(paused, {"answer": lax}),
                        request_state=paused.request_state,
                        allow_input_required=True,
                    )
            done = await client.call_tool(
                definition.name,
                {"task": "memo"},
                input_responses=accept(paused, {"answer": good}),
                request_state=paused.request_state,
            )
        assert first_text(done) == expected


def test_host_mcp_sample_self_check() -> None:
    out = run_sample_self_check(ROOT / "samples" / "host_mcp.py")
    assert "self-check passed: deployed: ship it" in out


async def test_a_pause_taken_by_one_worker_is_answered_on_another(serve: Any, tmp_path: Any) -> None:
    """Two workers share the host key and the workflow's continuation store and checkpoints, nothing else."""
    from agent_framework import FileCheckpointStorage

    from agent_framework_functional import SQLiteContinuationStore

    async with SQLiteContinuationStore(tmp_path / "continuations.db") as store:

        def worker() -> str:
            checkpoints = FileCheckpointStorage(tmp_path / "checkpoints")
            agent = deployer.build(checkpoint_storage=checkpoints, continuation_store=store).as_agent(name="deployer")
            return f"{serve(mcp_app(agent, key=KEY)).base}/mcp"

        first_url, second_url = worker(), worker()
        async with Client(first_url) as first:
            paused = await pause(first, "deployer", "mcp-workers")
        state = paused.request_state
        async with Client(second_url) as second:
            with pytest.raises(MCPError, match="bool"):  # the agent's own check: nothing changes
                await second.call_tool(
                    "deployer",
                    {"task": "mcp-workers"},
                    input_responses=accept(paused, {"answer": "yes"}),
                    request_state=state,
                )
            done = await second.call_tool(
                "deployer",
                {"task": "mcp-workers"},
                input_responses=accept(paused, {"answer": True}),
                request_state=state,
            )
            assert first_text(done) == "deployed: mcp-workers"
        async with Client(first_url) as first:
            with pytest.raises(MCPError, match="continuation"):  # a replay on the worker that paused
                await first.call_tool(
                    "deployer",
                    {"task": "mcp-workers"},
                    input_responses=accept(paused, {"answer": True}),
                    request_state=state,
                )
    assert DEPLOYS["mcp-workers"] == 1


async def test_older_protocol_clients_are_asked_again_after_a_refused_answer(serve: Any) -> None:
    """An older client holds no requestState to retry with: a refused answer is asked again, not a dead pause."""
    seen: list[Any] = []
    answers = iter([{"answer": "yes"}, {"answer": True}])

    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params)
        return types.ElicitResult(action="accept", content=next(answers))

    url = serve_mcp(serve)
    async with Client(url, elicitation_callback=callback, mode="legacy") as client:
        result = await client.call_tool("deployer", {"task": "mcp-legacy-retry"})
    assert first_text(result) == "deployed: mcp-legacy-retry"
    assert len(seen) == 2 and "refused" in seen[1].message and "not a bool" in seen[1].message
    assert DEPLOYS["mcp-legacy-retry"] == 1
    async with Client(url, elicitation_callback=answering({"answer": "yes"}), mode="legacy") as client:
        with pytest.raises(MCPError, match="call the tool again"):
            await client.call_tool("deployer", {"task": "mcp-legacy-bad"})
    assert DEPLOYS["mcp-legacy-bad"] == 0


def test_an_answer_to_a_pause_held_elsewhere_keeps_a_string_as_json_text() -> None:
    """The worker that holds no pause cannot know the form: an ``answer`` string may be the JSON text of a list or a
    model (the string field of a type that is no primitive), so the worker that holds it reads it as JSON."""
    from agent_framework import WorkflowEvent

    from agent_framework_functional._chat import answers_to_responses
    from agent_framework_functional.hosting import mcp

    answer = mcp._answer("auto::0", None, types.ElicitResult(action="accept", content={"answer": "[1, 2]"}))  # pyright: ignore[reportPrivateUsage]
    event = WorkflowEvent.request_info(
        request_id="auto::0", source_executor_id="w", request_data={}, response_type=list[int]
    )
    assert answers_to_responses([answer], {"auto::0": event}) == {"auto::0": [1, 2]}
