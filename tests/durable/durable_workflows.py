"""Workflows shared by the durable tests, their worker processes, and nothing else.

Module level, so core checkpoints and replays their steps without a ``replay_key``, and so that a
worker process importing this module computes the same workflow signature hash as the test process.
Resumed user code records each run in ``EFFECTS`` and, when ``AFF_DURABLE_EFFECTS`` names a file,
appends one line to it (the cross-process side-effect counter). ``HOOKS["after_answer"]`` runs
inside resumed user code; ``AFF_DURABLE_HANG`` (a marker path) makes a worker announce the resumed
code and then block forever, so a test can SIGKILL it after its claim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import os
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from agent_framework_functional import RunContext, step, workflow

EFFECTS: list[str] = []
HOOKS: dict[str, Callable[[Any], Awaitable[None]]] = {}


def _append_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


async def record_effect(answer: Any) -> None:
    """The side effect of resumed user code: counted in memory and, if configured, in a file."""
    EFFECTS.append(str(answer))
    path = os.environ.get("AFF_DURABLE_EFFECTS")
    if path:
        _append_line(path, f"{os.getpid()} {answer}")
    hook = HOOKS.get("after_answer")
    if hook is not None:
        await hook(answer)
    hang = os.environ.get("AFF_DURABLE_HANG")
    if hang:
        _append_line(hang, str(os.getpid()))
        await asyncio.Event().wait()


@step
async def draft(topic: str) -> str:
    return f"draft about {topic}"


@step
async def ship(text: str) -> str:
    return f"shipped: {text}"


@workflow(name="approval", description="Draft, wait for approval, ship.")
async def approval(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    answer = await ctx.request_info({"draft": text}, response_type=str)
    await record_effect(answer)
    return await ship(f"{text} ({answer})")


@workflow(name="approval")
async def approval_v2(topic: str, ctx: RunContext) -> str:
    """Same name, different code: another version, so another signature hash."""
    text = await draft(topic.upper())
    answer = await ctx.request_info({"draft": text}, response_type=str)
    await record_effect(answer)
    return await ship(f"{text} [{answer}]")


@workflow(name="other_approval")
async def other_approval(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    answer = await ctx.request_info({"draft": text}, response_type=str)
    await record_effect(answer)
    return await ship(f"{text} ({answer})")


@workflow(name="approval_two_rounds")
async def two_rounds(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    first = await ctx.request_info({"draft": text, "round": 1}, response_type=str)
    await record_effect(first)
    second = await ctx.request_info({"draft": text, "round": 2}, response_type=str)
    await record_effect(second)
    return await ship(f"{text} [{first}] [{second}]")


@workflow(name="counts_then_note")
async def counts_then_note(topic: str, ctx: RunContext) -> str:
    """Round one asks for a generic type (``list[int]``), round two for text."""
    text = await draft(topic)
    counts = await ctx.request_info({"draft": text, "round": 1}, response_type=list[int])
    await record_effect(counts)
    note = await ctx.request_info({"draft": text, "round": 2}, response_type=str)
    await record_effect(note)
    return await ship(f"{text} {sum(counts)} {note}")


@workflow(name="finishes")
async def finishes(topic: str) -> str:
    return await ship(topic)


class Verdict(BaseModel):
    """A structured answer (pydantic) that a chat ``function_result`` is converted to."""

    approved: bool
    note: str


@dataclasses.dataclass
class Rating:
    """A structured answer (dataclass) that a chat ``function_result`` is converted to."""

    stars: int
    comment: str


class Tone(enum.Enum):
    """An enum answer (a host sends its value, ``"formal"``)."""

    FORMAL = "formal"
    CASUAL = "casual"


class Draft(BaseModel):
    """A draft the reviewer edits and sends back ("approve with edits")."""

    title: str
    body: str


CHECKPOINT_TYPES = [
    "durable_workflows:Verdict",
    "durable_workflows:Rating",
    "durable_workflows:Tone",
    "durable_workflows:Draft",
    "types:GenericAlias",  # list[Draft] as a response_type
]
"""``allowed_checkpoint_types`` for a ``FileCheckpointStorage`` holding pauses that ask for these types."""


@workflow(name="approve_bool")
async def approve_bool(topic: str, ctx: RunContext) -> str:
    """Asks for a yes/no approval (``response_type=bool``), as an approval request answers it."""
    text = await draft(topic)
    approved = await ctx.request_info({"draft": text}, response_type=bool)
    await record_effect(approved)
    return await ship(f"{text} (approved={approved})")


@workflow(name="ask_verdict")
async def ask_verdict(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    verdict = await ctx.request_info({"draft": text}, response_type=Verdict)
    await record_effect(repr(verdict))
    return f"{type(verdict).__name__}: {verdict!r}"


@workflow(name="ask_rating")
async def ask_rating(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    rating = await ctx.request_info({"draft": text}, response_type=Rating)
    await record_effect(repr(rating))
    return f"{type(rating).__name__}: {rating!r}"


@workflow(name="edit_rounds")
async def edit_rounds(topic: str, ctx: RunContext) -> str:
    """Round one asks for a ``Tone`` (enum), round two for the edited drafts (``list[Draft]``)."""
    text = await draft(topic)
    tone = await ctx.request_info({"draft": text}, response_type=Tone)
    drafts = await ctx.request_info([Draft(title=text, body=tone.value)], response_type=list[Draft])
    await record_effect(f"{tone.value}:{[item.title for item in drafts]}")
    return f"{tone.value}: " + ", ".join(f"{item.title} ({type(item).__name__})" for item in drafts)


DEFINITIONS = {
    "approval": approval,
    "approval_v2": approval_v2,
    "other_approval": other_approval,
    "two_rounds": two_rounds,
    "counts_then_note": counts_then_note,
    "approve_bool": approve_bool,
    "ask_verdict": ask_verdict,
    "ask_rating": ask_rating,
    "edit_rounds": edit_rounds,
}
