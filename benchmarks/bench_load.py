"""Load benchmark: pause+resume cycles per second and memory per paused continuation, ours beside core's.

Each of N concurrent workflow instances (N = 1, 100, 1,000) runs a workflow that pauses on
``request_info`` once per round; every resume answers all rounds so far (core replays from the
top). Ours resumes with ``run(responses=..., continuation_token=...)``; core's
``agent_framework.FunctionalWorkflow`` with ``run(responses=...)``. The same workflow function is
wrapped by both. Memory is measured with ``tracemalloc``: bytes still allocated per instance that
is built and paused once, in KB.

Run:
    python benchmarks/bench_load.py           # full: 10 rounds, 1 / 100 / 1,000 instances
    python benchmarks/bench_load.py --quick   # smoke run: 3 rounds, 1 / 10 / 100 instances
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import agent_framework
from agent_framework import RunContext

import agent_framework_functional

warnings.filterwarnings("ignore", category=agent_framework._feature_stage.ExperimentalWarning)  # pyright: ignore


async def rounds_flow(spec: dict[str, Any], ctx: RunContext) -> int:
    """Pause once per round; return the sum of the answers."""
    total = 0
    for round_ in range(spec["rounds"]):
        total += await ctx.request_info({"id": spec["id"], "round": round_}, response_type=int)
    return total


OURS = agent_framework_functional.workflow(rounds_flow)
CORE = agent_framework.workflow(rounds_flow)


async def drive_ours(index: int, rounds: int) -> int:
    wf = OURS.build()
    result = await wf.run({"id": index, "rounds": rounds})
    answers: dict[str, int] = {}
    for round_ in range(rounds):
        answers[f"auto::{round_}"] = index + round_
        result = await wf.run(responses=dict(answers), continuation_token=result.continuation_token)
    return result.get_outputs()[0]


async def drive_core(index: int, rounds: int) -> int:
    wf = CORE.build()
    result = await wf.run({"id": index, "rounds": rounds})
    answers: dict[str, int] = {}
    for round_ in range(rounds):
        answers[f"auto::{round_}"] = index + round_
        result = await wf.run(responses=dict(answers))
    return result.get_outputs()[0]


async def cycles_per_second(drive: Callable[[int, int], Awaitable[int]], instances: int, rounds: int) -> float:
    start = time.perf_counter()
    totals = await asyncio.gather(*(drive(i, rounds) for i in range(instances)))
    elapsed = time.perf_counter() - start
    expected = [rounds * i + rounds * (rounds - 1) // 2 for i in range(instances)]
    if totals != expected:
        raise AssertionError("wrong output under load")
    return instances * rounds / elapsed


async def kb_per_paused(build_and_pause: Callable[[int], Awaitable[Any]], instances: int) -> float:
    await build_and_pause(-1)  # warm caches and lazy imports
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [await build_and_pause(i) for i in range(instances)]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return (after - before) / instances / 1024


async def pause_ours(index: int) -> Any:
    wf = OURS.build()
    result = await wf.run({"id": index, "rounds": 1})
    return wf, result.continuation_token


async def pause_core(index: int) -> Any:
    wf = CORE.build()
    await wf.run({"id": index, "rounds": 1})
    return wf


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small smoke run (used by the test suite)")
    args = parser.parse_args()
    sizes = (1, 10, 100) if args.quick else (1, 100, 1000)
    rounds = 3 if args.quick else 10
    memory_instances = 100 if args.quick else 1000

    await drive_ours(0, 2)  # warm-up
    await drive_core(0, 2)
    print(f"pause+resume cycles per second ({rounds} cycles per instance, all instances concurrent)")
    print(f"{'instances':>10} {'ours':>12} {'core':>12} {'ours/core':>10}")
    for size in sizes:
        ours = await cycles_per_second(drive_ours, size, rounds)
        core = await cycles_per_second(drive_core, size, rounds)
        print(f"{size:>10} {ours:>12.0f} {core:>12.0f} {ours / core:>10.2f}")
    ours_kb = await kb_per_paused(pause_ours, memory_instances)
    core_kb = await kb_per_paused(pause_core, memory_instances)
    print(f"memory per paused continuation (instance built + paused once, {memory_instances} instances)")
    print(f"{'ours KB':>10} {'core KB':>12} {'ours/core':>10}")
    print(f"{ours_kb:>10.1f} {core_kb:>12.1f} {ours_kb / core_kb:>10.2f}")


if __name__ == "__main__":
    asyncio.run(main())
