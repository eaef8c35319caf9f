"""One agent, many conversations: N interleaved conversations paused and resumed on ONE agent object.

Hosts (DevUI, AG-UI, Responses hosting) keep one agent for every conversation. This starts N
conversations on one ``FunctionalWorkflowAgent`` (each with its own ``AgentSession``), pauses all of
them, answers them in a shuffled order, checks that every conversation got its own answer (no
cross-talk) and that each side effect ran once, and measures with ``tracemalloc``:

* memory per paused conversation (everything allocated while N conversations wait);
* memory left once all of them finished, against the baseline before the first one started, apart
  from the spent-token notes: the process remembers each spent token (a 16-byte digest, ~0.2 KB with
  its entry) for one pause TTL, at most ``SPENT_MEMORY``, so that an older copy of a conversation that
  presents it again gets ``StaleContinuationError``; those are counted and shown on their own line.

Run:

    python benchmarks/bench_conversations.py            # 1,000 conversations
    python benchmarks/bench_conversations.py --quick    # 50 conversations, a smoke test

Exits 1 when a conversation got another's answer, or memory other than the spent-token notes did not come
back to within 64 KB of the baseline; the timing figures are for people, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time
import tracemalloc

from agent_framework import Message, RunContext

from agent_framework_functional import _continuation, step, workflow
from agent_framework_functional._continuation import SPENT_MEMORY
from agent_framework_functional._session import attached_instances

EFFECTS: list[str] = []


@step
async def deploy(target: str) -> str:
    EFFECTS.append(target)
    return f"deployed {target}"


@workflow(name="bench_deployer")
async def deployer(target: str, ctx: RunContext) -> str:
    approved = await ctx.request_info({"target": target}, response_type=bool)
    return await deploy(target) if approved else f"skipped {target}"


async def run(count: int) -> int:
    agent = deployer.build().as_agent()
    # Warm up once so imports and caches are not counted.
    warm = agent.create_session()
    paused = await agent.run("warm", session=warm)
    await agent.run(Message("user", [paused.user_input_requests[0].to_function_approval_response(True)]), session=warm)
    del warm, paused
    EFFECTS.clear()
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]

    started = time.perf_counter()
    sessions = [agent.create_session() for _ in range(count)]
    pauses = [await agent.run(f"app{i}", session=session) for i, session in enumerate(sessions)]
    pause_seconds = time.perf_counter() - started
    gc.collect()
    paused_bytes = tracemalloc.get_traced_memory()[0] - baseline
    waiting = attached_instances(agent.workflow)

    order = list(range(count))
    random.Random(7).shuffle(order)
    started = time.perf_counter()
    wrong = 0
    for i in order:
        answer = Message("user", [pauses[i].user_input_requests[0].to_function_approval_response(i % 3 != 0)])
        done = await agent.run(answer, session=sessions[i])
        expected = f"skipped app{i}" if i % 3 == 0 else f"deployed app{i}"
        wrong += done.text != expected
    resume_seconds = time.perf_counter() - started

    effects_ok = sorted(EFFECTS) == sorted(f"app{i}" for i in range(count) if i % 3 != 0)
    del pauses, sessions, answer, done
    EFFECTS.clear()  # the benchmark's own record of side effects is not the package's memory
    gc.collect()
    left_bytes = tracemalloc.get_traced_memory()[0] - baseline
    notes = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, _continuation.__file__)])
    notes_bytes = sum(stat.size for stat in notes.statistics("filename"))
    tracemalloc.stop()

    print(f"conversations on one agent: {count}")
    print(f"paused (under tracemalloc): {count / pause_seconds:.0f} pauses/s; attached instances waiting: {waiting}")
    print(f"resumed in shuffled order (under tracemalloc): {count / resume_seconds:.0f} resumes/s")
    print(f"memory per paused conversation: {paused_bytes / count / 1024:.1f} KB")
    print(f"memory left after all finished: {left_bytes / 1024:.1f} KB over the baseline")
    print(f"  of which spent-token notes (kept one TTL, at most {SPENT_MEMORY:,}): {notes_bytes / 1024:.1f} KB")
    print(f"attached instances after: {attached_instances(agent.workflow)}")
    print(f"cross-talk (wrong answers): {wrong}; each side effect once: {effects_ok}")
    ok = wrong == 0 and effects_ok and left_bytes - notes_bytes < 64 * 1024 and attached_instances(agent.workflow) == 0
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="50 conversations (smoke test)")
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    return asyncio.run(run(50 if args.quick else args.count))


if __name__ == "__main__":
    sys.exit(main())
