"""Two worker processes share one approval: worker one pauses, worker two resumes, a replay is refused.

What it shows:

* A durable continuation: both workers build the same workflow with the same
  ``SQLiteContinuationStore`` (one file) and the same ``FileCheckpointStorage`` (one folder), here
  in a temporary folder. Worker one runs until the workflow asks for approval and hands out the
  continuation token; worker two, which never saw the pause, resumes it with that token.
* Exactly once: worker one then replays the same token from its own memory and gets
  ``ContinuationAuthorityError``; the approved step ran once, in worker two.

How to run (no API key, no services; deterministic)::

    python samples/multi_worker_approval.py

The token travels over the workers' stdin/stdout pipes, as it would travel through your web app
or queue; never log it or put it on a command line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import warnings
from pathlib import Path

from agent_framework import FileCheckpointStorage

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflow,
    RunContext,
    SQLiteContinuationStore,
    step,
    workflow,
)

# Core says once per process that its functional API is experimental; each worker would repeat it.
warnings.filterwarnings("ignore", message=r"\[FUNCTIONAL_WORKFLOWS\]")


@step
async def draft_refund(order: str) -> str:
    """Plan the refund (a step: cached, so a resume does not plan again)."""
    return f"refund 40 EUR for order {order}"


@step
async def pay_refund(plan: str) -> str:
    """Pay the refund: the side effect that must happen at most once."""
    return f"paid: {plan}"


@workflow(name="refund_approval")
async def refund_approval(order: str, ctx: RunContext) -> str:
    """Plan a refund, ask a human to approve it, pay it if approved."""
    plan = await draft_refund(order)
    decision = await ctx.request_info({"plan": plan, "question": "Approve this refund?"}, response_type=str)
    if decision != "approve":
        return f"not paid: {plan}"
    return await pay_refund(plan)  # a step: it runs once, in whichever worker claimed the token


def build_worker(folder: Path, store: SQLiteContinuationStore) -> FunctionalWorkflow:
    """What every worker process does at start-up: same workflow, same store, same checkpoints."""
    return refund_approval.build(
        checkpoint_storage=FileCheckpointStorage(folder / "checkpoints"), continuation_store=store
    )


async def worker_one(folder: Path) -> None:
    """Pause, hand out the token, then (after worker two) try to replay it from memory."""
    async with SQLiteContinuationStore(folder / "continuations.db") as store:  # closed when the worker ends
        wf = build_worker(folder, store)
        paused = await wf.run("A-1001")
        request = paused.get_request_info_events()[0]
        handoff = {"token": paused.continuation_token, "request_id": request.request_id}
        print(json.dumps(handoff), flush=True)  # first line: the handoff, read by main()
        print(f"worker one: paused for approval of {request.data['plan']!r}; token handed out", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # wait until worker two is done
        try:
            await wf.run(responses={request.request_id: "approve"}, continuation_token=paused.continuation_token)
            print("worker one: replay ran (this must not happen)")
        except ContinuationAuthorityError:
            print("worker one: replay of the same token rejected: ContinuationAuthorityError")


async def worker_two(folder: Path) -> None:
    """Resume the pause with the token handed over by worker one."""
    handoff = json.loads(await asyncio.to_thread(sys.stdin.readline))
    async with SQLiteContinuationStore(folder / "continuations.db") as store:
        wf = build_worker(folder, store)
        done = await wf.run(responses={handoff["request_id"]: "approve"}, continuation_token=handoff["token"])
    print(f"worker two: resumed a pause it never saw -> {done.get_outputs()[0]}")


async def _spawn(role: str, folder: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, __file__, role, folder, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )


async def main() -> None:
    """Run worker one and worker two as separate processes on a shared temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        one = await _spawn("worker-one", folder)
        assert one.stdout is not None
        handoff = await one.stdout.readline()  # the token, as a web app would hand it to the approver

        two = await _spawn("worker-two", folder)
        two_out, _ = await two.communicate(handoff)
        one_out, _ = await one.communicate(b"replay\n")
        one_lines = one_out.decode().splitlines()
        for line in [*one_lines[:1], *two_out.decode().splitlines(), *one_lines[1:]]:
            print(line)
        if one.returncode != 0 or two.returncode != 0:
            raise SystemExit(f"a worker failed (worker one: {one.returncode}, worker two: {two.returncode})")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        role, shared = sys.argv[1], Path(sys.argv[2])
        asyncio.run(worker_one(shared) if role == "worker-one" else worker_two(shared))
    else:
        asyncio.run(main())
