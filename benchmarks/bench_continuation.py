"""Overhead of continuation authority: our FunctionalWorkflow against core's, side by side.

One workflow function (a ``@step`` draft, a ``ctx.request_info`` pause, a ``@step`` revision) is
wrapped twice in the same process: by core's ``agent_framework.workflow`` (resumed with
``run(responses=...)``) and by ours (resumed with ``run(responses=..., continuation_token=...)``).
Each row times one cycle on a reused instance:

* ``pause+resume``: a fresh run that pauses, then a resume that finishes; no checkpoint storage.
* ``pause+resume+ckpt``: the same with ``InMemoryCheckpointStorage`` (a checkpoint per step and
  one at the pause; each side has its own storage, replaced every round).
* ``plain run``: a workflow with one ``@step`` and no pause, run to completion.

The machine is small and shared, so the timing is built to resist other load:

* Time is the process's CPU time (``time.process_time_ns``), not wall time: a block does not get
  slower because another process held the CPU. Everything here runs on one thread, so CPU time is
  the work done.
* The two sides are interleaved: after a warm-up, every round times a short block of cycles for
  core and then for ours (alternating which goes first), each on a fresh instance.
* The figure per side is its best block (the minimum over rounds of the mean microseconds per
  cycle), and ``ours/core`` is the ratio of those figures. ``paired`` is the median over rounds of
  the ratio of the two adjacent blocks, a second estimate that cancels slow drifts in machine
  speed; the two should agree within a few percent.

Run it:

.. code-block:: bash

    python benchmarks/bench_continuation.py            # about 30 seconds on 2 cores
    python benchmarks/bench_continuation.py --quick    # a few seconds, for smoke tests
    # instructions per cycle, load-independent: (count at 220 cycles - count at 20) / 200
    PYTHONHASHSEED=0 valgrind --tool=callgrind python benchmarks/bench_continuation.py \
        --only pause+resume ours --cycles 220
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import agent_framework
from agent_framework import InMemoryCheckpointStorage, RunContext, WorkflowRunState, step

import agent_framework_functional

# Core says once per use that its functional API is experimental; that is noise in a benchmark.
warnings.filterwarnings("ignore", message=r"\[FUNCTIONAL_WORKFLOWS\]")

TARGET_RATIO = 1.03


@step
async def draft(topic: str) -> str:
    return f"A short post about {topic}."


@step
async def revise(text: str, feedback: str) -> str:
    return f"{text} ({feedback})"


async def review(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    feedback = await ctx.request_info({"draft": text}, response_type=str)
    return await revise(text, feedback)


async def plain(topic: str) -> str:
    return await draft(topic)


core_review = agent_framework.workflow(name="review")(review)
our_review = agent_framework_functional.workflow(name="review")(review)
core_plain = agent_framework.workflow(name="plain")(plain)
our_plain = agent_framework_functional.workflow(name="plain")(plain)

Cycle = Callable[[], Awaitable[None]]


def _core_hitl(storage: InMemoryCheckpointStorage | None) -> Cycle:
    wf = core_review.build(checkpoint_storage=storage)

    async def cycle() -> None:
        paused = await wf.run("tea")
        request_id = paused.get_request_info_events()[0].request_id
        done = await wf.run(responses={request_id: "ship it"})
        assert done.get_final_state() == WorkflowRunState.IDLE

    return cycle


def _our_hitl(storage: InMemoryCheckpointStorage | None) -> Cycle:
    wf = our_review.build(checkpoint_storage=storage)

    async def cycle() -> None:
        paused = await wf.run("tea")
        request_id = paused.get_request_info_events()[0].request_id
        done = await wf.run(responses={request_id: "ship it"}, continuation_token=paused.continuation_token)
        assert done.get_final_state() == WorkflowRunState.IDLE and done.continuation_token is None

    return cycle


def _core_plain(storage: InMemoryCheckpointStorage | None) -> Cycle:
    wf = core_plain.build(checkpoint_storage=storage)

    async def cycle() -> None:
        done = await wf.run("tea")
        assert done.get_final_state() == WorkflowRunState.IDLE

    return cycle


def _our_plain(storage: InMemoryCheckpointStorage | None) -> Cycle:
    wf = our_plain.build(checkpoint_storage=storage)

    async def cycle() -> None:
        done = await wf.run("tea")
        assert done.get_final_state() == WorkflowRunState.IDLE

    return cycle


@dataclass(frozen=True, slots=True)
class Row:
    """One benchmark row: how to build a cycle for each side, and whether it checkpoints."""

    name: str
    core: Callable[[InMemoryCheckpointStorage | None], Cycle]
    ours: Callable[[InMemoryCheckpointStorage | None], Cycle]
    checkpoints: bool


ROWS = (
    Row("pause+resume", _core_hitl, _our_hitl, checkpoints=False),
    Row("pause+resume+ckpt", _core_hitl, _our_hitl, checkpoints=True),
    Row("plain run", _core_plain, _our_plain, checkpoints=False),
)


async def _time_block(make: Callable[[InMemoryCheckpointStorage | None], Cycle], row: Row, cycles: int) -> float:
    """Mean microseconds per cycle over ``cycles`` cycles on one fresh instance."""
    cycle = make(InMemoryCheckpointStorage() if row.checkpoints else None)
    await cycle()  # first call of this instance: not timed
    gc.collect()
    start = time.process_time_ns()
    for _ in range(cycles):
        await cycle()
    return (time.process_time_ns() - start) / cycles / 1000


async def measure(row: Row, *, rounds: int, cycles: int, warmup: int) -> tuple[float, float, float]:
    """Return core's and our best block (microseconds per cycle) and the median paired ratio ours/core."""
    for _ in range(warmup):
        await _time_block(row.core, row, cycles)
        await _time_block(row.ours, row, cycles)
    core_us: list[float] = []
    ours_us: list[float] = []
    for index in range(rounds):
        order = ((row.core, core_us), (row.ours, ours_us))
        for make, sink in order if index % 2 == 0 else reversed(order):
            sink.append(await _time_block(make, row, cycles))
    paired = statistics.median(ours / core for core, ours in zip(core_us, ours_us, strict=True))
    return min(core_us), min(ours_us), paired


async def run_only(row_name: str, side: str, cycles: int) -> None:
    """Run ``cycles`` untimed cycles of one side of one row after 5 warm-up cycles (for instruction counts).

    Under ``valgrind --tool=callgrind`` the difference between two cycle counts, divided by the
    difference in cycles, is the instructions per cycle without start-up and imports.
    """
    (row,) = [row for row in ROWS if row.name == row_name]
    cycle = (row.core if side == "core" else row.ours)(InMemoryCheckpointStorage() if row.checkpoints else None)
    for _ in range(5):
        await cycle()
    gc.collect()  # as before each timed block: the counts then do not depend on when a full collection falls
    for _ in range(cycles):
        await cycle()


async def main() -> int:
    """Measure every row and print the table; exit 1 when a ratio misses the target (full runs only)."""
    parser = argparse.ArgumentParser(description="Continuation authority overhead: ours vs core.")
    parser.add_argument("--quick", action="store_true", help="short run for smoke tests (numbers are noisy)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per row (default 60, quick 2)")
    parser.add_argument("--cycles", type=int, help="cycles per timed block (default 50, quick 10)")
    parser.add_argument(
        "--only",
        nargs=2,
        metavar=("ROW", "SIDE"),
        help="run --cycles untimed cycles of one row ('pause+resume', ...) and side (core, ours): for callgrind",
    )
    args = parser.parse_args()
    if args.only:
        await run_only(args.only[0], args.only[1], args.cycles or 50)
        return 0
    rounds = args.rounds or (2 if args.quick else 60)
    cycles = args.cycles or (10 if args.quick else 50)
    warmup = 1 if args.quick else 2

    print(
        f"agent-framework-core {agent_framework.__version__}, agent-framework-functional "
        f"{agent_framework_functional.__version__}, Python {platform.python_version()}"
    )
    print(f"rounds={rounds} cycles/block={cycles} warmup={warmup}; best block, CPU microseconds per cycle")
    print(f"{'row':<20} {'core us':>10} {'ours us':>10} {'ours/core':>10} {'paired':>8}")
    missed: list[str] = []
    for row in ROWS:
        core_us, ours_us, paired = await measure(row, rounds=rounds, cycles=cycles, warmup=warmup)
        ratio = ours_us / core_us
        if ratio > TARGET_RATIO:
            missed.append(row.name)
        print(f"{row.name:<20} {core_us:>10.1f} {ours_us:>10.1f} {ratio:>10.3f} {paired:>8.3f}")
    if missed:
        print(f"above target ratio {TARGET_RATIO}: {', '.join(missed)}")
        return 0 if args.quick else 1
    print(f"all rows within target ratio {TARGET_RATIO}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
