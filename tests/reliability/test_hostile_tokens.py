"""Hostile continuation tokens: arbitrary values, near misses and booby-trapped objects.

Every presented value must get the one fixed authority error in bounded time (the hypothesis
deadline), must change nothing, must not leak the real secret or the input through the message,
``repr``, ``args`` or exception chaining, and the real token must still resume afterwards.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    RunContext,
    workflow,
)
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE

HYPOTHESIS = settings(
    max_examples=200,
    deadline=timedelta(milliseconds=500),
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MB = 1_000_000
URLSAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


@workflow
async def approve(topic: str, ctx: RunContext) -> str:
    answer = await ctx.request_info({"topic": topic}, response_type=str)
    return f"{topic}:{answer}"


class Boom(Exception):
    """Raised by hostile objects; its text must never reach the caller."""

    def __init__(self, where: str) -> None:
        super().__init__(f"HOSTILE-{where}")


class RaisingGetMapping(Mapping[str, Any]):
    """A mapping whose every accessor raises."""

    def __getitem__(self, key: str) -> Any:
        raise Boom("getitem")

    def get(self, key: str, default: Any = None) -> Any:
        raise Boom("get")

    def __iter__(self) -> Iterator[str]:
        raise Boom("iter")

    def __len__(self) -> int:
        raise Boom("len")


class RaisingEqMapping(dict[str, Any]):
    """A real dict (with the right fields) whose ``__eq__``/``__hash__``/``__getitem__`` raise."""

    def __eq__(self, other: object) -> bool:
        raise Boom("eq")

    def __hash__(self) -> int:
        raise Boom("hash")

    def __getitem__(self, key: str) -> Any:
        raise Boom("getitem")


class RaisingClass:
    """An object whose ``__class__`` lookup raises (``isinstance`` consults it)."""

    @property
    def __class__(self) -> type:  # type: ignore[override]
        raise Boom("class")


class CollidingKey:
    """A key that hashes like ``"token"`` and raises on comparison."""

    def __hash__(self) -> int:
        return hash("token")

    def __eq__(self, other: object) -> bool:
        raise Boom("key-eq")


class RaisingStr(str):
    """A ``str`` subclass carrying the right text whose comparisons and length raise."""

    def __eq__(self, other: object) -> bool:
        raise Boom("str-eq")

    def __hash__(self) -> int:
        raise Boom("str-hash")

    def __len__(self) -> int:
        raise Boom("str-len")


class Opaque:
    """Arbitrary object whose ``__eq__``, ``__repr__`` and ``__str__`` raise."""

    def __eq__(self, other: object) -> bool:
        raise Boom("eq")

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        raise Boom("repr")

    def __str__(self) -> str:
        raise Boom("str")


def near_misses(token: Mapping[str, Any]) -> list[Any]:
    """Tokens that are almost right: every one must still be refused."""
    secret: str = token["token"]
    other = "A" if secret[0] != "A" else "B"
    wrapped = {"kind": token["kind"], "version": token["version"]}
    values: list[Any] = [
        other + secret[1:],
        secret[:-1] + ("A" if secret[-1] != "A" else "B"),
        secret[:-1],
        secret[:1],
        "",
        secret + "A",
        " " + secret,
        secret + "\n",
        secret.upper() if secret.upper() != secret else secret.lower(),
        "\uff21" + secret[1:],  # fullwidth A, a non-ASCII look-alike
        secret[:-1] + "\ud800",  # unpaired surrogate
        secret[:-1] + "\u00e9",
        secret.encode("ascii"),
        bytearray(secret.encode("ascii")),
        memoryview(secret.encode("ascii")),
        [secret],
        (secret,),
        {"token": secret},
        {secret: secret},
        RaisingStr(secret),
        "A" * MB,
        secret + "A" * MB,
        "\U0001f600" * (MB // 4),
        None,
        0,
        1.5,
        True,
    ]
    cases: list[Any] = [{**wrapped, "token": value} for value in values]
    cases += [
        {**token, "kind": "Functional_workflow"},
        {**token, "kind": "functional_workflow "},
        {**token, "kind": b"functional_workflow"},
        {**token, "version": 1},
        {**token, "version": "2"},
        {**token, "version": "1.0"},
        {"token": secret},
        {"kind": token["kind"], "token": secret},
        {"version": token["version"], "token": secret},
        {},
        json.dumps(token),
        json.dumps(token).encode(),
        list(token.items()),
        tuple(token.values()),
        secret,
        [dict(token)],
        {"token": dict(token)},
        {**wrapped, CollidingKey(): secret},
        RaisingGetMapping(),
        RaisingEqMapping({**token, "token": other + secret[1:]}),
        RaisingClass(),
        Opaque(),
        object(),
        type,
        ContinuationAuthorityError,
        asyncio,
    ]
    return cases


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text() | st.binary(),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=10), children, max_size=5)
        | st.tuples(children, children)
    ),
    max_leaves=20,
)
token_shaped = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["functional_workflow", "functional", ""]) | st.text(max_size=20),
        "version": st.sampled_from(["1", "2", "", "01"]) | st.integers() | st.text(max_size=5),
        "token": st.text(alphabet=URLSAFE, min_size=40, max_size=46) | st.text(min_size=43, max_size=43) | json_like,
    },
    optional={"extra": json_like},
)


def assert_refused(wf: FunctionalWorkflow, presented: Any, secret: str, pending: frozenset[str]) -> None:
    """Present ``presented`` for a resume and for an abandonment; check the refusal and that nothing moved."""
    attempts = (
        lambda: wf.run(responses={"auto::0": "x"}, continuation_token=presented),
        lambda: wf.run(responses={"auto::0": "x"}, continuation_token=presented, stream=True),
        lambda: wf.abandon_continuation(presented),
    )
    for attempt in attempts:
        with pytest.raises(ContinuationAuthorityError) as info:
            attempt()
        exc = info.value
        assert type(exc) is ContinuationAuthorityError
        assert str(exc) == AUTHORITY_ERROR_MESSAGE
        assert exc.args == (AUTHORITY_ERROR_MESSAGE,)
        assert repr(exc) == f"ContinuationAuthorityError({AUTHORITY_ERROR_MESSAGE!r})"
        # Nothing chained either: a hostile object's own exception text must not ride along.
        assert exc.__cause__ is None
        assert exc.__context__ is None
        for text in (str(exc), repr(exc), *map(str, exc.args)):
            assert secret not in text
            if type(presented) is str and len(presented) >= 8 and presented not in AUTHORITY_ERROR_MESSAGE:
                assert presented not in text
            assert "HOSTILE" not in text
        assert wf.has_pending_continuation
        assert wf.pending_request_ids == pending
        assert not wf.is_running


async def _pause() -> tuple[FunctionalWorkflow, dict[str, Any]]:
    wf = approve.build()
    paused = await wf.run("tea")
    assert paused.continuation_token is not None
    return wf, dict(paused.continuation_token)


def _resume(wf: FunctionalWorkflow, token: Mapping[str, Any]) -> list[Any]:
    async def go() -> list[Any]:
        done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
        assert done.continuation_token is None
        return done.get_outputs()

    return asyncio.run(go())


def test_arbitrary_json_like_values_are_refused() -> None:
    wf, token = asyncio.run(_pause())
    pending = wf.pending_request_ids

    @HYPOTHESIS
    @given(json_like)
    def check(value: Any) -> None:
        assert_refused(wf, value, token["token"], pending)

    check()
    assert _resume(wf, token) == ["tea:ok"]


def test_token_shaped_mappings_are_refused() -> None:
    wf, token = asyncio.run(_pause())
    pending = wf.pending_request_ids

    @HYPOTHESIS
    @given(token_shaped)
    def check(value: dict[str, Any]) -> None:
        assert_refused(wf, value, token["token"], pending)

    check()
    assert _resume(wf, token) == ["tea:ok"]


def test_one_character_mutations_are_refused() -> None:
    wf, token = asyncio.run(_pause())
    pending = wf.pending_request_ids
    secret: str = token["token"]

    @HYPOTHESIS
    @given(st.integers(0, len(secret) - 1), st.characters(codec=None))
    def check(index: int, char: str) -> None:
        mutated = secret[:index] + char + secret[index + 1 :]
        if mutated == secret:
            return
        assert_refused(wf, {**token, "token": mutated}, secret, pending)

    check()
    assert _resume(wf, token) == ["tea:ok"]


def test_near_miss_and_hostile_objects_are_refused() -> None:
    wf, token = asyncio.run(_pause())
    pending = wf.pending_request_ids
    for presented in near_misses(token):
        assert_refused(wf, presented, token["token"], pending)
    # Extra keys are allowed: the real token with additive fields still works.
    assert _resume(wf, {**token, "issued_by": "test", "nested": {"a": [1, 2]}}) == ["tea:ok"]


def test_token_of_another_instance_is_refused() -> None:
    wf, token = asyncio.run(_pause())
    _other, other_token = asyncio.run(_pause())
    assert_refused(wf, other_token, token["token"], wf.pending_request_ids)
    assert _resume(wf, token) == ["tea:ok"]


async def test_agent_refuses_hostile_tokens_and_keeps_its_view() -> None:
    wf = approve.build()
    agent = wf.as_agent()
    paused = await agent.run("tea")
    token = paused.continuation_token
    assert token is not None
    before = dict(agent.pending_requests)
    for presented in near_misses(token):
        with pytest.raises(ContinuationAuthorityError) as info:
            agent.run(responses={"auto::0": "x"}, continuation_token=presented)
        assert str(info.value) == AUTHORITY_ERROR_MESSAGE
        assert info.value.__context__ is None
        assert token["token"] not in repr(info.value)
        with pytest.raises(ContinuationAuthorityError):
            agent.run(responses={"auto::0": "x"}, continuation_token=presented, stream=True)
        assert dict(agent.pending_requests) == before
    done = await agent.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.text == "tea:ok"
    assert done.continuation_token is None
