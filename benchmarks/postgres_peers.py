"""Our Postgres pair beside LangGraph's ``AsyncPostgresSaver``: the HITL cycle on the same and on another worker.

Used by ``bench_durable.py`` (its last tables). Each timed block gets a fresh PostgreSQL schema on the
same server for both sides: ours (``PostgresContinuationStore`` + ``PostgresCheckpointStorage``) and
LangGraph's functional API with ``AsyncPostgresSaver`` (``langgraph-checkpoint-postgres``, in the
``bench`` extra). ``same worker``: one instance (ours) or one compiled graph (LangGraph) pauses and
resumes; ``other worker``: a second instance or graph with its own connections resumes. Blocks of
the four makers are interleaved (the order rotates every round); the ratio is the median of the
paired block ratios ``ours/lg`` per clock (below 1: ours is faster).
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agent_framework_functional import PostgresCheckpointStorage, PostgresContinuationStore

ROOT = Path(__file__).resolve().parent.parent


def start_postgres() -> Any:
    """Start a throwaway PostgreSQL cluster the way the tests do (``tests/postgres_server.py``)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from postgres_server import PostgresServer, missing_postgres_advice

    advice = missing_postgres_advice()
    if advice is not None:
        raise SystemExit(f"{advice} Or pass --postgres-url.")
    return PostgresServer().start()


def _new_schema(url: str) -> str:
    import psycopg

    schema = f"b_{uuid.uuid4().hex}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema


def _in_schema(url: str, schema: str) -> str:
    """``url`` with its search path set to ``schema`` (LangGraph's tables have no schema option)."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema}"


def makers(url: str) -> dict[str, Callable[[Path], Awaitable[Any]]]:
    """Block makers for ``bench_peers._time_block``: ours and LangGraph's, same and other worker."""
    ours, theirs = _our_makers(url), _langgraph_makers(url)
    return {"ours same": ours[0], "lg same": theirs[0], "ours other": ours[1], "lg other": theirs[1]}


def _our_makers(url: str) -> tuple[Callable[[Path], Awaitable[Any]], Callable[[Path], Awaitable[Any]]]:
    """Ours: one worker pauses and resumes, or one pauses and another resumes."""
    import bench_peers as bp

    async def ours_pair(schema: str) -> tuple[PostgresContinuationStore, PostgresCheckpointStorage]:
        store, storage = PostgresContinuationStore(url, schema=schema), PostgresCheckpointStorage(url, schema=schema)
        await store.setup()  # the tables, outside the timing (IF NOT EXISTS: the second pair adds nothing)
        await storage.setup()
        return store, storage

    async def ours_same(_: Path) -> Any:
        store, storage = await ours_pair(_new_schema(url))
        wf = bp.our_review.build(checkpoint_storage=storage, continuation_store=store)

        async def close() -> None:
            await store.aclose()
            await storage.aclose()

        return bp.Block(bp._our_cycle(wf), close)

    async def ours_other(_: Path) -> Any:
        schema = _new_schema(url)
        (store_one, storage_one), (store_two, storage_two) = await ours_pair(schema), await ours_pair(schema)

        async def cycle() -> None:
            pausing = bp.our_review.build(checkpoint_storage=storage_one, continuation_store=store_one)
            paused = await pausing.run(bp.TOPIC)
            request_id = paused.get_request_info_events()[0].request_id
            wf = bp.our_review.build(checkpoint_storage=storage_two, continuation_store=store_two)
            done = await wf.run(responses={request_id: bp.ANSWER}, continuation_token=paused.continuation_token)
            assert done.get_outputs() == [bp.EXPECTED] and done.continuation_token is None

        async def close() -> None:
            for closable in (store_one, storage_one, store_two, storage_two):
                await closable.aclose()

        return bp.Block(cycle, close)

    return ours_same, ours_other


def _langgraph_makers(url: str) -> tuple[Callable[[Path], Awaitable[Any]], Callable[[Path], Awaitable[Any]]]:
    """LangGraph's ``AsyncPostgresSaver``: the same two shapes."""
    import bench_peers as bp
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async def lg_saver(stack: contextlib.AsyncExitStack, schema: str) -> Any:
        saver = await stack.enter_async_context(AsyncPostgresSaver.from_conn_string(_in_schema(url, schema)))
        await saver.setup()
        return saver

    async def lg_same(_: Path) -> Any:
        stack = contextlib.AsyncExitStack()
        graph = bp.lg_graph(await lg_saver(stack, _new_schema(url)))
        return bp.Block(bp._lg_cycle(graph, graph), stack.aclose)

    async def lg_other(_: Path) -> Any:
        stack = contextlib.AsyncExitStack()
        schema = _new_schema(url)
        pausing, resuming = bp.lg_graph(await lg_saver(stack, schema)), bp.lg_graph(await lg_saver(stack, schema))
        return bp.Block(bp._lg_cycle(pausing, resuming), stack.aclose)

    return lg_same, lg_other


async def beside_langgraph_postgres(url: str, *, rounds: int, cycles: int, warmup: int, scratch: Path) -> None:
    """Print ours against ``AsyncPostgresSaver`` on one server, same and other worker, CPU and wall.

    Two tables. **Long-lived workers**: each side's stores, savers and pools are made once and warmed up
    (``LONG_LIVED_WARMUP`` cycles), then every round times ``cycles`` more on them, as a worker that has been
    serving for a while runs them. **Fresh resources**: every timed block makes new ones (new pools, so new
    server connections, whose first statements also pay for parsing and for compiling PL/pgSQL), its
    first cycle untimed; this is the cost right after a worker starts.
    """
    import bench_peers as bp

    blocks = makers(url)
    names = list(blocks)
    live = {name: await blocks[name](scratch) for name in names}
    try:
        for name in names:
            await _timed(live[name], LONG_LIVED_WARMUP if warmup else 1)  # --quick: no warm-up blocks
        kept = await _rounds(names, rounds, lambda name: _timed(live[name], cycles))
    finally:
        for block in live.values():
            await block.close()
    for _ in range(warmup):
        for name in names:
            await bp._time_block(blocks[name], cycles, scratch)
    fresh = await _rounds(names, rounds, lambda name: bp._time_block(blocks[name], cycles, scratch))
    for title, samples in (("long-lived workers", kept), ("fresh resources per block", fresh)):
        print()
        print(
            f"{f'beside LangGraph on PostgreSQL, {title}, {rounds} rounds':<58}{'ours us':>10}{'lg us':>10}"
            f"{'ours/lg':>9}   (AsyncPostgresSaver; medians, paired ratios)"
        )
        for worker in ("same", "other"):
            for position, clock in enumerate(("cpu", "wall")):
                ours = [sample[position] for sample in samples[f"ours {worker}"]]
                lg = [sample[position] for sample in samples[f"lg {worker}"]]
                paired = statistics.median(a / b for a, b in zip(ours, lg, strict=True))
                label = f"Postgres {worker} worker, {clock}"
                print(f"{label:<58}{statistics.median(ours):>10.1f}{statistics.median(lg):>10.1f}{paired:>9.3f}")


LONG_LIVED_WARMUP = 30
"""Cycles each long-lived side runs before its first timed round (its pools' connections warm)."""


async def _rounds(
    names: list[str], rounds: int, time_one: Callable[[str], Awaitable[tuple[float, float]]]
) -> dict[str, list[tuple[float, float]]]:
    """``rounds`` rounds of one timing per side, the order rotated each round (interleaved)."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(await time_one(name))
    return samples


async def _timed(block: Any, cycles: int) -> tuple[float, float]:
    """Mean CPU and wall microseconds per cycle over ``cycles`` cycles of a long-lived ``block``."""
    import bench_peers as bp

    bp.CALLS.update(draft=0, revise=0)
    gc.collect()
    cpu_start, wall_start = time.process_time_ns(), time.perf_counter_ns()
    for _ in range(cycles):
        await block.cycle()
    cpu, wall = time.process_time_ns() - cpu_start, time.perf_counter_ns() - wall_start
    assert dict(bp.CALLS) == {"draft": cycles, "revise": cycles}, dict(bp.CALLS)  # resumed, not re-run
    return cpu / cycles / 1000, wall / cycles / 1000


def langgraph_redis_note(redis_url: str) -> str:
    """Why LangGraph's ``RedisSaver`` has no row: it needs the RedisJSON and RediSearch modules."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        version = str(client.info("server").get("redis_version", "?"))  # pyright: ignore[reportUnknownMemberType]
        modules = {str(module.get(b"name", module.get("name", b""))) for module in client.module_list()}  # pyright: ignore[reportUnknownMemberType]
    finally:
        client.close()
    found = ", ".join(sorted(modules)) or "none"
    return (
        f"\nLangGraph RedisSaver: not measured. langgraph-checkpoint-redis needs the RedisJSON and RediSearch "
        f"modules (Redis Stack or Redis 8); the Redis at hand is {version} with modules: {found}."
    )
