"""One host worker process of the two-worker tests: the Responses route and AG-UI on shared stores.

Usage: ``python two_workers_app.py <redis|postgres> <url> <tag> <effects file>``. Serves on a free loopback
port and prints it as the first stdout line. Every worker started with the same arguments shares the
continuation store, checkpoint storage and session store of ``tag``: the production set-up of the docs
("Run it in production"). The workflow's side effect (one line per approved publish, outside any step) goes
to the effects file, so the test sees across processes how many times an approval ran.
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import BaseModel

from agent_framework_functional import (
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    PostgresSessionStore,
    RedisCheckpointStorage,
    RedisContinuationStore,
    RedisSessionStore,
    RunContext,
    workflow,
)
from agent_framework_functional.hosting import agui_endpoint, responses_app

warnings.filterwarnings("ignore")
EFFECTS = Path(sys.argv[4]) if len(sys.argv) > 4 else Path("effects.txt")


class Draft(BaseModel):
    """The structured answer: the edited draft."""

    title: str
    approved: bool


@workflow(name="typed_approval", description="Asks one question of the type the input names, then publishes.")
async def typed_approval(text: str, ctx: RunContext) -> str:
    """``bool:<x>`` asks an approval, ``str:<x>`` free text, ``draft:<x>`` a :class:`Draft`; records the publish."""
    kind, _, target = text.partition(":")
    answer: Any
    if kind == "bool":
        answer = await ctx.request_info({"publish": target}, response_type=bool)
        published = answer is True
    elif kind == "str":
        answer = await ctx.request_info({"publish": target}, response_type=str)
        published = True
    else:
        answer = await ctx.request_info({"publish": target}, response_type=Draft)
        published = answer.approved
    if published:
        with EFFECTS.open("a", encoding="utf-8") as effects:
            effects.write(f"{text}\n")
    return f"{text} -> {answer!r}"


def build_app(backend: str, url: str, tag: str) -> Any:
    """The Responses route (``/v1/responses``) and AG-UI (``/agui``) over one agent each, on the shared stores."""
    types = [f"{__name__}:Draft"]
    if backend == "redis":
        store: Any = RedisContinuationStore(url, namespace=f"{tag}:continuations")
        storage: Any = RedisCheckpointStorage(url, namespace=f"{tag}:checkpoints", allowed_checkpoint_types=types)
        sessions: Any = RedisSessionStore(url, namespace=f"{tag}:sessions")
    else:
        store = PostgresContinuationStore(url, schema=tag)
        storage = PostgresCheckpointStorage(url, schema=tag, allowed_checkpoint_types=types)
        sessions = PostgresSessionStore(url, schema=tag)

    def agent() -> Any:
        return typed_approval.build(checkpoint_storage=storage, continuation_store=store).as_agent(name="typed")

    app = responses_app(agent(), session_store=sessions)
    agui_endpoint(app, agent(), "/agui", snapshot_store=sessions, single_user=True)
    return app


async def serve(app: Any) -> None:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()
            return
        await asyncio.sleep(0.02)
    print(server.servers[0].sockets[0].getsockname()[1], flush=True)
    await serving


if __name__ == "__main__":
    asyncio.run(serve(build_app(sys.argv[1], sys.argv[2], sys.argv[3])))
