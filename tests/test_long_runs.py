"""Long runs: runs this package drives cost linear time in their ``@step`` calls; core used directly is unchanged.

Core 1.23 checks every cached step entry on each cache miss (``_has_incompatible_versioned_cache_entry``)
and copies the whole step cache into each step's checkpoint. ``_core_compat.py`` gives the runs this
package drives an indexed check and a step-cache log (see its docstring); these tests pin the core
names it relies on, show that core's own classes keep core's behaviour in the same process, and that
ours gives core's answers (including its refusal of a cache written by another step definition).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import agent_framework
import pytest
from agent_framework import InMemoryCheckpointStorage, RunContext, WorkflowCheckpoint, get_run_context, step
from agent_framework._workflows import _functional as core_functional

from agent_framework_functional import _core_compat
from agent_framework_functional import workflow as our_workflow
from agent_framework_functional._core_compat import LinearFunctionalWorkflow, LinearRunContext
from agent_framework_functional._step_cache import STEP_CACHE, StepCacheOffer

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

SEEN_CONTEXTS: list[type[Any]] = []


@step
async def review(doc: str) -> dict[str, Any]:
    SEEN_CONTEXTS.append(type(get_run_context()))
    return {"id": doc, "flagged": doc.endswith("7")}


async def batch(docs: list[str]) -> int:
    flagged = 0
    for doc in docs:
        flagged += (await review(doc))["flagged"]
    return flagged


def _docs(count: int) -> list[str]:
    return [f"doc-{index:04d}" for index in range(count)]


def test_core_names_the_linear_step_cache_relies_on_exist() -> None:
    for name in (
        "_has_incompatible_versioned_cache_entry",
        "_export_step_cache",
        "_export_step_cache_auto_request_info_counts",
    ):
        assert callable(getattr(RunContext, name)), name
    workflow_methods = ("_execute", "_save_checkpoint", "_capture_replay_state", "_restore_replay_state")
    for name in (*workflow_methods, "_clear_replay_state"):
        assert callable(getattr(agent_framework.FunctionalWorkflow, name)), name
    ctx = RunContext("wf")
    for name in (
        "_step_cache",
        "_step_cache_auto_request_info_counts",
        "_expected_step_wrapper_identities",
        "_non_replayable_step_cache_keys",
    ):
        assert isinstance(getattr(ctx, name), (dict, set)), name
    assert ctx._on_step_completed is None  # pyright: ignore[reportPrivateUsage]  # core's per-step hook, unset by default
    assert callable(core_functional._decode_versioned_step_cache_key)  # pyright: ignore[reportPrivateUsage]
    assert STEP_CACHE == "_step_cache"


async def test_ours_runs_on_the_linear_context_and_core_keeps_its_own_in_the_same_process() -> None:
    steps = 7
    SEEN_CONTEXTS.clear()
    core_result = await agent_framework.workflow(batch).build().run(_docs(steps))
    core_types = set(SEEN_CONTEXTS)
    SEEN_CONTEXTS.clear()
    ours = our_workflow(batch).build()
    our_result = await ours.run(_docs(steps))
    assert core_types == {RunContext}
    assert [LinearRunContext] * steps == SEEN_CONTEXTS  # ours checks its cache over an index from the start
    assert core_result.get_outputs() == our_result.get_outputs() == [0]
    assert type(ours._core) is LinearFunctionalWorkflow  # pyright: ignore[reportPrivateUsage]
    # Core's class still has core's method: the fix is a subclass, never a patch.
    assert RunContext._has_incompatible_versioned_cache_entry.__module__ == core_functional.__name__  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize("storage", [None, "memory"])
async def test_a_run_that_pauses_resumes_on_the_index(storage: str | None) -> None:
    steps = 6

    async def gated(docs: list[str], ctx: RunContext) -> int:
        flagged = await batch(docs)
        approved = await ctx.request_info({"flagged": flagged}, response_type=bool)
        return flagged + await batch(docs[:1]) if approved else -1

    wf = our_workflow(gated).build(checkpoint_storage=InMemoryCheckpointStorage() if storage else None)
    SEEN_CONTEXTS.clear()
    paused = await wf.run(_docs(steps))
    request_id = paused.get_request_info_events()[0].request_id
    SEEN_CONTEXTS.clear()
    done = await wf.run(responses={request_id: True}, continuation_token=paused.continuation_token)
    assert done.get_outputs() == [0]
    assert [LinearRunContext] == SEEN_CONTEXTS  # the resume replays its cache over the index too


async def test_key_decodes_grow_linearly_in_ours_and_quadratically_in_core(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = 300
    counts = {"core": 0, "ours": 0}
    original = core_functional._decode_versioned_step_cache_key  # pyright: ignore[reportPrivateUsage]

    def counting(side: str) -> Any:
        def decode(key: str) -> Any:
            counts[side] += 1
            return original(key)

        return decode

    monkeypatch.setattr(core_functional, "_decode_versioned_step_cache_key", counting("core"))
    monkeypatch.setattr(_core_compat, "_decode_versioned_step_cache_key", counting("ours"))
    await agent_framework.workflow(batch).build().run(_docs(steps))
    core_decodes = counts["core"]
    counts["core"] = 0
    await our_workflow(batch).build().run(_docs(steps))
    assert core_decodes >= steps * (steps - 1) // 2  # core: every cached key on every miss
    assert counts["ours"] <= 2 * steps  # ours: the new key, once for the check and once for the index
    assert counts["core"] <= 3 * steps  # core's other decodes (key validation) stay per call


class OfferWatchingStorage(InMemoryCheckpointStorage):
    """Core's in-memory storage that takes step-cache offers and notes whether each save came with one that fits."""

    def __init__(self) -> None:
        super().__init__()
        self.step_saves = self.pause_saves = 0
        self.bypassed = 0

    async def save_with_offer(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        if checkpoint.pending_request_info_events:
            self.pause_saves += 1
        else:
            self.step_saves += 1
        if offer is None or not offer.take(checkpoint.state):
            self.bypassed += 1
        return await super().save(checkpoint)


async def test_every_step_save_of_a_run_we_drive_carries_the_step_cache_offer() -> None:
    # Core 1.23 saves each step through ``_save_checkpoint``; core 1.26 builds the checkpoint and saves it in
    # a task of its own from its per-step hook. Either way the storage must see the offer, or the package's
    # storages store the whole cache on every step (quadratic) and the run never switches to the index.
    steps = 12
    storage = OfferWatchingStorage()
    SEEN_CONTEXTS.clear()
    await our_workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=storage).run(_docs(steps))
    assert storage.step_saves >= steps
    assert storage.bypassed == 0, f"{storage.bypassed} of {storage.step_saves} step saves bypassed"
    assert SEEN_CONTEXTS[-1] is LinearRunContext  # a run with storage checks over the index too


async def test_the_pause_save_of_a_run_we_drive_carries_the_step_cache_offer() -> None:
    # The pause's save goes through core's ``_save_checkpoint`` (overridden by ``LinearFunctionalWorkflow``).
    async def gated(docs: list[str], ctx: RunContext) -> int:
        flagged = await batch(docs)
        return flagged if await ctx.request_info({"flagged": flagged}, response_type=bool) else -1

    storage = OfferWatchingStorage()
    paused = await our_workflow(gated).build(checkpoint_storage=storage).run(_docs(6))
    assert paused.continuation_token is not None
    assert storage.pause_saves == 1
    assert storage.bypassed == 0, f"{storage.bypassed} of {storage.step_saves + storage.pause_saves} saves bypassed"


async def test_key_decodes_stay_linear_in_a_run_with_checkpoint_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = 200
    decodes = 0
    original = core_functional._decode_versioned_step_cache_key  # pyright: ignore[reportPrivateUsage]

    def counting(key: str) -> Any:
        nonlocal decodes
        decodes += 1
        return original(key)

    monkeypatch.setattr(core_functional, "_decode_versioned_step_cache_key", counting)
    monkeypatch.setattr(_core_compat, "_decode_versioned_step_cache_key", counting)
    await our_workflow(batch).build(checkpoint_storage=InMemoryCheckpointStorage()).run(_docs(steps))
    assert decodes <= 5 * steps  # core's full-cache check on every step would be steps * (steps - 1) / 2


async def test_ours_writes_the_checkpoints_core_writes_to_cores_storages() -> None:
    steps = 40
    core_storage, our_storage = InMemoryCheckpointStorage(), InMemoryCheckpointStorage()
    await agent_framework.workflow(batch).build(checkpoint_storage=core_storage).run(_docs(steps))
    await our_workflow(checkpoint_retention=None)(batch).build(checkpoint_storage=our_storage).run(_docs(steps))
    core_chain = await core_storage.list_checkpoints(workflow_name="batch")
    our_chain = await our_storage.list_checkpoints(workflow_name="batch")
    assert len(core_chain) == len(our_chain) == steps + 1

    def content(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
        fields = dataclasses.asdict(checkpoint)
        for name in ("checkpoint_id", "previous_checkpoint_id", "timestamp"):
            fields.pop(name)
        return fields

    assert [content(c) for c in core_chain] == [content(c) for c in our_chain]


def _foreign(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    """The checkpoint as another definition of the same step would have written it (another wrapper identity)."""
    cache: dict[str, Any] = checkpoint.state["_step_cache"]
    decoded = core_functional._decode_versioned_step_cache_key(next(iter(cache)))  # pyright: ignore[reportPrivateUsage]
    assert decoded is not None
    wrapper = decoded[2]

    def swap(mapping: dict[str, Any]) -> dict[str, Any]:
        return {key.replace(wrapper, "f" * 64): value for key, value in mapping.items()}

    state = dict(checkpoint.state)
    state["_step_cache"] = swap(cache)
    state["_step_cache_auto_request_info_counts"] = swap(state["_step_cache_auto_request_info_counts"])
    return dataclasses.replace(checkpoint, checkpoint_id="foreign", previous_checkpoint_id=None, state=state)


@pytest.mark.parametrize("side", ["core", "ours"])
async def test_a_cache_written_by_another_step_definition_is_refused_as_core_refuses_it(side: str) -> None:
    storage = InMemoryCheckpointStorage()
    definition: Any = (
        agent_framework.workflow(batch) if side == "core" else our_workflow(checkpoint_retention=None)(batch)
    )
    await definition.build(checkpoint_storage=storage).run(_docs(3))
    last = (await storage.list_checkpoints(workflow_name="batch"))[-1]
    await storage.save(_foreign(last))
    with pytest.raises(ValueError, match="created by a different step definition"):
        await definition.build(checkpoint_storage=storage).run(checkpoint_id="foreign")


# LangGraph's async functional API needs Python 3.11; on 3.10 the benchmark says so and runs core and ours.
SIDES = {"core", "ours", "langgraph"} if sys.version_info >= (3, 11) else {"core", "ours"}


def test_the_long_run_benchmark_quick_run_prints_every_row() -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_long_runs.py"
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    for row in ("memory", "sqlite", "redis", "file", "postgres"):
        for size in (5, 20):
            cells = [line.split() for line in lines if line.split()[:2] == [row, str(size)]]
            assert {cell[2] for cell in cells} == SIDES, (row, size)
            assert all(float(cell[3]) > 0 for cell in cells)
    assert "linearity" in done.stdout
    assert "goals:" in done.stdout and "sqlite   linear" in done.stdout
    assert ("needs Python 3.11" in done.stdout) is (sys.version_info < (3, 11)), done.stdout
