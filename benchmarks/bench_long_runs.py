"""Long runs: N ``@step`` calls in one run, in core, in ours and in LangGraph's functional API.

One batch workflow (review N documents, one ``@step`` / ``@task`` call each, the document ids as
the run's input) is written twice: core's ``agent_framework.workflow`` / ``step`` (driven directly
by ``core`` and through this package by ``ours``) and LangGraph's ``entrypoint`` / ``task``. Rows:

* ``memory``: core and ours without checkpoint storage (the step cache lives in memory, for a
  replay after a pause); LangGraph with ``InMemorySaver`` (without a checkpointer it keeps no task
  results at all).
* ``sqlite``: core and ours with ``SQLiteCheckpointStorage`` (this package's embedded storage, one file);
  LangGraph with ``AsyncSqliteSaver``.
* ``redis``: core and ours with ``RedisCheckpointStorage`` (this package's storage) on a real
  ``redis-server`` the benchmark starts on a free loopback port (no persistence: memory only);
  LangGraph with ``AsyncSqliteSaver`` (its durable saver here).
* ``file``: core and ours with core's ``FileCheckpointStorage``; LangGraph with ``AsyncSqliteSaver``.
* ``postgres``: core and ours with ``PostgresCheckpointStorage``; LangGraph with its
  ``AsyncPostgresSaver``, on one throwaway PostgreSQL cluster the benchmark starts
  (``tests/postgres_server.py``; default ``fsync`` and ``synchronous_commit``), each run in a fresh
  schema. The server's CPU (the postmaster and its backends, from ``/proc``) is added as for Redis;
  ``stored`` is the schema's tables with their indexes and TOAST (``pg_total_relation_size``),
  ``payload`` the stored bodies (ours: whole bodies and the rows' bodies, i.e. chunks; LangGraph: its
  checkpoint and metadata columns and its blobs).

Each N runs its sides interleaved (the order rotates every round), ``--repeats`` times; a side's
figure is its best run. Columns: ``cpu us/step`` is process CPU time (``time.process_time``, all
threads, so LangGraph's SQLite thread counts) divided by N, and with Redis the redis-server's CPU
time (read from ``/proc``) is added, so the storage's server work counts too; ``wall s`` is the
run's wall time; ``stored`` is what the run left in its storage: the Redis keys' ``MEMORY USAGE``,
the checkpoint files' sizes, the SQLite file with its WAL; ``payload`` is the bytes of the values
alone (Redis hash fields and list items; LangGraph's checkpoint, metadata and write blobs).
Cells whose cost grows with N squared (core's step-cache check, and every checkpoint holding the
whole cache) are skipped above ``--max-quadratic`` steps. The goals (CPU per step at the largest N within
1.3x of the smallest, ours; ours at most 0.6x LangGraph's CPU at 1,000 steps and more on the memory,
sqlite and postgres rows; ours storing at most LangGraph's bytes) are printed, met or missed; it exits 0.

.. code-block:: bash

    python benchmarks/bench_long_runs.py                      # several minutes on 2 cores
    python benchmarks/bench_long_runs.py --sizes 50 1000      # a subset
    python benchmarks/bench_long_runs.py --quick              # seconds; smoke test only
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agent_framework
from agent_framework import FileCheckpointStorage, step

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package, not an installed one
import agent_framework_functional
from agent_framework_functional import (
    PostgresCheckpointStorage,
    RedisCheckpointStorage,
    SQLiteCheckpointStorage,
)

warnings.filterwarnings("ignore")  # core's ExperimentalWarning

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.func import entrypoint, task

# LangGraph documents its async functional API (an async ``@task``) as needing Python 3.11 or newer: before
# 3.11 an asyncio task cannot be given the run's context. On Python 3.10 the LangGraph side is left out.
LANGGRAPH_RUNS = sys.version_info >= (3, 11)
LANGGRAPH_SKIPPED = (
    "LangGraph columns skipped: LangGraph's async functional API (async @task) "
    f"needs Python 3.11 or newer; this is Python {platform.python_version()}"
)
SIDES = ("core", "ours", "langgraph") if LANGGRAPH_RUNS else ("core", "ours")
ROWS = ("memory", "sqlite", "redis", "file", "postgres")


@step
async def review(doc: str) -> dict[str, Any]:
    return {"id": doc, "flagged": doc.endswith("7"), "summary": f"document {doc} reviewed"}


async def batch(docs: list[str]) -> int:
    flagged = 0
    for doc in docs:
        flagged += (await review(doc))["flagged"]
    return flagged


@task
async def lg_review(doc: str) -> dict[str, Any]:
    return {"id": doc, "flagged": doc.endswith("7"), "summary": f"document {doc} reviewed"}


async def lg_batch(docs: list[str]) -> int:
    flagged = 0
    for doc in docs:
        flagged += (await lg_review(doc))["flagged"]
    return flagged


CORE = agent_framework.workflow(batch)
OURS = agent_framework_functional.workflow(batch)
# With a storage, ours keeps its checkpoints, as LangGraph's savers do, so ``stored`` compares what a run
# wrote (a default run deletes its chain's checkpoints when it ends: invariant 30).
OURS_KEPT = agent_framework_functional.workflow(checkpoint_retention=None)(batch)
HERE = Path(__file__).resolve().parent


@dataclass
class Measure:
    """One run of one cell: CPU and wall seconds, and what it left in its storage."""

    cpu: float  # seconds, process (+ redis-server)
    wall: float
    stored: int | None = None
    payload: int | None = None


# ---------------------------------------------------------------- redis-server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[tuple[str, int]]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed: run scripts/services/redis.sh.")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", proc.pid
    finally:
        proc.kill()
        proc.wait()


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the redis-server process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def redis_bytes(url: str, namespace: str) -> tuple[int, int]:
    """MEMORY USAGE of the namespace's keys, and the bytes of their values."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(url)
    stored = payload = 0
    try:
        async for key in client.scan_iter(f"{namespace}:*", count=1000):
            stored += int(await client.memory_usage(key, samples=0) or 0)
            kind = await client.type(key)
            if kind == b"hash":
                payload += sum(len(value) for value in (await client.hgetall(key)).values())
            elif kind == b"list":
                payload += sum(len(item) for item in await client.lrange(key, 0, -1))
    finally:
        await client.aclose()
    return stored, payload


def tree_cpu(pid: int) -> float:
    """CPU seconds of a server process, its reaped children and its live children (PostgreSQL's backends)."""
    clock = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    total = sum(int(value) for value in fields[11:15])
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            child = stat.read_text().rsplit(")", 1)[1].split()
            if int(child[1]) == pid:
                total += int(child[11]) + int(child[12])
    return total / clock


def new_schema(url: str) -> str:
    import psycopg

    schema = f"b_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema


def postgres_bytes(url: str, schema: str, ours: bool) -> tuple[int, int]:
    """The schema's tables with indexes and TOAST, and the bytes of the stored bodies."""
    import psycopg

    if ours:  # one row per checkpoint (head and chunk in one row)
        payload = f'SELECT coalesce(sum(length(body)), 0) FROM "{schema}".delta_checkpoints'
    else:
        payload = (
            "SELECT (SELECT coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0) "
            f'FROM "{schema}".checkpoints)'
            f' + (SELECT coalesce(sum(length(blob)), 0) FROM "{schema}".checkpoint_blobs)'
            f' + (SELECT coalesce(sum(length(blob)), 0) FROM "{schema}".checkpoint_writes)'
        )
    with psycopg.connect(url, autocommit=True) as conn:
        stored = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
        found = conn.execute(payload).fetchone()
    return int(stored[0]) if stored else 0, int(found[0]) if found else 0


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def folder_bytes_of(folder: Path, prefix: str) -> int:
    return sum(path.stat().st_size for path in folder.glob(f"{prefix}*"))


def sqlite_payload(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as con:
        checkpoints = con.execute("select coalesce(sum(length(checkpoint) + length(metadata)), 0) from checkpoints")
        writes = con.execute("select coalesce(sum(length(value)), 0) from writes")
        return int(checkpoints.fetchone()[0]) + int(writes.fetchone()[0])


def ours_sqlite_payload(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as con:
        chunks = con.execute("select coalesce(sum(length(body)), 0) from checkpoint_chunks").fetchone()
        return int(chunks[0])


# ---------------------------------------------------------------- one run per side and row


async def timed(
    run: Callable[[], Awaitable[Any]], pid: int | None = None, cpu_of: Callable[[int], float] = server_cpu
) -> Measure:
    gc.collect()
    server = cpu_of(pid) if pid else 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    await run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if pid:
        cpu += cpu_of(pid) - server
    return Measure(cpu, wall)


@dataclass
class Servers:
    """Where the storages of the redis and postgres rows live."""

    redis_url: str
    redis_pid: int
    postgres_url: str | None = None
    postgres_pid: int | None = None


async def run_postgres(side: str, docs: list[str], servers: Servers) -> Measure:
    assert servers.postgres_url is not None
    url, schema = servers.postgres_url, new_schema(servers.postgres_url)
    if side == "langgraph":
        separator = "&" if "?" in url else "?"
        async with AsyncPostgresSaver.from_conn_string(f"{url}{separator}options=-csearch_path%3D{schema}") as saver:
            await saver.setup()
            graph = entrypoint(checkpointer=saver)(lg_batch)
            config = {"configurable": {"thread_id": "run"}}
            measure = await timed(lambda: graph.ainvoke(docs, config), servers.postgres_pid, tree_cpu)
    else:
        storage = PostgresCheckpointStorage(url, schema=schema)
        try:
            await storage.setup()  # creates the tables, outside the timing
            wf = (CORE if side == "core" else OURS_KEPT).build(checkpoint_storage=storage)
            measure = await timed(lambda: wf.run(docs), servers.postgres_pid, tree_cpu)
        finally:
            await storage.aclose()
    measure.stored, measure.payload = postgres_bytes(url, schema, side != "langgraph")
    return measure


async def run_one(side: str, row: str, docs: list[str], folder: Path, servers: Servers) -> Measure:
    redis_url, redis_pid = servers.redis_url, servers.redis_pid
    if row == "postgres":
        return await run_postgres(side, docs, servers)
    if side == "langgraph":
        if row == "memory":
            graph = entrypoint(checkpointer=InMemorySaver())(lg_batch)
            config = {"configurable": {"thread_id": str(uuid.uuid4())}}
            return await timed(lambda: graph.ainvoke(docs, config))
        path = folder / f"lg-{uuid.uuid4().hex}.db"
        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            graph = entrypoint(checkpointer=saver)(lg_batch)
            config = {"configurable": {"thread_id": "run"}}
            measure = await timed(lambda: graph.ainvoke(docs, config))
        measure.stored = folder_bytes_of(folder, path.name)
        measure.payload = sqlite_payload(path)
        return measure
    definition = CORE if side == "core" else OURS if row == "memory" else OURS_KEPT
    if row == "memory":
        wf = definition.build()
        return await timed(lambda: wf.run(docs))
    if row == "file":
        target = folder / f"{side}-{uuid.uuid4().hex}"
        target.mkdir()
        wf = definition.build(checkpoint_storage=FileCheckpointStorage(str(target)))
        measure = await timed(lambda: wf.run(docs))
        measure.stored = measure.payload = folder_bytes(target)
        return measure
    if row == "sqlite":
        path = folder / f"{side}-{uuid.uuid4().hex}.db"
        async with SQLiteCheckpointStorage(path) as sqlite_storage:
            wf = definition.build(checkpoint_storage=sqlite_storage)
            measure = await timed(lambda: wf.run(docs))
        measure.stored = folder_bytes_of(folder, path.name)
        measure.payload = ours_sqlite_payload(path)
        return measure
    namespace = f"bench-{uuid.uuid4().hex[:12]}"
    storage = RedisCheckpointStorage(redis_url, namespace=namespace)
    try:
        wf = definition.build(checkpoint_storage=storage)
        measure = await timed(lambda: wf.run(docs), redis_pid)
    finally:
        await storage.aclose()
    measure.stored, measure.payload = await redis_bytes(redis_url, namespace)
    return measure


def quadratic(side: str, row: str) -> bool:
    """Cells whose cost grows with N squared: core's own check, and checkpoints that hold the whole cache."""
    return side == "core" or (side == "ours" and row == "file")


def fmt_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("MB", 1 << 20), ("KB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 1000, 5000])
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell; the best counts (default 3)")
    parser.add_argument("--max-quadratic", type=int, default=1000, help="skip quadratic cells above this N")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--quick", action="store_true", help="N = 5 and 20, one run each (smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeats = [5, 20], 1
    print(
        f"agent-framework-core {agent_framework.__version__}; repeats={args.repeats}; best run per cell; "
        f"cpu = process CPU (+ the server's CPU on the redis and postgres rows) per step"
    )
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as (redis_url, redis_pid):
        folder = Path(tmp)
        servers = Servers(redis_url, redis_pid)
        postgres = None
        if "postgres" in args.rows:
            sys.path.insert(0, str(HERE))
            from postgres_peers import start_postgres

            postgres = start_postgres()
            servers.postgres_url, servers.postgres_pid = postgres.url, postgres.postmaster_pid()
        try:
            results = await measure_all(args, folder, servers)
        finally:
            if postgres is not None:
                postgres.stop()
        report(results, args)


async def measure_all(args: argparse.Namespace, folder: Path, servers: Servers) -> dict[tuple[str, str, int], Measure]:
    """Every cell of every N, interleaved; the best run per cell."""
    results: dict[tuple[str, str, int], Measure] = {}
    for n in args.sizes:
        docs = [f"doc-{index:05d}" for index in range(n)]
        cells = [(side, row) for row in args.rows for side in SIDES]
        cells = [cell for cell in cells if not (quadratic(*cell) and n > args.max_quadratic)]
        # LangGraph runs the same AsyncSqliteSaver on the sqlite, redis and file rows: measured once, shared.
        shared = [row for row in ("redis", "file") if row in args.rows and "sqlite" in args.rows]
        cells = [cell for cell in cells if not (cell[0] == "langgraph" and cell[1] in shared)]
        for round_index in range(args.repeats):
            shift = round_index % len(cells)
            for side, row in itertools.chain(cells[shift:], cells[:shift]):
                measure = await run_one(side, row, docs, folder, servers)
                best = results.get((side, row, n))
                if best is None or measure.cpu < best.cpu:
                    if best is not None and measure.stored is None:
                        measure.stored, measure.payload = best.stored, best.payload
                    results[side, row, n] = measure
        for row in shared:
            if ("langgraph", "sqlite", n) in results:
                results["langgraph", row, n] = results["langgraph", "sqlite", n]
    return results


def report(results: dict[tuple[str, str, int], Measure], args: argparse.Namespace) -> None:
    if not LANGGRAPH_RUNS:
        print(LANGGRAPH_SKIPPED)
    head = f"{'row':7}{'N':>6}  {'side':10}{'cpu us/step':>12}{'wall s':>9}{'stored':>11}{'payload':>11}"
    print(head + f"{'ours/core':>11}{'ours/lg':>9}")
    for row in args.rows:
        for n in args.sizes:
            ours = results.get(("ours", row, n))
            for side in SIDES:
                measure = results.get((side, row, n))
                if measure is None:
                    print(f"{row:7}{n:>6}  {side:10}{'skipped (quadratic; --max-quadratic)':>43}")
                    continue
                line = f"{row:7}{n:>6}  {side:10}{measure.cpu / n * 1e6:>12.1f}{measure.wall:>9.2f}"
                line += f"{fmt_bytes(measure.stored):>11}{fmt_bytes(measure.payload):>11}"
                if side == "ours":
                    core, lg = results.get(("core", row, n)), results.get(("langgraph", row, n))
                    line += f"{ours.cpu / core.cpu:>11.3f}" if ours and core else f"{'-':>11}"
                    line += f"{ours.cpu / lg.cpu:>9.3f}" if ours and lg else f"{'-':>9}"
                print(line)
    report_linearity(results, args)
    report_goals(results, args)
    print(json.dumps({"sizes": args.sizes, "repeats": args.repeats}))


def report_linearity(results: dict[tuple[str, str, int], Measure], args: argparse.Namespace) -> None:
    print("linearity (cpu per step at the largest N over the smallest), ours:")
    small, large = min(args.sizes), max(args.sizes)
    for row in args.rows:
        first, last = results.get(("ours", row, small)), results.get(("ours", row, large))
        if first and last:
            print(f"  {row:7} {last.cpu / large / (first.cpu / small):.3f}")


GOAL_LINEAR = 1.3  # cpu per step at the largest N over the smallest, ours
GOAL_VS_LANGGRAPH = 0.6  # ours over LangGraph's cpu, at 1,000 steps and more
LANGGRAPH_ROWS = ("memory", "sqlite", "postgres")  # LangGraph's in-memory, SQLite and PostgreSQL savers


def report_goals(results: dict[tuple[str, str, int], Measure], args: argparse.Namespace) -> None:
    """Each goal per row: met or MISSED, with the figure."""
    print("goals:")
    small, large = min(args.sizes), max(args.sizes)
    for row in args.rows:
        first, last = results.get(("ours", row, small)), results.get(("ours", row, large))
        if row != "file" and first and last and large > small:
            ratio = last.cpu / large / (first.cpu / small)
            print(f"  {row:8} linear {large} vs {small}: {ratio:.2f} ({_verdict(ratio <= GOAL_LINEAR)})")
        for n in args.sizes:
            ours, lg = results.get(("ours", row, n)), results.get(("langgraph", row, n))
            if not ours or not lg:
                continue
            if row in LANGGRAPH_ROWS and n >= 1000:
                ratio = ours.cpu / lg.cpu
                print(f"  {row:8} cpu ours/lg at {n}: {ratio:.2f} ({_verdict(ratio <= GOAL_VS_LANGGRAPH)})")
            if row != "file" and ours.stored is not None and lg.stored is not None:
                ok = ours.stored <= lg.stored
                print(f"  {row:8} stored ours/lg at {n}: {ours.stored / lg.stored:.2f} ({_verdict(ok)})")


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


if __name__ == "__main__":
    asyncio.run(main())
