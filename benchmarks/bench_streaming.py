"""Live streaming: time to first update against core, and the per-update cost of the live path.

Part 1, time to first update. One workflow function calls ``stream_agent(...)`` on an inner agent
that yields 50 chunks 20 ms apart (a core ``BaseAgent`` subclass with no network). It is wrapped
twice in the same process and run through each side's chat agent with ``run(..., stream=True)``:

* core: ``agent_framework.workflow(...)`` and core's ``FunctionalWorkflowAgent``. Core collects the
  workflow's events until the function returns, so its first update comes at the end.
* ours: ``agent_framework_functional.workflow(...)`` and our ``FunctionalWorkflowAgent``.

Printed per side: median time to the first update and to the end of the stream (ms), and
first/total. Target: ours gives the first update within 5% of the total time.

Part 2, per-update overhead of the live path. A no-delay emitter sends 100,000 updates; the same
loop calling an empty coroutine instead of ``emit_update`` is the baseline. Both run through our
workflow stream (and, in a second row, our agent stream) and are fully consumed. Overhead per
update = (emitter - baseline) / updates, median of interleaved rounds. Target: below 20 us on the
workflow stream (the live path itself). The agent rows add the adapter's conversion: for text, core's
``Content`` and ``AgentResponseUpdate`` construction, a second ``ResponseStream`` layer and core's
``AgentResponse.from_updates`` at the end; "updates" sends ready ``AgentResponseUpdate`` objects, as
``stream_agent`` does. For reference, a row shows core's ``ctx.add_event`` path (buffered until the end).

Run it:

.. code-block:: bash

    python benchmarks/bench_streaming.py            # about half a minute on 2 cores
    python benchmarks/bench_streaming.py --quick    # a few seconds, for smoke tests (numbers are noisy)
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
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any

import agent_framework
from agent_framework import AgentResponse, AgentResponseUpdate, BaseAgent, Content, ResponseStream, WorkflowEvent

import agent_framework_functional
from agent_framework_functional import emit_update, stream_agent

# Core says once per use that its functional API is experimental; that is noise in a benchmark.
warnings.filterwarnings("ignore", message=r"\[FUNCTIONAL_WORKFLOWS\]")

FIRST_UPDATE_TARGET = 0.05  # first update within 5% of the total time
OVERHEAD_TARGET_US = 20.0


class ChunkingAgent(BaseAgent):
    """Inner agent: ``chunks`` text chunks, ``delay`` seconds apart (core's agent protocol)."""

    def __init__(self) -> None:
        super().__init__(name="inner", description="yields fixed chunks")
        self.chunks = 50
        self.delay = 0.020

    def run(self, messages: Any = None, *, stream: bool = False, session: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        """Stream the chunks (``stream=True`` only)."""
        if not stream:
            raise NotImplementedError("the benchmark only streams")
        return ResponseStream(self._updates(), finalizer=AgentResponse.from_updates)

    async def _updates(self) -> AsyncIterable[AgentResponseUpdate]:
        for index in range(self.chunks):
            await asyncio.sleep(self.delay)
            yield AgentResponseUpdate(contents=[Content.from_text(text=f"chunk{index} ")], role="assistant")


INNER = ChunkingAgent()
UPDATES = {"count": 100_000}


async def chat(question: str) -> str:
    response = await stream_agent(INNER, question)
    return response.text


async def emitter(count: int) -> int:
    for _ in range(count):
        await emit_update("x")
    return count


FORWARDED = AgentResponseUpdate(contents=[Content.from_text(text="x")], role="assistant")


async def update_emitter(count: int) -> int:
    for _ in range(count):
        await emit_update(FORWARDED)  # what stream_agent forwards: updates an inner agent already built
    return count


async def _nothing(update: str) -> None:
    return None


async def baseline(count: int) -> int:
    for _ in range(count):
        await _nothing("x")
    return count


async def core_add_event(count: int, ctx: agent_framework.RunContext) -> int:
    for _ in range(count):
        await ctx.add_event(WorkflowEvent("intermediate", data="x"))
    return count


core_chat = agent_framework.workflow(name="chat")(chat)
our_chat = agent_framework_functional.workflow(name="chat")(chat)
our_emitter = agent_framework_functional.workflow(name="emitter")(emitter)
our_update_emitter = agent_framework_functional.workflow(name="update_emitter")(update_emitter)
our_baseline = agent_framework_functional.workflow(name="baseline")(baseline)
core_emitter = agent_framework.workflow(name="core_add_event")(core_add_event)


async def first_and_total(agent: Any) -> tuple[float, float]:
    """Seconds to the first update and to the end of one streaming agent run."""
    start = time.perf_counter()
    first: float | None = None
    async for _ in agent.run("go", stream=True):
        if first is None:
            first = time.perf_counter() - start
    total = time.perf_counter() - start
    return (first if first is not None else total), total


async def part_one(reps: int) -> bool:
    core_agent = core_chat.build().as_agent(name="core")
    our_agent = our_chat.build().as_agent(name="ours")
    results: dict[str, list[tuple[float, float]]] = {"core": [], "ours": []}
    for index in range(reps):
        order = [("core", core_agent), ("ours", our_agent)]
        for name, agent in order if index % 2 == 0 else reversed(order):
            results[name].append(await first_and_total(agent))
    print(
        f"Part 1: inner agent yields {INNER.chunks} chunks {INNER.delay * 1000:.0f} ms apart; "
        f"{reps} runs per side, medians"
    )
    print(f"{'side':<6} {'first ms':>10} {'total ms':>10} {'first/total':>12}")
    ok = True
    for name, samples in results.items():
        first = statistics.median(s[0] for s in samples)
        total = statistics.median(s[1] for s in samples)
        print(f"{name:<6} {first * 1000:>10.1f} {total * 1000:>10.1f} {first / total:>12.3f}")
        if name == "ours":
            ok = first / total <= FIRST_UPDATE_TARGET
    print(f"target: ours first/total <= {FIRST_UPDATE_TARGET}: {'met' if ok else 'MISSED'}")
    return ok


async def _drain_workflow(definition: Any, count: int) -> float:
    wf = definition.build()
    gc.collect()
    start = time.perf_counter()
    async for _ in wf.run(count, stream=True):
        pass
    return time.perf_counter() - start


async def _drain_agent(definition: Any, count: int) -> float:
    agent = definition.build().as_agent()
    gc.collect()
    start = time.perf_counter()
    async for _ in agent.run(count, stream=True):
        pass
    return time.perf_counter() - start


async def part_two(rounds: int, count: int) -> bool:
    rows: dict[str, list[float]] = {
        "workflow stream": [],
        "agent stream, text": [],
        "agent stream, updates": [],
        "core add_event (buffered)": [],
    }
    for index in range(rounds):
        pairs: list[tuple[str, Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]]] = [
            (
                "workflow stream",
                lambda: _drain_workflow(our_emitter, count),
                lambda: _drain_workflow(our_baseline, count),
            ),
            ("agent stream, text", lambda: _drain_agent(our_emitter, count), lambda: _drain_agent(our_baseline, count)),
            (
                "agent stream, updates",
                lambda: _drain_agent(our_update_emitter, count),
                lambda: _drain_agent(our_baseline, count),
            ),
            (
                "core add_event (buffered)",
                lambda: _drain_workflow(core_emitter, count),
                lambda: _drain_workflow(our_baseline, count),
            ),
        ]
        for name, measured, base in pairs:
            if index % 2 == 0:
                live_s, base_s = await measured(), await base()
            else:
                base_s = await base()
                live_s = await measured()
            rows[name].append((live_s - base_s) / count * 1e6)
    print(f"Part 2: {count:,} updates from a no-delay emitter, minus an empty-coroutine baseline; {rounds} rounds")
    print(f"{'path':<28} {'us/update':>10}")
    ok = True
    for name, samples in rows.items():
        overhead = statistics.median(samples)
        print(f"{name:<28} {overhead:>10.2f}")
        if name == "workflow stream":
            ok = overhead < OVERHEAD_TARGET_US
    print(f"target: workflow stream < {OVERHEAD_TARGET_US:.0f} us/update: {'met' if ok else 'MISSED'}")
    return ok


async def main() -> int:
    """Run both parts and print them; exit 1 when a target is missed (full runs only)."""
    parser = argparse.ArgumentParser(description="Live streaming: first update vs core, per-update overhead.")
    parser.add_argument("--quick", action="store_true", help="short run for smoke tests (numbers are noisy)")
    args = parser.parse_args()
    reps = 1 if args.quick else 5
    rounds = 1 if args.quick else 5
    if args.quick:
        INNER.chunks, INNER.delay = 10, 0.002
        UPDATES["count"] = 2_000
    print(
        f"agent-framework-core {agent_framework.__version__}, agent-framework-functional "
        f"{agent_framework_functional.__version__}, Python {platform.python_version()}"
        + (" (quick: numbers are noisy)" if args.quick else "")
    )
    first_ok = await part_one(reps)
    overhead_ok = await part_two(rounds, UPDATES["count"])
    if first_ok and overhead_ok:
        print("all targets met")
        return 0
    return 0 if args.quick else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
