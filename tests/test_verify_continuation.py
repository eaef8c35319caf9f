"""FunctionalWorkflow.verify_continuation_token(_async): read-only authority checks before a resume.

The agent's chat-native resume uses them to validate a token before it looks at the answers; they
must reject every bad token with the one fixed error, spend nothing, and change nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from agent_framework import WorkflowEvent

from agent_framework_functional import ContinuationAuthorityError, FunctionalWorkflow, FunctionalWorkflowDefinition
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE

Paused = tuple[FunctionalWorkflow, dict[str, Any]]


class RaisingMapping(Mapping[str, Any]):
    """A mapping whose every accessor raises: the check must not let that escape."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("HOSTILE-getitem")

    def get(self, key: str, default: Any = None) -> Any:
        raise RuntimeError("HOSTILE-get")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("HOSTILE-iter")

    def __len__(self) -> int:
        raise RuntimeError("HOSTILE-len")


def bad_tokens(token: Mapping[str, Any]) -> list[Any]:
    """Every kind of wrong token: missing, wrong type, missing fields, wrong kind/version/value, bad text."""
    secret: str = token["token"]
    flipped = ("A" if secret[0] != "A" else "B") + secret[1:]
    return [
        None,
        "",
        secret,
        42,
        [token],
        {},
        RaisingMapping(),
        {"kind": token["kind"], "version": token["version"]},
        {**token, "kind": "other"},
        {**token, "version": "2"},
        {**token, "version": 1},
        {**token, "token": flipped},
        {**token, "token": secret[:-1]},
        {**token, "token": secret + "A"},
        {**token, "token": secret.encode("ascii")},
        {**token, "token": "é" + secret[1:]},
        {**token, "token": "\ud800" + secret[1:]},
        {**token, "token": "x" * 1_000_000},
    ]


def snapshot(wf: FunctionalWorkflow) -> tuple[bool, frozenset[str], bool]:
    return wf.has_pending_continuation, wf.pending_request_ids, wf.is_running


async def test_a_valid_token_returns_a_read_only_view_of_the_pending_requests(paused: Paused) -> None:
    wf, token = paused

    pending = wf.verify_continuation_token(token)

    assert set(pending) == {"auto::0"}
    event = pending["auto::0"]
    assert isinstance(event, WorkflowEvent) and event.type == "request_info"
    assert event.data == {"draft": "draft about tea"} and event.response_type is str
    with pytest.raises(TypeError):
        pending["auto::1"] = event  # type: ignore[index]
    assert dict(await wf.verify_continuation_token_async(token)) == dict(pending)  # same without a store


async def test_verifying_spends_nothing_and_extra_keys_are_allowed(paused: Paused) -> None:
    wf, token = paused
    before = snapshot(wf)

    for _ in range(3):
        wf.verify_continuation_token(token)
        await wf.verify_continuation_token_async({**token, "extra": "ignored"})

    assert snapshot(wf) == before
    done = await wf.run(responses={"auto::0": "ok"}, continuation_token=token)
    assert done.get_outputs() == ["published: draft about tea (ok)"]


async def test_every_bad_token_gets_the_fixed_error_and_changes_nothing(paused: Paused) -> None:
    wf, token = paused
    before = snapshot(wf)

    for bad in bad_tokens(token):
        with pytest.raises(ContinuationAuthorityError) as sync_error:
            wf.verify_continuation_token(bad)
        with pytest.raises(ContinuationAuthorityError) as async_error:
            await wf.verify_continuation_token_async(bad)
        for caught in (sync_error.value, async_error.value):
            assert str(caught) == AUTHORITY_ERROR_MESSAGE
            assert caught.__cause__ is None and token["token"] not in repr(caught)
        assert snapshot(wf) == before

    done = await wf.run(responses={"auto::0": "still valid"}, continuation_token=token)
    assert done.continuation_token is None


async def test_nothing_pending_rejects_every_token(
    review_definition: FunctionalWorkflowDefinition, paused: Paused
) -> None:
    _, token = paused
    idle = review_definition.build()  # another instance, with nothing pending
    for presented in [token, None, {}]:
        with pytest.raises(ContinuationAuthorityError):
            idle.verify_continuation_token(presented)
        with pytest.raises(ContinuationAuthorityError):
            await idle.verify_continuation_token_async(presented)
    assert snapshot(idle) == (False, frozenset(), False)


async def test_a_spent_token_and_a_claimed_one_are_rejected(paused: Paused) -> None:
    wf, token = paused
    stream = wf.run(responses={"auto::0": "ok"}, continuation_token=token, stream=True)
    with pytest.raises(ContinuationAuthorityError):  # accepted resume holds the claim
        wf.verify_continuation_token(token)
    await stream.get_final_response()

    with pytest.raises(ContinuationAuthorityError):  # spent
        wf.verify_continuation_token(token)
    with pytest.raises(ContinuationAuthorityError):
        await wf.verify_continuation_token_async(token)


async def test_an_abandoned_token_is_rejected(paused: Paused) -> None:
    wf, token = paused
    wf.abandon_continuation(token)
    with pytest.raises(ContinuationAuthorityError):
        wf.verify_continuation_token(token)
