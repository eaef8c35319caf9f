"""Pause/resume with a rotating single-use token, and authority validation.

Every authority problem raises ``ContinuationAuthorityError`` (a ``ValueError``) with one fixed
message that reveals nothing, is checked before any request correlation, changes no state, and
leaves the right token able to resume.
"""

from __future__ import annotations

import asyncio
import collections
import json
import secrets
import string
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from request_ids import core_ids

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    FunctionalWorkflowDefinition,
    PendingContinuationError,
    RunContext,
    workflow,
)

AUTHORITY_MESSAGE = str(ContinuationAuthorityError())
ANSWER = "answer-0f5e-user-input"


def _assert_authority_error(exc: BaseException, *secrets_not_shown: str) -> None:
    assert type(exc) is ContinuationAuthorityError
    assert isinstance(exc, ValueError)
    assert str(exc) == AUTHORITY_MESSAGE
    assert exc.args == (AUTHORITY_MESSAGE,)
    for text in ("auto::0", ANSWER, "tea", *secrets_not_shown):
        assert text not in str(exc)
        assert text not in repr(exc)


async def _resume_ok(wf: FunctionalWorkflow, token: Mapping[str, Any]) -> None:
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["published: draft about tea (ok)"]
    assert done.continuation_token is None
    assert not wf.has_pending_continuation


# ---------------------------------------------------------------------------- pause and resume


async def test_pause_returns_token_and_resume_finishes(wf: FunctionalWorkflow, calls: collections.Counter[str]) -> None:
    paused = await wf.run("tea")
    assert paused.continuation_token is not None
    assert [e.request_id for e in paused.get_request_info_events()] == ["auto::0"]
    assert wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset({"auto::0"})
    assert set(wf.pending_requests) == {"auto::0"}
    assert wf.pending_requests["auto::0"].data == {"draft": "draft about tea"}
    assert calls["resumed"] == 0

    done = await wf.run(responses={"auto::0": "ship it"}, continuation_token=paused.continuation_token)
    assert done.get_outputs() == ["published: draft about tea (ship it)"]
    assert done.continuation_token is None
    assert not wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset()
    assert dict(wf.pending_requests) == {}
    assert not wf.is_running


async def test_step_is_not_reexecuted_on_resume(wf: FunctionalWorkflow, calls: collections.Counter[str]) -> None:
    paused = await wf.run("tea")
    assert calls["draft"] == 1
    assert calls["publish"] == 0
    await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
    assert calls["draft"] == 1, "the step's cached result must be replayed, not re-executed"
    assert calls["publish"] == 1
    assert calls["resumed"] == 1


async def test_clean_finish_has_no_token(no_pause_definition: FunctionalWorkflowDefinition) -> None:
    instance = no_pause_definition.build()
    result = await instance.run("tea")
    assert result.get_outputs() == ["draft about tea"]
    assert result.continuation_token is None
    assert not instance.has_pending_continuation
    # Fresh runs keep working after a clean finish.
    assert (await instance.run("coffee")).get_outputs() == ["draft about coffee"]


async def test_token_survives_json_round_trip(wf: FunctionalWorkflow) -> None:
    paused = await wf.run("tea")
    stored = json.dumps(paused.continuation_token)
    restored = json.loads(stored)
    assert restored == paused.continuation_token
    await _resume_ok(wf, restored)


async def test_multi_round_rotates_token_and_old_token_is_rejected(
    two_rounds_definition: FunctionalWorkflowDefinition, calls: collections.Counter[str]
) -> None:
    instance = two_rounds_definition.build()
    first = await instance.run("tea")
    token1 = first.continuation_token
    assert token1 is not None
    assert instance.pending_request_ids == frozenset({"auto::0"})

    second = await instance.run(responses={"auto::0": "A"}, continuation_token=token1)
    token2 = second.continuation_token
    assert token2 is not None
    assert token2["token"] != token1["token"]
    assert [e.request_id for e in second.get_request_info_events()] == ["auto::1"]
    assert instance.pending_request_ids == frozenset({"auto::1"})
    assert calls["after_first"] == 1

    # The first token is spent: it cannot resume the second pause, even with the right answers.
    with pytest.raises(ContinuationAuthorityError) as info:
        instance.run(responses={"auto::0": "A", "auto::1": "B"}, continuation_token=token1)
    _assert_authority_error(info.value, token1["token"], token2["token"])
    assert instance.pending_request_ids == frozenset({"auto::1"})

    done = await instance.run(responses={"auto::0": "A", "auto::1": "B"}, continuation_token=token2)
    assert done.get_outputs() == ["draft about tea [A] [B]"]
    assert done.continuation_token is None
    assert calls["draft"] == 1
    assert calls["after_second"] == 1
    # And the second token is spent too.
    with pytest.raises(ContinuationAuthorityError):
        instance.run(responses={"auto::1": "B"}, continuation_token=token2)


async def test_token_is_single_use_after_finish(paused: tuple[FunctionalWorkflow, dict[str, Any]]) -> None:
    wf, token = paused
    await _resume_ok(wf, token)
    with pytest.raises(ContinuationAuthorityError) as info:
        wf.run(responses={"auto::0": "again"}, continuation_token=token)
    _assert_authority_error(info.value, token["token"])


async def test_each_pause_issues_a_distinct_token(review_definition: FunctionalWorkflowDefinition) -> None:
    seen = set()
    for _ in range(3):
        instance = review_definition.build()
        token = (await instance.run("tea")).continuation_token
        assert token is not None
        seen.add(token["token"])
    assert len(seen) == 3


# ---------------------------------------------------------------------------- authority

_OMIT = object()


def _bad_tokens(good: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    secret = good["token"]
    yield "missing", _OMIT
    yield "none", None
    yield "empty mapping", {}
    yield "the secret as a bare string", secret
    yield "a string", "functional_workflow"
    yield "a list", [good["kind"], good["version"], secret]
    yield "wrong kind", {**good, "kind": "workflow"}
    yield "wrong version", {**good, "version": "2"}
    yield "version as int", {**good, "version": 1}
    yield "kind missing", {"version": good["version"], "token": secret}
    yield "version missing", {"kind": good["kind"], "token": secret}
    yield "token missing", {"kind": good["kind"], "version": good["version"]}
    yield "wrong value", {**good, "token": secrets.token_urlsafe(32)}
    yield "secret with one char changed", {**good, "token": secret[:-1] + ("A" if secret[-1] != "A" else "B")}
    yield "secret prefix", {**good, "token": secret[:-1]}
    yield "secret plus a char", {**good, "token": secret + "A"}
    yield "empty secret", {**good, "token": ""}
    yield "huge secret", {**good, "token": "A" * 1_000_000}
    yield "non-ascii", {**good, "token": secret[:-1] + "é"}
    yield "non-ascii full width", {**good, "token": "\uff21" * len(secret)}
    yield "unpaired surrogate", {**good, "token": "\ud800" + secret[1:]}
    yield "token as bytes", {**good, "token": secret.encode("ascii")}
    yield "token as int", {**good, "token": 12345}
    yield "token as None", {**good, "token": None}
    yield "token as list", {**good, "token": [secret]}
    yield "str subclass", {**good, "token": type("S", (str,), {})(secret)}


def _cases() -> list[str]:
    return [name for name, _ in _bad_tokens({"kind": "k", "version": "v", "token": "t"})]


def _call(wf: FunctionalWorkflow, token: Any, *, stream: bool, responses: Mapping[str, Any] | None = None) -> Any:
    kwargs: dict[str, Any] = {"responses": responses if responses is not None else {"auto::0": ANSWER}}
    if token is not _OMIT:
        kwargs["continuation_token"] = token
    return wf.run(stream=stream, **kwargs)


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
@pytest.mark.parametrize("case", _cases())
async def test_bad_token_is_rejected_with_fixed_message_and_changes_nothing(
    paused: tuple[FunctionalWorkflow, dict[str, Any]],
    calls: collections.Counter[str],
    case: str,
    stream: bool,
) -> None:
    wf, good = paused
    bad = dict(_bad_tokens(good))[case]
    with pytest.raises(ContinuationAuthorityError) as info:
        _call(wf, bad, stream=stream)  # raises at the call, before anything is awaited or iterated
    _assert_authority_error(info.value, good["token"])
    assert wf.has_pending_continuation
    assert wf.pending_request_ids == frozenset({"auto::0"})
    assert not wf.is_running
    assert calls["resumed"] == 0
    await _resume_ok(wf, good)
    assert calls["resumed"] == 1


@pytest.mark.parametrize("case", _cases())
async def test_authority_is_checked_before_request_correlation(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], case: str
) -> None:
    wf, good = paused
    bad = dict(_bad_tokens(good))[case]
    with pytest.raises(ContinuationAuthorityError) as info:
        _call(wf, bad, stream=False, responses={"no-such-request": ANSWER})
    _assert_authority_error(info.value, good["token"], "no-such-request")
    await _resume_ok(wf, good)


async def test_right_token_with_unknown_request_ids_is_a_correlation_error(
    paused: tuple[FunctionalWorkflow, dict[str, Any]],
) -> None:
    wf, good = paused
    with pytest.raises(ValueError) as info:
        wf.run(responses={"no-such-request": ANSWER}, continuation_token=good)
    assert not isinstance(info.value, ContinuationAuthorityError)
    assert good["token"] not in str(info.value)
    assert wf.has_pending_continuation
    assert not wf.is_running
    await _resume_ok(wf, good)


async def test_extra_keys_in_a_valid_token_are_accepted(paused: tuple[FunctionalWorkflow, dict[str, Any]]) -> None:
    wf, good = paused
    await _resume_ok(wf, {**good, "issued_at": "2026-01-01T00:00:00Z", "tenant": {"id": 7}})


async def test_token_as_another_mapping_type_is_accepted(paused: tuple[FunctionalWorkflow, dict[str, Any]]) -> None:
    from types import MappingProxyType

    wf, good = paused
    await _resume_ok(wf, MappingProxyType(dict(good)))


async def test_hostile_mapping_gets_the_same_error(paused: tuple[FunctionalWorkflow, dict[str, Any]]) -> None:
    class Hostile(dict[str, Any]):
        def get(self, key: Any, default: Any = None) -> Any:
            raise KeyError(f"leak {key}")

    wf, good = paused
    with pytest.raises(ContinuationAuthorityError) as info:
        wf.run(responses={"auto::0": ANSWER}, continuation_token=Hostile(good))
    _assert_authority_error(info.value, good["token"])
    await _resume_ok(wf, good)


async def test_token_of_another_instance_is_rejected(review_definition: FunctionalWorkflowDefinition) -> None:
    first = review_definition.build()
    second = review_definition.build()
    token1 = (await first.run("tea")).continuation_token
    token2 = (await second.run("tea")).continuation_token
    assert token1 is not None and token2 is not None
    for target, foreign in ((first, token2), (second, token1)):
        with pytest.raises(ContinuationAuthorityError) as info:
            target.run(responses={"auto::0": ANSWER}, continuation_token=foreign)
        _assert_authority_error(info.value, token1["token"], token2["token"])
    await _resume_ok(first, token1)
    await _resume_ok(second, token2)


@pytest.mark.parametrize("stream", [False, True], ids=["await", "stream"])
async def test_resume_with_nothing_pending_is_an_authority_error(
    review_definition: FunctionalWorkflowDefinition, stream: bool
) -> None:
    instance = review_definition.build()
    donor = review_definition.build()
    valid_looking = (await donor.run("tea")).continuation_token
    assert valid_looking is not None
    for token in (valid_looking, None, _OMIT):
        with pytest.raises(ContinuationAuthorityError) as info:
            _call(instance, token, stream=stream)
        _assert_authority_error(info.value, valid_looking["token"])
    assert not instance.is_running
    assert (await instance.run("tea")).continuation_token is not None


async def test_all_rejections_share_one_message(
    paused: tuple[FunctionalWorkflow, dict[str, Any]], review_definition: FunctionalWorkflowDefinition
) -> None:
    wf, good = paused
    messages = set()
    for _, bad in _bad_tokens(good):
        try:
            _call(wf, bad, stream=False)
        except ContinuationAuthorityError as exc:
            messages.add(str(exc))
    idle = review_definition.build()
    try:
        idle.run(responses={"auto::0": ANSWER}, continuation_token=good)
    except ContinuationAuthorityError as exc:
        messages.add(str(exc))
    assert messages == {AUTHORITY_MESSAGE}
    # The message tells the caller what to do next.
    assert "continuation_token" in AUTHORITY_MESSAGE
    assert "checkpoint_id" in AUTHORITY_MESSAGE


async def test_token_with_fresh_run_or_restore_is_a_shape_error(wf: FunctionalWorkflow) -> None:
    # A token only makes sense with a response-only resume; passing one elsewhere is a usage error.
    with pytest.raises(ValueError) as info:
        wf.run("tea", continuation_token={"kind": "functional_workflow", "version": "1", "token": "x"})
    assert not isinstance(info.value, ContinuationAuthorityError)
    assert not wf.is_running
    assert (await wf.run("tea")).continuation_token is not None


# ---------------------------------------------------------------------------- property: nothing guesses


@workflow(name="guarded")
async def guarded(topic: str, ctx: RunContext) -> str:
    return await ctx.request_info({"topic": topic}, response_type=str)


@pytest.fixture(scope="module")
def paused_for_property() -> tuple[FunctionalWorkflow, dict[str, Any]]:
    """One paused instance shared by every generated example (rejections change nothing)."""
    instance = guarded.build()
    token = asyncio.run(instance.run("tea")).continuation_token
    assert token is not None
    return instance, dict(token)


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(), st.binary())
_token_like = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=3),
    st.dictionaries(st.text(max_size=8), _scalars, max_size=4),
    st.fixed_dictionaries(
        {"kind": st.just("functional_workflow"), "version": st.just("1"), "token": _scalars},
        optional={"extra": _scalars},
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("functional_workflow"),
            "version": st.just("1"),
            "token": st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=43, max_size=43),
        }
    ),
)


@settings(max_examples=200, deadline=None)
@given(presented=_token_like)
def test_no_generated_token_authorises_a_resume(
    paused_for_property: tuple[FunctionalWorkflow, dict[str, Any]], presented: Any
) -> None:
    wf, good = paused_for_property
    if isinstance(presented, dict) and presented.get("token") == good["token"]:
        return  # (astronomically unlikely) the generator found the secret
    with pytest.raises(ContinuationAuthorityError) as info:
        wf.run(responses={"auto::0": ANSWER}, continuation_token=presented)
    _assert_authority_error(info.value, good["token"])
    assert wf.has_pending_continuation
    assert not wf.is_running


# ---------------------------------------------------------------------------- property: state machine


@workflow(name="machine")
async def machine_workflow(topic: str, ctx: RunContext) -> str:
    first = await ctx.request_info({"round": 1}, response_type=str)
    second = await ctx.request_info({"round": 2}, response_type=str)
    return f"draft about {topic} [{first}] [{second}]"


class AuthorityMachine(RuleBasedStateMachine):
    """Random sequences of runs, resumes, bad resumes and abandonments keep the invariants.

    The model: at most one outstanding token; it is pending exactly when the model says so; every
    token handed out earlier is dead; the agent's view equals the workflow's.
    """

    def __init__(self) -> None:
        super().__init__()
        self.wf = machine_workflow.build()
        self.agent = self.wf.as_agent()
        self.current: dict[str, Any] | None = None
        self.dead: list[dict[str, Any]] = []
        self.answers: dict[str, str] = {}

    def _run(self, **kwargs: Any) -> Any:
        return asyncio.run(self.wf.run(**kwargs))

    def _issue(self, token: Any) -> None:
        if self.current is not None:
            self.dead.append(self.current)
        self.current = dict(token) if token is not None else None

    @rule(topic=st.sampled_from(["tea", "coffee"]))
    def fresh_run(self, topic: str) -> None:
        if self.current is not None:
            with pytest.raises(PendingContinuationError):
                self.wf.run(topic)
            return
        result = self._run(message=topic)
        self.answers = {}
        self._issue(result.continuation_token)
        assert self.current is not None

    @rule(answer=st.text(min_size=1, max_size=5))
    def resume(self, answer: str) -> None:
        if self.current is None:
            with pytest.raises(ContinuationAuthorityError):
                self.wf.run(responses={"auto::0": answer}, continuation_token=None)
            return
        (pending,) = self.wf.pending_request_ids
        self.answers[pending] = answer
        result = self._run(responses=dict(self.answers), continuation_token=self.current)
        self._issue(result.continuation_token)
        if result.continuation_token is None:
            assert result.get_outputs() and result.get_outputs()[0].startswith("draft about")

    @precondition(lambda self: bool(self.dead))
    @rule(data=st.data())
    def resume_with_dead_token(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self.dead))
        with pytest.raises(ContinuationAuthorityError):
            self.wf.run(responses={"auto::0": "x", "auto::1": "y"}, continuation_token=token)

    @rule(forged=st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=43, max_size=43))
    def resume_with_forged_token(self, forged: str) -> None:
        token = {"kind": "functional_workflow", "version": "1", "token": forged}
        with pytest.raises(ContinuationAuthorityError):
            self.wf.run(responses={"auto::0": "x", "auto::1": "y"}, continuation_token=token)

    @rule(force=st.booleans())
    def abandon(self, force: bool) -> None:
        if force:
            self.agent.abandon_continuation(force=True)
        elif self.current is None:
            with pytest.raises(ContinuationAuthorityError):
                self.agent.abandon_continuation(None)
            return
        else:
            self.agent.abandon_continuation(self.current)
        self._issue(None)

    @invariant()
    def views_match_the_model(self) -> None:
        assert not self.wf.is_running
        assert self.wf.has_pending_continuation == (self.current is not None)
        assert core_ids(self.agent.pending_requests) == set(self.wf.pending_request_ids)
        assert bool(self.wf.pending_request_ids) == (self.current is not None)


TestAuthorityMachine = AuthorityMachine.TestCase
TestAuthorityMachine.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)


async def test_secrets_are_compared_in_constant_time_even_when_nothing_is_pending(
    paused: tuple[FunctionalWorkflow, dict[str, Any]],
    review_definition: FunctionalWorkflowDefinition,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import hmac

    wf, good = paused
    compared: list[tuple[bytes, bytes]] = []
    real_compare = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    wrong = {**good, "token": secrets.token_urlsafe(32)}
    with pytest.raises(ContinuationAuthorityError):
        wf.run(responses={"auto::0": ANSWER}, continuation_token=wrong)
    assert len(compared) == 1
    assert compared[0][0] == wrong["token"].encode("ascii")
    # With nothing pending the same comparison runs (against a decoy), so timing reveals nothing.
    idle = review_definition.build()
    with pytest.raises(ContinuationAuthorityError):
        idle.run(responses={"auto::0": ANSWER}, continuation_token=good)
    assert len(compared) == 2
    assert len(compared[1][1]) == len(good["token"])
    monkeypatch.undo()
    await _resume_ok(wf, good)
