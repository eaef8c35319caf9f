"""A worker process for the durable tests: pause, resume, abandon or restore one workflow pause.

Usage: ``python durable_worker.py <command> <store spec json> <checkpoints> <state file> [barrier dir] [name]``,
where ``<checkpoints>`` is a folder (``FileCheckpointStorage``) or ``redis://host:port/db#namespace``
(``RedisCheckpointStorage``: the workers then share nothing but Redis).
``pause`` runs ``approval`` until it pauses and writes ``{"token", "request_id"}`` to the state file;
``resume`` and ``abandon`` read it, wait at the barrier (``ready-<name>`` then ``go``) so that all
workers race at once, and act. The last stdout line is a JSON outcome.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from durable_support import StoreSpec, close_store, open_checkpoint_storage
from durable_workflows import approval

from agent_framework_functional import ContinuationAuthorityError


def _write_json(path: str, data: Any) -> None:
    Path(path).write_text(json.dumps(data), encoding="utf-8")


def _read_json(path: str) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _barrier(directory: str, name: str) -> None:
    barrier = Path(directory)
    (barrier / f"ready-{name}").write_text("ready", encoding="utf-8")
    while not (barrier / "go").exists():
        time.sleep(0.001)


async def main(argv: list[str]) -> dict[str, Any]:
    command, spec_json, checkpoints, state_file = argv[:4]
    store = StoreSpec.from_json(spec_json).open()
    checkpoint_storage = open_checkpoint_storage(checkpoints)
    wf = approval.build(checkpoint_storage=checkpoint_storage, continuation_store=store)
    try:
        if command == "pause":
            paused = await wf.run("tea")
            request_id = paused.get_request_info_events()[0].request_id
            _write_json(state_file, {"token": paused.continuation_token, "request_id": request_id})
            return {"outcome": "paused"}
        state = _read_json(state_file)
        if len(argv) > 5:
            _barrier(argv[4], argv[5])
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
    print(json.dumps(asyncio.run(main(sys.argv[1:]))), flush=True)
