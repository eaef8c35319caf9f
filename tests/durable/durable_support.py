"""Helpers shared by the durable tests and their worker processes (no fixtures here: see conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent_framework import CheckpointStorage, FileCheckpointStorage
from durable_workflows import approval
from redis_server import (  # noqa: F401  # re-exported: the durable tests import them from here
    REDIS_DURABLE_OPTIONS,
    REDIS_PORTS,
    RedisServer,
    free_port,
    ping,
    server_pid,
)

from agent_framework_functional import (
    ContinuationRecord,
    ContinuationStore,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RedisCheckpointStorage,
    RedisContinuationStore,
    SQLiteContinuationStore,
    continuation_token_hash,
)

HERE = Path(__file__).resolve().parent
WORKER = HERE / "durable_worker.py"
AGENT_WORKER = HERE / "durable_agent_worker.py"


@dataclass(frozen=True)
class StoreSpec:
    """How to open the same continuation store in any process."""

    kind: str  # "sqlite", "redis" or "postgres"
    location: str  # database file, redis URL, or postgresql URL
    namespace: str = "aff-test"  # redis: key prefix; postgres: schema (a plain identifier)

    durability: str = "fsync"  # redis only: RedisContinuationStore(durability=...)

    def open(self, *, ttl: float | None = None, clock: Callable[[], float] | None = None) -> ContinuationStore:
        options: dict[str, Any] = {}
        if ttl is not None:
            options["ttl"] = ttl
        if clock is not None:
            options["clock"] = clock
        if self.kind == "sqlite":
            return SQLiteContinuationStore(self.location, **options)
        if self.kind == "postgres":
            return PostgresContinuationStore(self.location, schema=self.namespace, **options)
        return RedisContinuationStore(
            self.location,
            namespace=self.namespace,
            durability=self.durability,  # type: ignore[arg-type]
            **options,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> StoreSpec:
        return cls(**json.loads(text))


def open_checkpoint_storage(location: str, **file_options: Any) -> CheckpointStorage:
    """A folder: ``FileCheckpointStorage(location, **file_options)``; ``redis://host:port/db#namespace``:
    ``RedisCheckpointStorage``; ``postgresql://user@host:port/db#schema``: ``PostgresCheckpointStorage``."""
    if location.startswith("postgresql://"):
        url, _, schema = location.partition("#")
        return PostgresCheckpointStorage(url, schema=schema or "aff_test")
    if location.startswith("redis://"):
        url, _, namespace = location.partition("#")
        return RedisCheckpointStorage(url, namespace=namespace or "aff-test")
    return FileCheckpointStorage(location, **file_options)


def open_worker_stores(
    spec_json: str, checkpoints: str, **file_options: Any
) -> tuple[ContinuationStore, CheckpointStorage]:
    """In a worker: the continuation store of ``StoreSpec.to_json()`` text, and the checkpoint storage at
    ``checkpoints`` (see :func:`open_checkpoint_storage`). Close both with :func:`close_store`."""
    return StoreSpec.from_json(spec_json).open(), open_checkpoint_storage(checkpoints, **file_options)


async def close_store(store: ContinuationStore | CheckpointStorage) -> None:
    if isinstance(store, (ContinuationStore, RedisCheckpointStorage, PostgresCheckpointStorage)):
        await store.aclose()  # core's checkpoint storages hold nothing to close


# ---------------------------------------------------------------- worker processes (both sides)


def write_json(path: str | Path, data: Any) -> None:
    Path(path).write_text(json.dumps(data), encoding="utf-8")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def wait_at_barrier(directory: str, name: str) -> None:
    """In a worker: announce ``ready-<name>`` in ``directory``, then wait until the test writes ``go``."""
    barrier = Path(directory)
    (barrier / f"ready-{name}").write_text("ready", encoding="utf-8")
    while not (barrier / "go").exists():
        time.sleep(0.001)


def worker_entry_point(main: Callable[[list[str]], Awaitable[dict[str, Any]]]) -> None:
    """Run a worker's ``main(sys.argv[1:])`` and print its JSON outcome as the last stdout line."""
    print(json.dumps(asyncio.run(main(sys.argv[1:]))), flush=True)


def spawn_worker(
    command: str, *args: str, env: dict[str, str] | None = None, worker: Path = WORKER
) -> subprocess.Popen[str]:
    """Start ``<worker> <command> <args>`` (default ``durable_worker.py``), the test's environment plus ``env``."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONWARNINGS"] = "ignore"
    # tests/ too, where the shared server helpers live (a worker's own folder is on its path already).
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), full_env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, str(worker), command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )
    SPAWNED.append(process)
    return process


SPAWNED: list[subprocess.Popen[str]] = []
"""Every worker :func:`spawn_worker` started; conftest's ``_reap_workers`` reaps them after each test."""


def reap_workers() -> None:
    """SIGKILL every spawned worker still running, wait for it and close its pipes, then forget them all.

    A test that fails between ``spawn_worker`` and :func:`finish` would otherwise leave running workers
    whose open pipes are garbage collected during some later test, which pytest (warnings are errors)
    then fails with a ``ResourceWarning`` that has nothing to do with it.
    """
    while SPAWNED:
        process = SPAWNED.pop()
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=60)  # reaps the process and closes its pipes


def run_worker(command: str, *args: str, worker: Path = WORKER) -> dict[str, Any]:
    """Run one worker to its end and return its JSON outcome."""
    return finish([spawn_worker(command, *args, worker=worker)])[0]


def wait_for(predicate: Callable[[], bool], *, timeout: float = 120.0, what: str = "condition") -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds (a hang guard, not a timing check)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def finish(workers: Sequence[subprocess.Popen[str]], *, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Wait for every worker and return the JSON outcome each printed on its last stdout line."""
    outcomes: list[dict[str, Any]] = []
    for worker in workers:
        out, err = worker.communicate(timeout=timeout)
        assert worker.returncode == 0, f"worker failed ({worker.returncode}):\n{out}\n{err}"
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    return outcomes


def start_race(barrier: Path, count: int, *, timeout: float = 120.0) -> None:
    """Wait until ``count`` workers are ready at ``barrier``, then release them all at once."""
    wait_for(lambda: len(list(barrier.glob("ready-*"))) >= count, timeout=timeout, what=f"{count} workers to be ready")
    (barrier / "go").write_text("go", encoding="utf-8")


async def pause_here(spec: StoreSpec, checkpoint_dir: Path, state: Path) -> dict[str, Any]:
    """Pause ``approval`` in the calling process and write the state file the workers read."""
    store = spec.open()
    try:
        wf = approval.build(checkpoint_storage=FileCheckpointStorage(checkpoint_dir), continuation_store=store)
        paused = await wf.run("tea")
        request_id = paused.get_request_info_events()[0].request_id
        data = {"token": paused.continuation_token, "request_id": request_id}
        write_json(state, data)  # tiny test file
        return data
    finally:
        await close_store(store)


async def record_status(spec: StoreSpec, token: dict[str, Any]) -> str | None:
    """The store's status of ``token``'s record (None when there is none), read through a fresh store."""
    store = spec.open()
    try:
        record = await store.get(continuation_token_hash(token))
        return record.status if record is not None else None
    finally:
        await close_store(store)


def new_record(store: ContinuationStore, *, expires_in: float | None = None) -> ContinuationRecord:
    """A record of ``approval`` under a fresh hash that expires after the store's ttl (or ``expires_in``)."""
    now = store.now()
    return ContinuationRecord(
        token_hash=secrets.token_hex(32),
        workflow_name="approval",
        signature_hash="s" * 64,
        checkpoint_id="checkpoint-1",
        pending_request_ids=("auto::0",),
        created_at=now,
        expires_at=now + (store.ttl_seconds if expires_in is None else expires_in),
    )


def effect_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


class FakeClock:
    """A settable clock for expiry tests (the stores take ``clock=``)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def buffered_storage(url: str, schema: str, *, delay: float | None = 3600.0, **options: Any) -> Any:
    """A ``PostgresCheckpointStorage`` whose held step checkpoints wait ``delay`` s for their run (None: default)."""
    from agent_framework_functional import PostgresCheckpointStorage

    storage = PostgresCheckpointStorage(url, schema=schema, **options)
    if delay is not None:
        storage._buffer._delay = delay  # pyright: ignore[reportPrivateUsage]
    return storage


async def checkpoints_elsewhere(url: str, schema: str, name: str) -> list[Any]:
    """The workflow's checkpoints as another worker's ``PostgresCheckpointStorage`` lists them."""
    from agent_framework_functional import PostgresCheckpointStorage

    other = PostgresCheckpointStorage(url, schema=schema)
    try:
        return await other.list_checkpoints(workflow_name=name)
    finally:
        await other.aclose()


async def until(predicate: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll an async ``predicate`` (a hang guard of 30 s, not a timing check)."""
    for _ in range(3000):
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
