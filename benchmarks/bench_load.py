"""Load benchmark: pause+resume cycles per second and memory per paused continuation, ours beside core's.

Each of N concurrent workflow instances (N = 1, 100, 1,000) runs a workflow that pauses on
``request_info`` once per round; every resume answers all rounds so far (core replays from the
top). Ours resumes with ``run(responses=..., continuation_token=...)``; core's
``agent_framework.FunctionalWorkflow`` with ``run(responses=...)``. The same workflow function is
wrapped by both. Memory is measured with ``tracemalloc``: bytes still allocated per instance that
is built and paused once, in KB, in two rows that differ in what the host keeps beside the instance:

* ``instance``: ours the instance and its token, core the instance alone (this benchmark knows
  core's request ids, ``auto::N``, so its core host needs nothing else);
* ``host view``: each side keeps what a host needs to show the reviewer the request and answer it
  later: ours the instance and its token (the requests are on ``pending_requests``), core the
  instance and the paused result's ``request_info`` events (core keeps only their ids).

The objects a host keeps go into one flat list, so neither side pays for a container of its own.

The machine is small and shared, so throughput is measured the way ``bench_continuation.py``
measures cost: CPU time of the process (``time.process_time``; everything runs on one thread, so
it is the work done), each size repeated ``--repeats`` times with ours and core interleaved
(alternating which goes first). ``ours`` / ``core`` are each side's best repeat; ``ours/core`` is
the median over repeats of the ratio of the two adjacent measurements (paired), which cancels slow
drifts in machine speed.

Run:
    python benchmarks/bench_load.py           # full: 10 rounds, 1 / 100 / 1,000 instances, 5 repeats
    python benchmarks/bench_load.py --quick   # smoke run: 3 rounds, 1 / 10 / 100 instances, 1 repeat
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
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
    gc.collect()
    start = time.process_time()
    totals = await asyncio.gather(*(drive(i, rounds) for i in range(instances)))
    elapsed = time.process_time() - start
    expected = [rounds * i + rounds * (rounds - 1) // 2 for i in range(instances)]
    if totals != expected:
        raise AssertionError("wrong output under load")
    return instances * rounds / elapsed


async def kb_per_paused(build_and_pause: Callable[[int], Awaitable[tuple[Any, ...]]], instances: int) -> float:
    """KB still allocated per instance built and paused once, with what the host keeps of each."""
    await build_and_pause(-1)  # warm caches and lazy imports
    gc.collect()
    kept: list[Any] = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(instances):
            kept.extend(await build_and_pause(i))
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return (after - before) / instances / 1024


async def pause_ours(index: int) -> tuple[Any, ...]:
    wf = OURS.build()
    result = await wf.run({"id": index, "rounds": 1})
    return wf, result.continuation_token


async def pause_core(index: int) -> tuple[Any, ...]:
    wf = CORE.build()
    await wf.run({"id": index, "rounds": 1})
    return (wf,)


async def pause_core_host_view(index: int) -> tuple[Any, ...]:
    wf = CORE.build()
    result = await wf.run({"id": index, "rounds": 1})
    return wf, result.get_request_info_events()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small smoke run (used by the test suite)")
    parser.add_argument("--repeats", type=int, help="interleaved repeats per size (default 5, quick 1)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 5)
    sizes = (1, 10, 100) if args.quick else (1, 100, 1000)
    rounds = 3 if args.quick else 10
    memory_instances = 100 if args.quick else 1000

    await drive_ours(0, 2)  # warm-up
    await drive_core(0, 2)
    print(
        f"pause+resume cycles per CPU second ({rounds} cycles per instance, all instances concurrent; "
        f"best of {repeats}, ours/core = median paired ratio)"
    )
    print(f"{'instances':>10} {'ours':>12} {'core':>12} {'ours/core':>10}")
    for size in sizes:
        ours_rates: list[float] = []
        core_rates: list[float] = []
        for index in range(repeats):
            sides = ((drive_ours, ours_rates), (drive_core, core_rates))
            for drive, sink in sides if index % 2 == 0 else reversed(sides):
                sink.append(await cycles_per_second(drive, size, rounds))
        paired = statistics.median(o / c for o, c in zip(ours_rates, core_rates, strict=True))
        print(f"{size:>10} {max(ours_rates):>12.0f} {max(core_rates):>12.0f} {paired:>10.2f}")
    ours_kb = await kb_per_paused(pause_ours, memory_instances)
    core_kb = await kb_per_paused(pause_core, memory_instances)
    core_view_kb = await kb_per_paused(pause_core_host_view, memory_instances)
    print(f"memory per paused continuation (instance built + paused once, {memory_instances} instances)")
    print(f"{'kept':>10} {'ours KB':>10} {'core KB':>10} {'ours/core':>10}")
    print(f"{'instance':>10} {ours_kb:>10.2f} {core_kb:>10.2f} {ours_kb / core_kb:>10.2f}")
    print(f"{'host view':>10} {ours_kb:>10.2f} {core_view_kb:>10.2f} {ours_kb / core_view_kb:>10.2f}")


if __name__ == "__main__":
    asyncio.run(main())
