"""Core still calls, on the package's path, every core method ``_core_compat.py`` overrides.

A name that core keeps but no longer calls would leave our override dead without an error (core 1.26 stopped
calling ``_save_checkpoint`` for step saves that way). Each override is wrapped with a counter and one
pause-and-resume cycle with checkpoint storage must reach every one of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage, RunContext, step

from agent_framework_functional import workflow
from agent_framework_functional._core_compat import LinearFunctionalWorkflow, LinearRunContext

WORKFLOW_OVERRIDES = (
    "_discover_workflow_dependencies",
    "_compute_signature_hash",
    "_capture_replay_state",
    "_restore_replay_state",
    "_clear_replay_state",
    "_execute",
    "_save_checkpoint",
)
CONTEXT_OVERRIDES = (
    "_has_incompatible_versioned_cache_entry",
    "_export_step_cache",
    "_export_step_cache_auto_request_info_counts",
)


@step
async def _count(value: int) -> int:
    return value + 1


async def _reviewed(start: int, ctx: RunContext) -> int:
    value = start
    for _ in range(6):
        value = await _count(value)
    approved = await ctx.request_info({"value": value}, response_type=bool)
    return await _count(value) if approved else -1


def _counting(calls: Counter[str], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return function(*args, **kwargs)

    return counted


def _wrap(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, calls: Counter[str]) -> None:
    raw = vars(owner)[name]
    if isinstance(raw, classmethod):
        wrapped: Any = classmethod(_counting(calls, name, raw.__func__))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    elif isinstance(raw, staticmethod):
        wrapped = staticmethod(_counting(calls, name, raw.__func__))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    else:
        wrapped = _counting(calls, name, raw)
    monkeypatch.setattr(owner, name, wrapped)


async def test_core_calls_every_override_on_a_pause_and_resume_with_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()
    for name in WORKFLOW_OVERRIDES:
        _wrap(monkeypatch, LinearFunctionalWorkflow, name, calls)
    for name in CONTEXT_OVERRIDES:
        _wrap(monkeypatch, LinearRunContext, name, calls)
    wf = workflow(_reviewed).build(checkpoint_storage=InMemoryCheckpointStorage())
    paused = await wf.run(1)
    request_id = next(iter(wf.pending_request_ids))
    done = await wf.run(responses={request_id: True}, continuation_token=paused.continuation_token)
    assert done.get_outputs() == [8]
    never = [name for name in (*WORKFLOW_OVERRIDES, *CONTEXT_OVERRIDES) if calls[name] == 0]
    assert never == [], f"core no longer calls {never} on our path: see AGENTS.md, Adding a core version to CI"
