"""One human-in-the-loop cycle in core, in ours and in LangGraph's functional API, side by side.

The same workflow (a step that drafts, a pause for a string, a step that revises) is written three
times and run interleaved in one process:

* ``core``: ``agent_framework.workflow`` / ``step`` / ``RunContext.request_info``, resumed with
  ``run(responses=...)`` (or ``run(checkpoint_id=..., responses=...)`` on a fresh instance).
* ``ours``: ``agent_framework_functional.workflow`` over the same function, resumed with
  ``run(responses=..., continuation_token=...)``.
* ``langgraph``: ``langgraph.func.entrypoint`` / ``task`` with ``langgraph.types.interrupt``,
  resumed with ``ainvoke(Command(resume=...), config)``.

One cycle is a fresh run that pauses plus the resume that finishes it. Rows:

* ``memory``: core and ours without checkpoint storage; LangGraph with ``InMemorySaver`` (its
  ``interrupt`` needs a checkpointer).
* ``memory+ckpt``: core and ours with ``InMemoryCheckpointStorage``; LangGraph with ``InMemorySaver``.
* ``disk same``: resumed on the instance that paused. Core with ``FileCheckpointStorage``; ours with
  ``FileCheckpointStorage`` and ``SQLiteContinuationStore`` (a durable token); LangGraph with
  ``AsyncSqliteSaver`` (``langgraph-checkpoint-sqlite``).
* ``disk cold``: resumed by a second "worker" that never saw the pause: its own storage objects and
  store or saver connections on the same folder and files, in the same process. Core and ours
  build a fresh instance from the definition for the pause and another for the resume (an instance
  holds one session's replay state); core restores the pause with ``run(checkpoint_id=...,
  responses=...)``, the checkpoint id recorded by a small storage proxy the host keeps (core
  reports no id, and ``get_latest`` reads every checkpoint file); ours presents the token and the
  store finds the checkpoint. LangGraph's compiled graph keeps no per-thread state, so each worker
  builds its graph once and the second one resumes the thread through its own saver connection.

LangGraph runs each cycle on a new ``thread_id`` with its default ``durability="async"``. Its
sync ``SqliteSaver`` cannot serve ``ainvoke`` (its async methods raise ``NotImplementedError``),
so the async entrypoint uses ``AsyncSqliteSaver``, which runs SQLite on an ``aiosqlite`` thread.
The disk rows keep each library's default durability, and they differ: LangGraph's SQLite file is
in WAL mode with SQLite's default ``synchronous=FULL`` (an ``fdatasync`` per commit, about seven
per cycle), ``FileCheckpointStorage`` replaces a temporary file without ``fsync``, and
``SQLiteContinuationStore`` uses WAL with ``synchronous=NORMAL``.

Timing, as in ``bench_continuation.py``: blocks of cycles, each on fresh instances, storage and
files (set up and torn down outside the timed part; the first cycle of a block is not timed);
after warm-up blocks, every round times one block per side, rotating which side goes first. A
side's figure is its best block (the minimum over rounds of the mean microseconds per cycle), the
ratios are ratios of those figures, and ``paired`` ratios are the median over rounds of the ratio
of the blocks of the same round. Clocks: every row reports process CPU time
(``time.process_time_ns``; it counts the SQLite worker threads too); the disk rows report wall
time (``time.perf_counter_ns``) as a second line as well, because waiting on the disk and on
thread hand-offs costs no CPU but does cost latency. There is no target: the script exits 0.

Run it:

.. code-block:: bash

    pip install -e ".[bench]"
    python benchmarks/bench_peers.py            # about two minutes on 2 cores
    python benchmarks/bench_peers.py --quick    # a few seconds, for smoke tests (numbers are noisy)

On Python 3.10 the LangGraph columns show ``-`` and the script says why: LangGraph's async
functional API needs Python 3.11 or newer (its ``task`` documentation); core and ours still run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import itertools
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agent_framework
from agent_framework import (
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    RunContext,
    WorkflowCheckpoint,
    WorkflowRunState,
    step,
)

import agent_framework_functional
from agent_framework_functional import SQLiteContinuationStore

try:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.func import entrypoint, task
    from langgraph.types import Command, interrupt
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise SystemExit(f'bench_peers.py needs LangGraph: pip install -e ".[bench]" ({exc})') from exc

# Core says once per use that its functional API is experimental; that is noise in a benchmark.
warnings.filterwarnings("ignore", message=r"\[FUNCTIONAL_WORKFLOWS\]")

# LangGraph documents its async functional API (an async ``@task``, ``interrupt`` in async code) as
# needing Python 3.11 or newer: before 3.11 an asyncio task cannot be given the run's context, so
# ``get_config()`` fails inside it. On Python 3.10 the LangGraph side is left out and the rest runs.
LANGGRAPH_RUNS = sys.version_info >= (3, 11)
LANGGRAPH_SKIPPED = (
    "LangGraph columns skipped: LangGraph's async functional API (async @task, interrupt) "
    f"needs Python 3.11 or newer; this is Python {platform.python_version()}"
)
SIDES = ("core", "ours", "langgraph") if LANGGRAPH_RUNS else ("core", "ours")
TOPIC = "tea"
ANSWER = "ship it"
EXPECTED = f"A short post about {TOPIC}. ({ANSWER})"
# Step bodies that ran, by step name: every block checks that a resume replayed the draft and did
# not run it again (one draft and one revision per cycle, for every side).
CALLS = {"draft": 0, "revise": 0}

# ---------------------------------------------------------------- the workflow, in Agent Framework


@step
async def draft(topic: str) -> str:
    CALLS["draft"] += 1
    return f"A short post about {topic}."


@step
async def revise(text: str, feedback: str) -> str:
    CALLS["revise"] += 1
    return f"{text} ({feedback})"


async def review(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    feedback = await ctx.request_info({"draft": text}, response_type=str)
    return await revise(text, feedback)


core_review = agent_framework.workflow(name="review")(review)
our_review = agent_framework_functional.workflow(name="review")(review)

# ---------------------------------------------------------------- the same workflow, in LangGraph


@task
async def lg_draft(topic: str) -> str:
    CALLS["draft"] += 1
    return f"A short post about {topic}."


@task
async def lg_revise(text: str, feedback: str) -> str:
    CALLS["revise"] += 1
    return f"{text} ({feedback})"


async def lg_review(topic: str) -> str:
    text = await lg_draft(topic)
    feedback = interrupt({"draft": text})
    return await lg_revise(text, feedback)


def lg_graph(checkpointer: Any) -> Any:
    """Compile the LangGraph workflow with ``checkpointer`` (what a worker does once at start-up)."""
    return entrypoint(checkpointer=checkpointer)(lg_review)


# ---------------------------------------------------------------- cycles

Cycle = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Block:
    """A cycle bound to the fresh resources of one timed block, and how to release them."""

    cycle: Cycle
    close: Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


class RecordingStorage(FileCheckpointStorage):
    """``FileCheckpointStorage`` that remembers the id of the last checkpoint saved through it.

    Core's result names no checkpoint, so a host that resumes a pause elsewhere keeps the id itself.
    """

    last_saved_id: str | None = None

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Save ``checkpoint`` and remember its id."""
        self.last_saved_id = await super().save(checkpoint)
        return self.last_saved_id


def _core_cycle(wf: agent_framework.FunctionalWorkflow) -> Cycle:
    async def cycle() -> None:
        paused = await wf.run(TOPIC)
        request_id = paused.get_request_info_events()[0].request_id
        done = await wf.run(responses={request_id: ANSWER})
        assert done.get_final_state() == WorkflowRunState.IDLE and done.get_outputs() == [EXPECTED]

    return cycle


def _our_cycle(wf: agent_framework_functional.FunctionalWorkflow) -> Cycle:
    async def cycle() -> None:
        paused = await wf.run(TOPIC)
        request_id = paused.get_request_info_events()[0].request_id
        done = await wf.run(responses={request_id: ANSWER}, continuation_token=paused.continuation_token)
        assert done.get_final_state() == WorkflowRunState.IDLE and done.get_outputs() == [EXPECTED]
        assert done.continuation_token is None

    return cycle


def _lg_cycle(pause_graph: Any, resume_graph: Any) -> Cycle:
    threads = itertools.count()

    async def cycle() -> None:
        config = {"configurable": {"thread_id": f"t{next(threads)}"}}
        paused = await pause_graph.ainvoke(TOPIC, config)
        assert paused["__interrupt__"][0].value == {"draft": f"A short post about {TOPIC}."}
        done = await resume_graph.ainvoke(Command(resume=ANSWER), config)
        assert done == EXPECTED

    return cycle


# --- memory rows: core and ours with no storage or InMemoryCheckpointStorage, LangGraph InMemorySaver


def _memory_row(checkpoints: bool) -> dict[str, Callable[[Path], Awaitable[Block]]]:
    def storage() -> InMemoryCheckpointStorage | None:
        return InMemoryCheckpointStorage() if checkpoints else None

    async def core(_: Path) -> Block:
        return Block(_core_cycle(core_review.build(checkpoint_storage=storage())), _nothing)

    async def ours(_: Path) -> Block:
        return Block(_our_cycle(our_review.build(checkpoint_storage=storage())), _nothing)

    async def langgraph(_: Path) -> Block:
        graph = lg_graph(InMemorySaver())
        return Block(_lg_cycle(graph, graph), _nothing)

    return {"core": core, "ours": ours, "langgraph": langgraph}


# --- disk, same instance


async def _core_disk_same(folder: Path) -> Block:
    wf = core_review.build(checkpoint_storage=FileCheckpointStorage(folder / "checkpoints"))
    return Block(_core_cycle(wf), _nothing)


async def _our_disk_same(folder: Path) -> Block:
    store = SQLiteContinuationStore(folder / "continuations.db")
    wf = our_review.build(checkpoint_storage=FileCheckpointStorage(folder / "checkpoints"), continuation_store=store)
    return Block(_our_cycle(wf), store.aclose)


async def _lg_open_saver(stack: contextlib.AsyncExitStack, path: Path) -> AsyncSqliteSaver:
    # A connection of its own; LangGraph creates the tables on first use (the untimed first cycle).
    return await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(path)))


async def _lg_disk_same(folder: Path) -> Block:
    stack = contextlib.AsyncExitStack()
    graph = lg_graph(await _lg_open_saver(stack, folder / "langgraph.db"))
    return Block(_lg_cycle(graph, graph), stack.aclose)


# --- disk, fresh instance (a cold worker resumes)


async def _core_disk_cold(folder: Path) -> Block:
    pausing = RecordingStorage(folder / "checkpoints")  # worker one
    resuming = FileCheckpointStorage(folder / "checkpoints")  # worker two: same folder, its own object

    async def cycle() -> None:
        paused = await core_review.build(checkpoint_storage=pausing).run(TOPIC)
        request_id = paused.get_request_info_events()[0].request_id
        checkpoint_id = pausing.last_saved_id
        assert checkpoint_id is not None
        wf = core_review.build(checkpoint_storage=resuming)
        done = await wf.run(checkpoint_id=checkpoint_id, responses={request_id: ANSWER})
        assert done.get_final_state() == WorkflowRunState.IDLE and done.get_outputs() == [EXPECTED]

    return Block(cycle, _nothing)


async def _our_disk_cold(folder: Path) -> Block:
    store_one = SQLiteContinuationStore(folder / "continuations.db")
    store_two = SQLiteContinuationStore(folder / "continuations.db")
    storage_one = FileCheckpointStorage(folder / "checkpoints")
    storage_two = FileCheckpointStorage(folder / "checkpoints")

    async def cycle() -> None:
        paused = await our_review.build(checkpoint_storage=storage_one, continuation_store=store_one).run(TOPIC)
        request_id = paused.get_request_info_events()[0].request_id
        wf = our_review.build(checkpoint_storage=storage_two, continuation_store=store_two)
        done = await wf.run(responses={request_id: ANSWER}, continuation_token=paused.continuation_token)
        assert done.get_final_state() == WorkflowRunState.IDLE and done.get_outputs() == [EXPECTED]
        assert done.continuation_token is None

    async def close() -> None:
        await store_one.aclose()
        await store_two.aclose()

    return Block(cycle, close)


async def _lg_disk_cold(folder: Path) -> Block:
    stack = contextlib.AsyncExitStack()
    pausing = lg_graph(await _lg_open_saver(stack, folder / "langgraph.db"))
    resuming = lg_graph(await _lg_open_saver(stack, folder / "langgraph.db"))
    return Block(_lg_cycle(pausing, resuming), stack.aclose)


@dataclass(frozen=True, slots=True)
class Row:
    """One benchmark row: how to build a block for each side, and whether it touches the disk."""

    name: str
    sides: dict[str, Callable[[Path], Awaitable[Block]]]
    disk: bool


ROWS = (
    Row("memory", _memory_row(checkpoints=False), disk=False),
    Row("memory+ckpt", _memory_row(checkpoints=True), disk=False),
    Row("disk same", {"core": _core_disk_same, "ours": _our_disk_same, "langgraph": _lg_disk_same}, disk=True),
    Row("disk cold", {"core": _core_disk_cold, "ours": _our_disk_cold, "langgraph": _lg_disk_cold}, disk=True),
)

# ---------------------------------------------------------------- timing


async def _time_block(make: Callable[[Path], Awaitable[Block]], cycles: int, scratch: Path) -> tuple[float, float]:
    """Mean CPU and wall microseconds per cycle over ``cycles`` cycles on fresh resources."""
    folder = Path(tempfile.mkdtemp(dir=scratch))
    block = await make(folder)
    try:
        await block.cycle()  # first cycle of these resources: not timed
        CALLS.update(draft=0, revise=0)
        gc.collect()
        cpu_start, wall_start = time.process_time_ns(), time.perf_counter_ns()
        for _ in range(cycles):
            await block.cycle()
        cpu, wall = time.process_time_ns() - cpu_start, time.perf_counter_ns() - wall_start
    finally:
        await block.close()
        shutil.rmtree(folder, ignore_errors=True)
    # A resume that ran the draft again would have re-run the workflow instead of resuming it.
    counts = dict(CALLS)
    assert counts == {"draft": cycles, "revise": cycles}, counts
    return cpu / cycles / 1000, wall / cycles / 1000


@dataclass(frozen=True, slots=True)
class Figures:
    """One clock's result for one row: each side's best block and the median paired ratios."""

    best: dict[str, float]
    paired: dict[tuple[str, str], float]


PAIRS = (("ours", "core"), ("langgraph", "core"), ("ours", "langgraph"))
MEASURED_PAIRS = tuple(pair for pair in PAIRS if set(pair) <= set(SIDES))
SHORT = {"core": "core", "ours": "ours", "langgraph": "lg"}


def _figures(samples: dict[str, list[float]]) -> Figures:
    paired = {
        (top, bottom): statistics.median(a / b for a, b in zip(samples[top], samples[bottom], strict=True))
        for top, bottom in MEASURED_PAIRS
    }
    return Figures({side: min(values) for side, values in samples.items()}, paired)


async def measure(row: Row, *, rounds: int, cycles: int, warmup: int, scratch: Path) -> tuple[Figures, Figures]:
    """Time ``row`` interleaved: return its CPU figures and its wall figures."""
    for _ in range(warmup):
        for side in SIDES:
            await _time_block(row.sides[side], cycles, scratch)
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    wall: dict[str, list[float]] = {side: [] for side in SIDES}
    for index in range(rounds):
        shift = index % len(SIDES)
        for side in SIDES[shift:] + SIDES[:shift]:  # rotate which side goes first
            cpu_us, wall_us = await _time_block(row.sides[side], cycles, scratch)
            cpu[side].append(cpu_us)
            wall[side].append(wall_us)
    return _figures(cpu), _figures(wall)


def _cell(value: float | None, digits: int) -> str:
    return f"{'-':>10}" if value is None else f"{value:>10.{digits}f}"


def _line(label: str, clock: str, figures: Figures) -> str:
    """One row of the table; a side that did not run (LangGraph on Python 3.10) shows ``-``."""
    best = figures.best
    ratios = [best[top] / best[bottom] if (top, bottom) in figures.paired else None for top, bottom in PAIRS]
    paired = [figures.paired.get(pair) for pair in PAIRS]
    cells = "".join(_cell(best.get(side), 1) for side in ("core", "ours", "langgraph"))
    return f"{label:<12}{clock:>6}{cells}" + "".join(_cell(value, 3) for value in (*ratios, *paired))


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


async def main() -> int:
    """Measure every row and print the table (no target: the figures are for reading)."""
    parser = argparse.ArgumentParser(description="One HITL cycle: core vs ours vs LangGraph's functional API.")
    parser.add_argument("--quick", action="store_true", help="short run for smoke tests (numbers are noisy)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per row (default 40, quick 1)")
    parser.add_argument("--cycles", type=int, help="cycles per timed block (default 10, quick 3)")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 40)
    cycles = args.cycles or (3 if args.quick else 10)
    warmup = 1 if args.quick else 2

    print(
        f"agent-framework-core {_version('agent-framework-core')}, agent-framework-functional "
        f"{_version('agent-framework-functional')}, langgraph {_version('langgraph')}, "
        f"langgraph-checkpoint-sqlite {_version('langgraph-checkpoint-sqlite')}, Python {platform.python_version()}"
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    print(
        f"rounds={rounds} cycles/block={cycles} warmup={warmup}; files under {scratch.parent}; "
        "best block in microseconds per cycle (pause + resume)"
    )
    ratio_names = "".join(f"{f'{SHORT[top]}/{SHORT[bottom]}':>10}" for top, bottom in PAIRS)
    print(f"{'':<48}{'ratios of best blocks':>30}{'paired ratios (median)':>30}")
    print(f"{'row':<12}{'clock':>6}{'core us':>10}{'ours us':>10}{'lg us':>10}{ratio_names}{ratio_names}")
    try:
        for row in ROWS:
            cpu, wall = await measure(row, rounds=rounds, cycles=cycles, warmup=warmup, scratch=scratch)
            print(_line(row.name, "cpu", cpu), flush=True)
            if row.disk:
                print(_line(row.name, "wall", wall), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("lg = langgraph; cpu = process CPU time (all threads), wall = perf_counter")
    if not LANGGRAPH_RUNS:
        print(LANGGRAPH_SKIPPED)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
