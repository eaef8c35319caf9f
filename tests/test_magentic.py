"""Our agent as a participant of a Magentic orchestration (``MagenticBuilder``, agent-framework-orchestrations).

The manager is core's ``StandardMagenticManager`` over a core ``Agent`` whose OpenAI Responses calls
are faked with ``respx``: it plans, picks our agent, and declares the task done after our agent
answered. Our agent pauses for approval; the pause surfaces as the orchestration's ``request_info``,
the caller answers through the orchestration, and the gated step runs exactly once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx
from agent_framework import Agent, AgentResponse, AgentResponseUpdate, Content, Message, WorkflowEvent
from agent_framework.orchestrations import MagenticBuilder
from openai_wire import RESPONSES_URL, chat_client, json_response

from agent_framework_functional import RunContext, step, workflow

DEPLOYED: list[str] = []


@step
async def deploy(plan: str) -> str:
    DEPLOYED.append(plan)
    return f"deployed: {plan}"


@workflow(name="gated_deployer")
async def gated_deployer(conversation: list[Message], ctx: RunContext) -> str:
    """Deploys what the manager asked for, once a person approves."""
    instruction = conversation[-1].text
    approved = await ctx.request_info({"deploy": instruction}, response_type=bool)
    return await deploy(instruction) if approved else "not deployed"


def _ledger(*, satisfied: bool) -> str:
    def item(answer: Any) -> dict[str, Any]:
        return {"reason": "faked", "answer": answer}

    return json.dumps(
        {
            "is_request_satisfied": item(satisfied),
            "is_in_loop": item(False),
            "is_progress_being_made": item(True),
            "next_speaker": item("deployer"),
            "instruction_or_question": item("Deploy build 42 to staging."),
        }
    )


class FakeManagerModel:
    """The manager model's answers, chosen by which Magentic prompt the request carries."""

    def __init__(self) -> None:
        self.ledgers = 0
        self.prompts: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = request.content.decode()
        if "is_request_satisfied" in body:
            self.ledgers += 1
            self.prompts.append("ledger")
            # First ledger: ask the deployer; once it answered (its output is in the history): done.
            return json_response(_ledger(satisfied="deployed" in body))
        if "We have completed the task." in body:
            self.prompts.append("final")
            return json_response("Build 42 is on staging.")
        self.prompts.append("plan")
        return json_response("1. Ask the deployer to deploy build 42 to staging.")


@pytest.fixture
def manager_model() -> AsyncIterator[FakeManagerModel]:
    model = FakeManagerModel()
    with respx.mock(assert_all_called=True) as mock:
        mock.post(RESPONSES_URL).mock(side_effect=model)
        yield model


def _outputs(events: list[WorkflowEvent[Any]]) -> list[str]:
    texts: list[str] = []
    for event in events:
        if event.type == "output":
            data = event.data
            if isinstance(data, (AgentResponse, AgentResponseUpdate)):
                texts.append(data.text)
            elif isinstance(data, list):
                texts.extend(message.text for message in data if isinstance(message, Message))
    return texts


@pytest.mark.parametrize("approved", [True, False])
async def test_magentic_surfaces_the_pause_and_runs_the_gated_step_once(
    manager_model: FakeManagerModel, approved: bool
) -> None:
    DEPLOYED.clear()
    deployer = gated_deployer.build().as_agent(name="deployer", description="Deploys builds after approval.")
    manager = Agent(client=chat_client(), name="manager", instructions="Coordinate the team.")
    outer = MagenticBuilder(
        participants=[deployer], manager_agent=manager, max_round_count=6, output_from="all"
    ).build()

    paused = list(await outer.run("Deploy build 42 to staging."))
    requests = [event for event in paused if event.type == "request_info"]
    assert len(requests) == 1
    request = requests[0]
    assert isinstance(request.data, Content) and request.data.type == "function_approval_request"
    assert request.data.function_call.parse_arguments()["data"] == {"deploy": "Deploy build 42 to staging."}  # pyright: ignore[reportOptionalMemberAccess]
    assert DEPLOYED == []

    done = list(await outer.run(responses={request.request_id: request.data.to_function_approval_response(approved)}))
    assert (["Deploy build 42 to staging."] if approved else []) == DEPLOYED
    assert [event for event in done if event.type == "request_info"] == []
    outputs = _outputs(done)
    assert outputs[0] == ("deployed: Deploy build 42 to staging." if approved else "not deployed")
    assert outputs[-1] == "Build 42 is on staging."  # the manager's final answer
    assert manager_model.prompts[-1] == "final"
    assert manager_model.ledgers == 2
