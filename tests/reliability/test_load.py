"""Load and memory.

1,000 independent instances run concurrently, each paused and resumed 10 times with its own token
(every tenth abandons half-way): every output is correct and nothing crosses between instances.
Afterwards the retained messages and step results are released while the instances still exist
(``weakref``), and once the instances go too, traced memory returns to within 5% of the warmed-up
baseline (``tracemalloc``). The benchmark script runs here in ``--quick`` mode as a smoke test.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import pytest

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    RunContext,
    step,
    workflow,
)

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

INSTANCES = 1000
ROUNDS = 10
ABANDON_EVERY = 10
ABANDON_AT = 5
ROOT = Path(__file__).resolve().parents[2]


class Payload:
    """Input message: an immutable value object, so core keeps it by reference (no deep copy)."""

    __slots__ = ("__weakref__", "blob", "ident")

    def __init__(self, ident: int) -> None:
        self.ident = ident
        self.blob = bytes(4096) + ident.to_bytes(4, "little")

    def __deepcopy__(self, memo: dict[int, Any]) -> Payload:
        return self


class StepResult:
    """Step output, kept by core's step cache until the run completes or is abandoned."""

    __slots__ = ("__weakref__", "data", "ident")

    def __init__(self, ident: int) -> None:
        self.ident = ident
        self.data = bytes(2048)

    def __deepcopy__(self, memo: dict[int, Any]) -> StepResult:
        return self


STEP_RESULTS: weakref.WeakSet[StepResult] = weakref.WeakSet()


@step
async def prepare(ident: int) -> StepResult:
    result = StepResult(ident)
    STEP_RESULTS.add(result)
    return result


@workflow
async def rounds(item: Payload, ctx: RunContext) -> tuple[int, int]:
    prepared = await prepare(item.ident)
    assert prepared.ident == item.ident
    total = 0
    for round_ in range(ROUNDS):
        total += await ctx.request_info({"ident": item.ident, "round": round_}, response_type=int)
    return item.ident, total


def answer(ident: int, round_: int) -> int:
    return ident * 1000 + round_


async def drive(wf: FunctionalWorkflow, ident: int, refs: list[weakref.ref[Any]]) -> str:
    """Pause and resume one instance ROUNDS times with its own tokens; check everything it sees."""
    item = Payload(ident)
    refs.append(weakref.ref(item))
    result = await wf.run(item)
    del item
    answers: dict[str, int] = {}
    seen_tokens: set[str] = set()
    for round_ in range(ROUNDS):
        token = result.continuation_token
        assert token is not None
        assert token["token"] not in seen_tokens  # fresh authority on every pause
        seen_tokens.add(token["token"])
        (request,) = result.get_request_info_events()
        assert request.request_id == f"auto::{round_}"
        assert request.data == {"ident": ident, "round": round_}
        assert wf.pending_request_ids == {request.request_id}
        if ident % ABANDON_EVERY == 0 and round_ == ABANDON_AT:
            wf.abandon_continuation(token)
            return "abandoned"
        answers[request.request_id] = answer(ident, round_)
        result = await wf.run(responses=dict(answers), continuation_token=token)
        with pytest.raises(ContinuationAuthorityError):
            wf.run(responses=dict(answers), continuation_token=token)  # spent
    assert result.continuation_token is None
    assert result.get_outputs() == [(ident, sum(answer(ident, r) for r in range(ROUNDS)))]
    return "completed"


async def settle() -> None:
    """Let the loop run the callbacks of finished tasks (they hold their contexts), then collect."""
    for _ in range(3):
        await asyncio.sleep(0)
        gc.collect()


async def warm_up(count: int) -> None:
    """Run ``count`` instances at once (one resume each, some abandoned) and drop them."""

    async def one(ident: int) -> None:
        wf = rounds.build()
        paused = await wf.run(Payload(ident))
        if ident % 2:
            wf.abandon_continuation(paused.continuation_token)
        else:
            await wf.run(
                responses={f"auto::{r}": 0 for r in range(ROUNDS)}, continuation_token=paused.continuation_token
            )

    await asyncio.gather(*(one(i) for i in range(count)))
    await settle()


@pytest.mark.slow
async def test_thousand_instances_ten_cycles_each_concurrently() -> None:
    instances = [rounds.build() for _ in range(INSTANCES)]
    item_refs: list[weakref.ref[Any]] = []
    outcomes = await asyncio.gather(*(drive(wf, i, item_refs) for i, wf in enumerate(instances)))
    assert outcomes.count("abandoned") == INSTANCES // ABANDON_EVERY
    assert outcomes.count("completed") == INSTANCES - INSTANCES // ABANDON_EVERY
    await settle()
    # The instances still exist, but no longer retain their messages or step results.
    assert len(item_refs) == INSTANCES
    assert [ref for ref in item_refs if ref() is not None] == []
    assert len(STEP_RESULTS) == 0
    assert all(not wf.has_pending_continuation and not wf.is_running for wf in instances)
    # Every instance is reusable; then all of them go away (nothing else keeps them alive).
    for wf in instances[:50]:
        paused = await wf.run(Payload(1))
        wf.abandon_continuation(paused.continuation_token)
    instance_refs = [weakref.ref(wf) for wf in instances]
    del instances, wf, paused
    await settle()
    assert [ref for ref in instance_refs if ref() is not None] == []


# Interpreter and event-loop bookkeeping is left out of the measurement: the loop's weak sets of
# tasks and async generators, the weakref.finalize registry and contextvars free lists keep a
# high-water size that moves with CPython's hash-table resizing, not with what we retain.
INFRASTRUCTURE = [
    tracemalloc.Filter(False, "*/asyncio/*"),
    tracemalloc.Filter(False, "*/weakref.py"),
    tracemalloc.Filter(False, "*/_weakrefset.py"),
    tracemalloc.Filter(False, "*/tracemalloc.py"),
]


def traced_bytes() -> int:
    """Traced bytes still allocated, outside interpreter and event-loop bookkeeping."""
    snapshot = tracemalloc.take_snapshot().filter_traces(INFRASTRUCTURE)
    return sum(stat.size for stat in snapshot.statistics("filename"))


@pytest.mark.slow
async def test_memory_returns_to_baseline_after_a_thousand_paused_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    # One round: tracing every allocation makes each cycle about ten times slower.
    monkeypatch.setattr(sys.modules[__name__], "ROUNDS", 1)
    await warm_up(4)
    tracemalloc.start()
    try:
        await warm_up(100)  # lazy imports and caches reach their working size before the baseline
        empty = traced_bytes()
        instances = [rounds.build() for _ in range(INSTANCES)]
        await settle()
        baseline = traced_bytes()  # 1,000 built, idle instances
        paused = await asyncio.gather(*(wf.run(Payload(i)) for i, wf in enumerate(instances)))
        held = traced_bytes()
        outcomes = await asyncio.gather(
            *(finish(wf, i, p) for i, (wf, p) in enumerate(zip(instances, paused, strict=True)))
        )
        assert outcomes.count("abandoned") == INSTANCES // ABANDON_EVERY
        del paused, outcomes
        await settle()
        final = traced_bytes()  # the same instances, every continuation completed or abandoned
        del instances
        await settle()
        gone = traced_bytes()
    finally:
        tracemalloc.stop()
    report = f"empty={empty} baseline={baseline} held={held} final={final} gone={gone}"
    # 1,000 paused continuations hold at least their 4 KB messages and 2 KB step results...
    assert held > baseline + INSTANCES * 6 * 1024, report
    # ...and once they complete or are abandoned the instances are back to their idle size.
    assert final <= baseline * 1.05, report
    # Dropping the instances returns to the warmed-up process: nothing is kept per instance.
    assert gone - empty < INSTANCES * 64, report


async def finish(wf: FunctionalWorkflow, ident: int, paused: Any) -> str:
    """Resume a paused instance through all rounds, or abandon every tenth."""
    if ident % ABANDON_EVERY == 0:
        wf.abandon_continuation(paused.continuation_token)
        return "abandoned"
    answers: dict[str, int] = {}
    for round_ in range(ROUNDS):
        answers[f"auto::{round_}"] = answer(ident, round_)
        paused = await wf.run(responses=dict(answers), continuation_token=paused.continuation_token)
    assert paused.get_outputs() == [(ident, sum(answer(ident, r) for r in range(ROUNDS)))]
    return "completed"


async def test_instances_release_messages_and_step_results_after_completion_and_abandonment() -> None:
    instances = [rounds.build() for _ in range(40)]
    refs: list[weakref.ref[Any]] = []
    outcomes = await asyncio.gather(*(drive(wf, i, refs) for i, wf in enumerate(instances)))
    assert outcomes.count("abandoned") == 4
    await settle()
    assert [ref for ref in refs if ref() is not None] == []
    assert len(STEP_RESULTS) == 0


async def test_paused_instances_hold_their_own_message_until_resolved() -> None:
    wf = rounds.build()
    item = Payload(7)
    ref = weakref.ref(item)
    paused = await wf.run(item)
    del item
    await settle()
    assert ref() is not None  # retained for the replay, as it must be
    wf.abandon_continuation(paused.continuation_token)
    await settle()
    assert ref() is None


@pytest.mark.slow
def test_load_benchmark_runs_quick() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_load.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    assert any(line.split()[:1] == ["100"] for line in lines), completed.stdout
    assert "memory per paused continuation" in completed.stdout
    assert completed.stderr == ""
