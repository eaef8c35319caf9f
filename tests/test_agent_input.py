"""Input mapping: the workflow function's message parameter decides what a chat turn becomes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import pytest
from agent_framework import Content, Message

from agent_framework_functional import RunContext, workflow
from agent_framework_functional._chat import input_mode_for

TURN = [Message("user", ["first line"]), Message("user", ["second line"])]


@workflow(name="text")
async def text_workflow(text: str, ctx: RunContext) -> str:
    return f"{type(text).__name__}:{text}"


@workflow(name="message")
async def message_workflow(message: Message) -> str:
    return f"{type(message).__name__}:{message.role}:{message.text}"


@workflow(name="messages")
async def messages_workflow(ctx: RunContext, conversation: list[Message]) -> str:
    return " | ".join(f"{message.role}:{message.text}" for message in conversation)


@workflow(name="sequence")
async def sequence_workflow(conversation: Sequence[Message]) -> str:
    return f"{len(conversation)} messages, last={conversation[-1].text}"


@workflow(name="raw")
async def raw_workflow(value) -> str:  # type: ignore[no-untyped-def]
    return f"{type(value).__name__}:{value if isinstance(value, (str, dict)) else len(value)}"


@workflow(name="any")
async def any_workflow(value: Any) -> str:
    return type(value).__name__


@workflow(name="optional")
async def optional_workflow(text: Optional[str]) -> str:  # noqa: UP045
    return f"optional:{text}"


@workflow(name="union")
async def union_workflow(text: str | None) -> str:
    return f"union:{text}"


@pytest.mark.parametrize(
    ("definition", "mode"),
    [
        (text_workflow, "text"),
        (message_workflow, "message"),
        (messages_workflow, "messages"),
        (sequence_workflow, "messages"),
        (raw_workflow, "as_given"),
        (any_workflow, "as_given"),
        (optional_workflow, "text"),
        (union_workflow, "text"),
    ],
)
def test_mode_comes_from_the_message_parameter_annotation(definition: Any, mode: str) -> None:
    assert input_mode_for(definition.func) == mode


async def test_str_parameter_gets_the_text_of_the_input_messages() -> None:
    agent = text_workflow.build().as_agent()
    assert (await agent.run("hello")).text == "str:hello"
    # The last user message's text (hosts such as AG-UI resend the whole transcript).
    assert (await agent.run(TURN)).text == "str:second line"
    assert (await agent.run(Content.from_text(text="c"), stream=True).get_final_response()).text == "str:c"


async def test_optional_str_parameter_is_mapped_like_str() -> None:
    assert (await optional_workflow.build().as_agent().run(Message("user", ["x"]))).text == "optional:x"
    assert (await union_workflow.build().as_agent().run(["y"])).text == "union:y"


async def test_message_parameter_gets_the_last_input_message() -> None:
    agent = message_workflow.build().as_agent()
    assert (await agent.run(TURN)).text == "Message:user:second line"
    assert (await agent.run("solo")).text == "Message:user:solo"


async def test_list_of_messages_parameter_gets_all_input_messages() -> None:
    agent = messages_workflow.build().as_agent()
    assert (await agent.run(TURN)).text == "user:first line | user:second line"
    assert (await agent.run("solo")).text == "user:solo"


async def test_sequence_of_messages_parameter_gets_all_input_messages() -> None:
    agent = sequence_workflow.build().as_agent()
    assert (await agent.run(TURN)).text == "2 messages, last=second line"


async def test_list_of_messages_includes_history_from_the_session() -> None:
    agent = messages_workflow.build().as_agent()
    session = agent.create_session()

    await agent.run("one", session=session)
    second = await agent.run("two", session=session)

    assert second.text == "user:one | assistant:user:one | user:two"


async def test_str_parameter_sees_only_this_turn_even_with_history() -> None:
    agent = text_workflow.build().as_agent()
    session = agent.create_session()
    await agent.run("one", session=session)

    assert (await agent.run("two", session=session)).text == "str:two"


async def test_unannotated_and_any_parameters_get_the_input_as_given() -> None:
    raw = raw_workflow.build().as_agent()
    assert (await raw.run("hello")).text == "str:hello"
    assert (await raw.run(TURN)).text == "list:2"
    assert (await raw.run({"order": 7})).text == "dict:{'order': 7}"
    assert (await any_workflow.build().as_agent().run(Message("user", ["m"]))).text == "Message"


async def test_non_chat_input_passes_as_given_whatever_the_annotation() -> None:
    agent = text_workflow.build().as_agent()
    assert (await agent.run({"a": 1})).text == "dict:{'a': 1}"


async def test_input_mapper_overrides_the_annotation_and_sees_the_conversation() -> None:
    seen: list[list[str]] = []

    def mapper(conversation: list[Message]) -> str:
        seen.append([message.text for message in conversation])
        return conversation[-1].text.upper()

    agent = text_workflow.build().as_agent(input_mapper=mapper)
    session = agent.create_session()

    assert (await agent.run("quiet", session=session)).text == "str:QUIET"
    assert (await agent.run(TURN, session=session, stream=True).get_final_response()).text == "str:SECOND LINE"
    assert seen == [["quiet"], ["quiet", "str:QUIET", "first line", "second line"]]
    assert agent.input_mapper is mapper


async def test_input_mapper_rejects_non_chat_input_and_bad_mappers() -> None:
    agent = text_workflow.build().as_agent(input_mapper=lambda conversation: "x")
    with pytest.raises(TypeError, match="input_mapper"):
        agent.run({"not": "chat"})
    with pytest.raises(TypeError, match="input_mapper"):
        text_workflow.build().as_agent(input_mapper="not callable")  # type: ignore[arg-type]
