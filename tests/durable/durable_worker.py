"""A worker process for the durable tests: pause, resume, abandon or restore one workflow pause.

Usage: ``python durable_worker.py <command> <store spec json> <checkpoints> <state file> [barrier dir] [name]``,
where ``<checkpoints>`` is a folder (``FileCheckpointStorage``) or ``redis://host:port/db#namespace``
(``RedisCheckpointStorage``: the workers then share nothing but Redis).
``pause`` runs ``approval`` until it pauses and writes ``{"token", "request_id"}`` to the state file;
``resume`` and ``abandon`` read it, wait at the barrier (``ready-<name>`` then ``go``) so that all
workers race at once, and act. The last stdout line is a JSON outcome.
"""

from __future__ import annotations

from typing import Any

from durable_support import close_store, open_worker_stores, read_json, wait_at_barrier, worker_entry_point, write_json
from durable_workflows import approval

from agent_framework_functional import ContinuationAuthorityError


async def main(argv: list[str]) -> dict[str, Any]:
    command, spec_json, checkpoints, state_file = argv[:4]
    store, checkpoint_storage = open_worker_stores(spec_json, checkpoints)
    wf = approval.build(checkpoint_storage=checkpoint_storage, continuation_store=store)
    try:
        if command == "pause":
            paused = await wf.run("tea")
            request_id = paused.get_request_info_events()[0].request_id
            write_json(state_file, {"token": paused.continuation_token, "request_id": request_id})
            return {"outcome": "paused"}
        state = read_json(state_file)
        if len(argv) > 5:
            wait_at_barrier(argv[4], argv[5])
        if command == "resume":
            try:
                result = await wf.run(responses={state["request_id"]: "approved"}, continuation_token=state["token"])
            except ContinuationAuthorityError as exc:
                return {"outcome": "rejected", "message": str(exc)}
            return {"outcome": "resumed", "outputs": [str(o) for o in result.get_outputs()]}
        if command == "abandon":
            try:
                await wf.abandon_continuation_async(state["token"])
            except ContinuationAuthorityError as exc:
                return {"outcome": "rejected", "message": str(exc)}
            return {"outcome": "abandoned"}
        raise SystemExit(f"unknown command {command!r}")
    finally:
        await close_store(store)
        await close_store(checkpoint_storage)


if __name__ == "__main__":
    worker_entry_point(main)
