"""A worker process for the crash tests: race other workers to resume many pauses, each at most once.

Usage: ``python durable_many_worker.py <store spec json> <checkpoints> <state file> <barrier dir> <name>
<concurrency>``. The state file holds ``{"pauses": [{"token", "request_id"}, ...]}``; the worker waits at
the barrier, then tries to resume every pause once (answer ``ok-<index>``), in its own random order,
``concurrency`` at a time, each on a fresh workflow instance over one store and one checkpoint storage.
The last stdout line is ``{"resumed": [...], "rejected": [...], "errors": {index: "Type: message"}}``.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from durable_support import close_store, open_worker_stores, read_json, wait_at_barrier, worker_entry_point
from durable_workflows import approval

from agent_framework_functional import ContinuationAuthorityError


async def main(argv: list[str]) -> dict[str, Any]:
    spec_json, checkpoints, state_file, barrier, name, concurrency = argv[:6]
    store, storage = open_worker_stores(spec_json, checkpoints)
    pauses = read_json(state_file)["pauses"]
    order = list(range(len(pauses)))
    random.shuffle(order)
    gate = asyncio.Semaphore(int(concurrency))
    resumed: list[int] = []
    rejected: list[int] = []
    errors: dict[int, str] = {}

    async def resume(index: int) -> None:
        pause = pauses[index]
        async with gate:
            wf = approval.build(checkpoint_storage=storage, continuation_store=store)
            try:
                await wf.run(responses={pause["request_id"]: f"ok-{index}"}, continuation_token=pause["token"])
            except ContinuationAuthorityError:
                rejected.append(index)
            except Exception as exc:
                errors[index] = f"{type(exc).__name__}: {exc}"
            else:
                resumed.append(index)

    try:
        wait_at_barrier(barrier, name)
        await asyncio.gather(*(resume(index) for index in order))
    finally:
        await close_store(store)
        await close_store(storage)
    return {"resumed": resumed, "rejected": rejected, "errors": errors}


if __name__ == "__main__":
    worker_entry_point(main)
