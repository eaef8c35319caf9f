"""Cost of durable continuations: claim latency per store, resume throughput, and LangGraph beside it.

Four measurements, printed as tables:

* **Claim latency.** ``store.claim(hash)`` on records saved beforehand, one at a time, for
  ``SQLiteContinuationStore`` (a file in a temporary folder) and ``RedisContinuationStore`` (a
  ``redis-server`` this script starts on a free loopback port with ``appendfsync always``, as the
  store's default durability requires, or ``--redis-url``). Median and
  99th percentile in microseconds.
* **Resume throughput.** Pauses are created first (all in this process, checkpointed in one
  ``FileCheckpointStorage``), then resumed with their tokens, timed from a common start signal to
  the last resume: by 1, 4 and 8 worker processes that never saw the pauses (the durable remote
  path: store lookup, checkpoint restore, claim), beside the in-memory path in one process (no
  store: the token is checked in memory and core replays from memory) and the in-memory fast path
  with a store (the same, plus the claim in the store). Figures are resumes per second.
* **Claim latency, 64 concurrent.** 64 claims on 64 distinct issued records launched together
  with ``asyncio.gather``, each timed from its launch to its answer (queueing included), repeated
  over ``--rounds`` rounds; median and 99th percentile over all claims, per store.
* **Durable cycles.** The human-in-the-loop cycle of ``bench_peers.py`` (a step, a pause for a
  string, a step; the pause issues a durable token whose record carries the answer types, and the
  resume checks them before its claim), in one process: ``same worker`` resumes on the instance
  that paused, ``fresh worker`` on a new instance with its own store connection and checkpoint
  storage object (store lookup, answer-type check, checkpoint restore, claim). Median wall-clock
  cycles per second over blocks, per store.
* **Beside LangGraph.** ``bench_peers.py``'s ``disk same`` pair, imported from it: ours
  (``SQLiteContinuationStore`` + ``FileCheckpointStorage``) against LangGraph's functional API
  with ``AsyncSqliteSaver``, blocks interleaved; the ratio is the median of the paired block
  ratios ``ours/lg`` by CPU time and by wall time (below 1: ours is faster). On Python 3.10 this
  table is replaced by a line saying why: LangGraph's async functional API needs Python 3.11.

The machine this runs on may be small and shared, so each throughput row is the best of
``--repeat`` runs (the least disturbed one); compare rows of one run, not runs of different days.
Timing goals live here, never in the tests (the tests only run ``--quick``).

Run it:

.. code-block:: bash

    pip install -e ".[bench]"                     # LangGraph, for the last table
    python benchmarks/bench_durable.py            # about two minutes on 2 cores
    python benchmarks/bench_durable.py --quick    # a few seconds (1 and 2 processes), for smoke tests
    python benchmarks/bench_durable.py --postgres-only   # only the PostgreSQL rows (claims, cycles, LangGraph)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from agent_framework import FileCheckpointStorage
from postgres_peers import beside_langgraph_postgres, langgraph_redis_note, start_postgres

from agent_framework_functional import (
    ContinuationRecord,
    ContinuationStore,
    FunctionalWorkflow,
    PostgresContinuationStore,
    RedisContinuationStore,
    RunContext,
    SQLiteContinuationStore,
    migrate_postgres,
    step,
    workflow,
)
from agent_framework_functional._durable.postgres_schema import DEFAULT_POOL_SIZE

if TYPE_CHECKING:
    from bench_peers import Block

# Core says once per use that its functional API is experimental; that is noise in a benchmark.
warnings.filterwarnings("ignore", message=r"\[FUNCTIONAL_WORKFLOWS\]")


@step
async def draft(topic: str) -> str:
    return f"draft about {topic}"


@step
async def ship(text: str) -> str:
    return f"shipped: {text}"


@workflow(name="bench_approval")
async def bench_approval(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    answer = await ctx.request_info({"draft": text}, response_type=str)
    return await ship(f"{text} ({answer})")


# ---------------------------------------------------------------- stores


def open_store(spec: dict[str, str]) -> ContinuationStore:
    if spec["kind"] == "sqlite":
        return SQLiteContinuationStore(spec["location"])
    if spec["kind"] == "postgres":
        size = int(spec.get("max_size", "0")) or DEFAULT_POOL_SIZE
        return PostgresContinuationStore(spec["location"], schema=spec["namespace"], max_size=size)
    return RedisContinuationStore(spec["location"], namespace=spec["namespace"])


async def close_store(store: ContinuationStore) -> None:
    await store.aclose()


REDIS_PORTS = range(16900, 16950)  # loopback ports this benchmark may use


def free_port() -> int:
    for port in REDIS_PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"no free loopback port in {REDIS_PORTS.start}-{REDIS_PORTS.stop - 1}; pass --redis-url.")


def start_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start redis-server with its AOF fsynced on every write (what the store's default durability needs)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed: run scripts/services/redis.sh, or pass --redis-url.")
    port = free_port()
    persistence = ["--save", "", "--dir", str(folder), "--appendonly", "yes", "--appendfsync", "always"]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", *persistence],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("redis-server did not start")
        time.sleep(0.05)


# ---------------------------------------------------------------- claim latency


async def issue_records(store: ContinuationStore, count: int) -> list[str]:
    """Save ``count`` issued records and return their token hashes."""
    hashes: list[str] = []
    for _ in range(count):
        now = store.now()
        record = ContinuationRecord(
            token_hash=secrets.token_hex(32),
            workflow_name="bench",
            signature_hash="0" * 64,
            checkpoint_id="checkpoint",
            pending_request_ids=("auto::0",),
            created_at=now,
            expires_at=now + store.ttl_seconds,
            response_types={"auto::0": "builtins:str"},
        )
        await store.save(record)
        hashes.append(record.token_hash)
    return hashes


def median_p99(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


async def claim_latency(spec: dict[str, str], count: int) -> tuple[float, float]:
    store = open_store(spec)
    try:
        hashes = await issue_records(store, count)
        samples: list[float] = []
        for token_hash in hashes:
            start = time.perf_counter()
            won = await store.claim(token_hash)
            samples.append((time.perf_counter() - start) * 1e6)
            assert won
        return median_p99(samples)
    finally:
        await close_store(store)


async def concurrent_claim_latency(spec: dict[str, str], concurrency: int, rounds: int) -> tuple[float, float]:
    """Median and p99 microseconds of ``concurrency`` claims launched together, over ``rounds`` rounds."""
    store = open_store(spec)
    try:
        samples: list[float] = []

        async def timed_claim(token_hash: str) -> None:
            start = time.perf_counter()
            won = await store.claim(token_hash, claimer=secrets.token_hex(16))
            samples.append((time.perf_counter() - start) * 1e6)
            assert won

        for _ in range(rounds + 1):  # the first round opens the connections (Redis: its pool) and is not kept
            hashes = await issue_records(store, concurrency)
            await asyncio.gather(*(timed_claim(token_hash) for token_hash in hashes))
        del samples[:concurrency]
        assert len(samples) == concurrency * rounds
        return median_p99(samples)
    finally:
        await close_store(store)


# ---------------------------------------------------------------- resume throughput


async def make_pauses(wf_factory: Callable[[], FunctionalWorkflow], count: int) -> list[dict[str, Any]]:
    handoffs: list[dict[str, Any]] = []
    for i in range(count):
        wf = wf_factory()
        paused = await wf.run(f"topic {i}")
        request_id = paused.get_request_info_events()[0].request_id
        handoffs.append({"token": paused.continuation_token, "request_id": request_id})
    return handoffs


async def in_memory_throughput(count: int, store_spec: dict[str, str] | None, folder: Path) -> float:
    """One process resumes pauses it holds in memory (no store, or the fast path with a store)."""
    store = open_store(store_spec) if store_spec is not None else None
    try:
        storage = FileCheckpointStorage(folder / "checkpoints-local")
        instances = [bench_approval.build(checkpoint_storage=storage, continuation_store=store) for _ in range(count)]
        pauses = []
        for i, wf in enumerate(instances):
            paused = await wf.run(f"topic {i}")
            pauses.append((wf, paused.continuation_token, paused.get_request_info_events()[0].request_id))
        start = time.perf_counter()
        for wf, token, request_id in pauses:
            await wf.run(responses={request_id: "ok"}, continuation_token=token)
        return count / (time.perf_counter() - start)
    finally:
        if store is not None:
            await close_store(store)


def remote_throughput(spec: dict[str, str], handoffs: list[dict[str, Any]], processes: int, folder: Path) -> float:
    """``processes`` workers resume disjoint slices of ``handoffs`` from a common start signal."""
    run_dir = Path(tempfile.mkdtemp(dir=folder))
    workers = []
    for index in range(processes):
        chunk = handoffs[index::processes]
        (run_dir / f"work-{index}.json").write_text(json.dumps(chunk), encoding="utf-8")
        command = [sys.executable, __file__, "--worker", json.dumps(spec), str(folder / "checkpoints")]
        workers.append(subprocess.Popen([*command, str(run_dir), str(index)], stdout=subprocess.PIPE, text=True))
    while len(list(run_dir.glob("ready-*"))) < processes:
        time.sleep(0.01)
    (run_dir / "go").write_text("go", encoding="utf-8")
    go = time.time()
    ends = []
    for proc in workers:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"worker failed: {out}")
        ends.append(json.loads(out.strip().splitlines()[-1])["end"])
    return len(handoffs) / (max(ends) - go)


def wait_for_go(path: Path) -> None:
    while not path.exists():
        time.sleep(0.001)


async def worker(spec_json: str, checkpoint_dir: str, run_dir: str, index: str) -> None:
    spec = json.loads(spec_json)
    store = open_store(spec)
    storage = FileCheckpointStorage(checkpoint_dir)
    chunk = json.loads((Path(run_dir) / f"work-{index}.json").read_text(encoding="utf-8"))
    wf = bench_approval.build(checkpoint_storage=storage, continuation_store=store)
    await wf.run("warm-up")  # imports and first-run costs before the start signal
    await wf.abandon_continuation_async(force=True)
    (Path(run_dir) / f"ready-{index}").write_text("ready", encoding="utf-8")
    wait_for_go(Path(run_dir) / "go")  # blocking on purpose: nothing else runs in this worker yet
    for item in chunk:
        done = await wf.run(responses={item["request_id"]: "ok"}, continuation_token=item["token"])
        assert done.get_outputs()
    print(json.dumps({"end": time.time()}), flush=True)
    await close_store(store)


# ---------------------------------------------------------------- durable cycles (bench_peers.py's cycle)

BlockMaker = Callable[[Path], "Awaitable[Block]"]


def peers() -> ModuleType:
    """``bench_peers.py``, whose cycles these rows reuse, imported on first use.

    Run as a script, this folder is on ``sys.path``. The import needs LangGraph (``pip install -e
    ".[bench]"``) and takes seconds, so the resume workers, which do not need it, never pay for it.
    """
    import bench_peers

    return bench_peers


def same_worker(spec: dict[str, str]) -> BlockMaker:
    """Blocks of cycles that pause and resume on one instance (its store and checkpoint folder fresh)."""

    async def make(folder: Path) -> Block:
        store = open_store(block_spec(spec, folder))
        storage = FileCheckpointStorage(folder / "checkpoints")
        wf = peers().our_review.build(checkpoint_storage=storage, continuation_store=store)
        return peers().Block(peers()._our_cycle(wf), lambda: close_store(store))

    return make


def fresh_worker(spec: dict[str, str]) -> BlockMaker:
    """Blocks of cycles that pause on one instance and resume on a new one with its own connections."""

    async def make(folder: Path) -> Block:
        bp = peers()
        review = bp.our_review
        pausing_store = open_store(block_spec(spec, folder))
        resuming_store = open_store(block_spec(spec, folder))
        pausing = FileCheckpointStorage(folder / "checkpoints")
        resuming = FileCheckpointStorage(folder / "checkpoints")

        async def cycle() -> None:
            paused = await review.build(checkpoint_storage=pausing, continuation_store=pausing_store).run(bp.TOPIC)
            request_id = paused.get_request_info_events()[0].request_id
            wf = review.build(checkpoint_storage=resuming, continuation_store=resuming_store)
            done = await wf.run(responses={request_id: bp.ANSWER}, continuation_token=paused.continuation_token)
            assert done.get_outputs() == [bp.EXPECTED]
            assert done.continuation_token is None

        async def close() -> None:
            await close_store(pausing_store)
            await close_store(resuming_store)

        return bp.Block(cycle, close)

    return make


def block_spec(spec: dict[str, str], folder: Path) -> dict[str, str]:
    """The store of one block: a fresh SQLite file in its folder, or a fresh Redis namespace or Postgres schema."""
    if spec["kind"] == "sqlite":
        return {**spec, "location": str(folder / "continuations.db")}
    if spec["kind"] == "postgres":
        return postgres_ready({**spec, "namespace": f"{spec['namespace']}_{folder.name.lower()}"})
    return {**spec, "namespace": f"{spec['namespace']}:{folder.name}"}


def postgres_ready(spec: dict[str, str]) -> dict[str, str]:
    """``spec`` once its schema's tables exist (``migrate_postgres``, in a thread: callers may run a loop)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, migrate_postgres(spec["location"], schema=spec["namespace"])).result()
    return spec


async def cycle_rates(
    makers: dict[str, BlockMaker], *, rounds: int, cycles: int, warmup: int, scratch: Path
) -> dict[str, float]:
    """Median wall-clock cycles per second of each maker's blocks, interleaved over ``rounds``."""
    names = list(makers)
    for _ in range(warmup):
        for name in names:
            await peers()._time_block(makers[name], cycles, scratch)
    walls: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            _, wall_us = await peers()._time_block(makers[name], cycles, scratch)
            walls[name].append(wall_us)
    return {name: 1e6 / statistics.median(values) for name, values in walls.items()}


async def beside_langgraph(
    *, rounds: int, cycles: int, warmup: int, scratch: Path
) -> dict[str, tuple[float, float, float]]:
    """``bench_peers.py``'s ``disk same`` pair: clock -> (ours median us, lg median us, paired ours/lg)."""
    makers = {"ours": peers()._our_disk_same, "lg": peers()._lg_disk_same}
    for _ in range(warmup):
        for make in makers.values():
            await peers()._time_block(make, cycles, scratch)
    samples: dict[str, list[tuple[float, float]]] = {"ours": [], "lg": []}
    for index in range(rounds):
        for name in ("ours", "lg") if index % 2 == 0 else ("lg", "ours"):
            samples[name].append(await peers()._time_block(makers[name], cycles, scratch))
    figures: dict[str, tuple[float, float, float]] = {}
    for position, clock in enumerate(("cpu", "wall")):
        ours = [sample[position] for sample in samples["ours"]]
        lg = [sample[position] for sample in samples["lg"]]
        paired = statistics.median(a / b for a, b in zip(ours, lg, strict=True))
        figures[clock] = (statistics.median(ours), statistics.median(lg), paired)
    return figures


# ---------------------------------------------------------------- main


async def postgres_rows(
    spec: dict[str, str], postgres_url: str, *, rounds: int, cycles: int, warmup: int, folder: Path
) -> None:
    """``--postgres-only``: the durable-cycle rows and the LangGraph table of PostgreSQL alone."""
    scratch = Path(tempfile.mkdtemp(dir=folder))
    makers = {"durable Postgres, same worker": same_worker(spec), "durable Postgres, fresh worker": fresh_worker(spec)}
    print()
    print(f"{f'durable cycles, {rounds} blocks of {cycles}':<40}{'cycles/s':>12}   (pause + resume, median wall)")
    for label, rate in (
        await cycle_rates(makers, rounds=rounds, cycles=cycles, warmup=warmup, scratch=scratch)
    ).items():
        print(f"{label:<40}{rate:>12.1f}")
    if not peers().LANGGRAPH_RUNS:
        print(peers().LANGGRAPH_SKIPPED)
        return
    await beside_langgraph_postgres(postgres_url, rounds=rounds, cycles=cycles, warmup=warmup, scratch=scratch)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for smoke tests")
    parser.add_argument("--redis-url", help="use this Redis instead of starting redis-server")
    parser.add_argument("--postgres-url", help="use this PostgreSQL instead of starting a throwaway cluster")
    parser.add_argument("--repeat", type=int, help="runs per throughput row; the best is shown (default 3)")
    parser.add_argument("--rounds", type=int, help="rounds of concurrent claims and of cycle blocks (default 15)")
    parser.add_argument("--cycles", type=int, help="cycles per timed block (default 10)")
    parser.add_argument(
        "--postgres-only",
        action="store_true",
        help="only the PostgreSQL rows: claim latency (also with a pool of 64), durable cycles, beside LangGraph",
    )
    args = parser.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 15)
    args.cycles = args.cycles or (2 if args.quick else 10)
    args.warmup = 0 if args.quick else 1  # warm-up blocks per side (each block's first cycle is untimed anyway)
    args.concurrency = 64
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.claims = 100 if args.quick else 2000
    args.resumes = 8 if args.quick else 160
    args.process_counts = (1, 2) if args.quick else (1, 4, 8)
    return args


async def main() -> None:
    args = parse_args()
    redis_proc = None
    redis_url = args.redis_url
    folder = Path(tempfile.mkdtemp(prefix="bench-durable-"))
    if redis_url is None and not args.postgres_only:
        redis_proc, redis_url = start_redis(folder)
    postgres = None
    postgres_url = args.postgres_url
    if postgres_url is None:
        postgres = start_postgres()
        postgres_url = postgres.url
    try:
        await run_rows(args, folder, redis_url, postgres_url)
    finally:
        if postgres is not None:
            postgres.stop()
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


async def run_rows(args: argparse.Namespace, folder: Path, redis_url: str | None, postgres_url: str) -> None:
    specs = {
        "SQLite": {"kind": "sqlite", "location": str(folder / "continuations.db"), "namespace": ""},
        "Redis": {"kind": "redis", "location": redis_url, "namespace": f"bench:{os.getpid()}"},
        "Postgres": postgres_ready({"kind": "postgres", "location": postgres_url, "namespace": f"bench_{os.getpid()}"}),
    }
    if args.postgres_only:
        specs = {"Postgres": specs["Postgres"]}
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, claims={args.claims}, resumes={args.resumes}, "
        f"best of {args.repeat} per throughput row"
    )
    await latency_rows(args, specs)
    if args.postgres_only:
        await postgres_rows(
            specs["Postgres"], postgres_url, rounds=args.rounds, cycles=args.cycles, warmup=args.warmup, folder=folder
        )
        return
    await throughput_rows(args, specs, folder)
    scratch = Path(tempfile.mkdtemp(dir=folder))
    await cycle_rows(args, specs, scratch)
    if not peers().LANGGRAPH_RUNS:
        print(peers().LANGGRAPH_SKIPPED)
        return
    await peer_rows(args, scratch, redis_url, postgres_url)


async def latency_rows(args: argparse.Namespace, specs: dict[str, Any]) -> None:
    concurrency, rounds = args.concurrency, args.rounds
    print()
    print(f"{'claim latency':<16}{'median us':>12}{'p99 us':>12}")
    for name, spec in specs.items():
        median, p99 = await claim_latency(spec, args.claims)
        print(f"{name:<16}{median:>12.1f}{p99:>12.1f}")
    print()
    print(f"{f'claim latency, {concurrency} concurrent, {rounds} rounds':<40}{'median us':>12}{'p99 us':>12}")
    for name, spec in specs.items():
        median, p99 = await concurrent_claim_latency(spec, concurrency, rounds)
        print(f"{f'{name}, {concurrency} concurrent':<40}{median:>12.1f}{p99:>12.1f}")
    # The default pool holds 10 connections; a host expecting 64 concurrent claims sizes it for them.
    pooled = {**specs["Postgres"], "max_size": str(concurrency)}
    median, p99 = await concurrent_claim_latency(pooled, concurrency, rounds)
    print(f"{f'Postgres, max_size={concurrency}, {concurrency} concurrent':<40}{median:>12.1f}{p99:>12.1f}")


async def throughput_rows(args: argparse.Namespace, specs: dict[str, Any], folder: Path) -> None:
    repeat, resumes = args.repeat, args.resumes
    print()
    print(f"{'resume throughput':<40}{'resumes/s':>12}")
    rate = max([await in_memory_throughput(resumes, None, folder) for _ in range(repeat)])
    print(f"{'in-memory, no store, 1 process':<40}{rate:>12.1f}")
    for name, spec in specs.items():
        rate = max([await in_memory_throughput(resumes, spec, folder) for _ in range(repeat)])
        print(f"{f'in-memory fast path + {name}, 1 process':<40}{rate:>12.1f}")
    storage = FileCheckpointStorage(folder / "checkpoints")
    for name, spec in specs.items():
        for processes in args.process_counts:
            rates = [await remote_rate(spec, storage, resumes, processes, folder) for _ in range(repeat)]
            label = f"durable {name}, {processes} process{'es' if processes > 1 else ''}"
            print(f"{label:<40}{max(rates):>12.1f}")


async def remote_rate(
    spec: dict[str, str], storage: FileCheckpointStorage, resumes: int, processes: int, folder: Path
) -> float:
    store = open_store(spec)
    try:
        handoffs = await make_pauses(
            lambda s=store: bench_approval.build(checkpoint_storage=storage, continuation_store=s),
            resumes,
        )
    finally:
        await close_store(store)
    return remote_throughput(spec, handoffs, processes, folder)


async def cycle_rows(args: argparse.Namespace, specs: dict[str, Any], scratch: Path) -> None:
    print()
    makers: dict[str, BlockMaker] = {}
    for name, spec in specs.items():
        makers[f"durable {name}, same worker"] = same_worker(spec)
        makers[f"durable {name}, fresh worker"] = fresh_worker(spec)
    title = f"durable cycles, {args.rounds} blocks of {args.cycles}"
    print(f"{title:<40}{'cycles/s':>12}   (pause + resume, median wall)")
    rates = await cycle_rates(makers, rounds=args.rounds, cycles=args.cycles, warmup=args.warmup, scratch=scratch)
    for label, rate in rates.items():
        print(f"{label:<40}{rate:>12.1f}")
    print()


async def peer_rows(args: argparse.Namespace, scratch: Path, redis_url: str | None, postgres_url: str) -> None:
    rounds, cycles, warmup = args.rounds, args.cycles, args.warmup
    print(
        f"{f'beside LangGraph, {rounds} paired blocks':<40}{'ours us':>12}{'lg us':>12}{'ours/lg':>10}"
        "   (disk same of bench_peers.py; medians)"
    )
    figures = await beside_langgraph(rounds=rounds, cycles=cycles, warmup=warmup, scratch=scratch)
    for clock, (ours, lg, paired) in figures.items():
        label = f"SQLite+file vs AsyncSqliteSaver, {clock}"
        print(f"{label:<40}{ours:>12.1f}{lg:>12.1f}{paired:>10.3f}")
    await beside_langgraph_postgres(postgres_url, rounds=rounds, cycles=cycles, warmup=warmup, scratch=scratch)
    print(langgraph_redis_note(redis_url))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        asyncio.run(worker(*sys.argv[2:]))
    else:
        asyncio.run(main())
