"""Postgres in production shape: processes that share only the database, a server SIGKILL, outages, the schema.

Every test runs against a real PostgreSQL cluster (``postgres_server`` for the session, or a private one
from ``postgres_servers`` that the test may SIGKILL and restart on the same data folder and port).
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_framework import WorkflowCheckpoint
from durable_support import (
    FakeClock,
    StoreSpec,
    close_store,
    effect_lines,
    finish,
    new_record,
    open_checkpoint_storage,
    spawn_worker,
    start_race,
    wait_for,
    write_json,
)
from durable_workflows import approval
from postgres_server import PostgresServer, new_schema
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agent_framework_functional import (
    DurableStoreError,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    PostgresSessionStore,
    continuation_token_hash,
)

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
MANY_WORKER = HERE / "durable_many_worker.py"


async def _pause_many(spec: StoreSpec, checkpoints: str, count: int) -> list[dict[str, Any]]:
    store, storage = spec.open(), open_checkpoint_storage(checkpoints)
    try:
        pauses: list[dict[str, Any]] = []
        for index in range(count):
            paused = await approval.build(checkpoint_storage=storage, continuation_store=store).run(f"topic {index}")
            assert paused.continuation_token is not None
            pauses.append(
                {"token": paused.continuation_token, "request_id": paused.get_request_info_events()[0].request_id}
            )
        return pauses
    finally:
        await close_store(store)
        await close_store(storage)


def _effect_counts(effects_file: Path) -> collections.Counter[int]:
    return collections.Counter(int(line.split()[-1].removeprefix("ok-")) for line in effect_lines(effects_file))


async def test_eight_processes_that_share_only_postgres_resume_once(
    postgres_server: str, tmp_path: Path, effects_file: Path
) -> None:
    schema = new_schema(postgres_server)
    spec = StoreSpec("postgres", postgres_server, namespace=schema)
    checkpoints = f"{postgres_server}#{schema}"
    state = tmp_path / "state.json"
    write_json(state, {"pauses": await _pause_many(spec, checkpoints, 3)})
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    workers = [
        spawn_worker(spec.to_json(), checkpoints, str(state), str(barrier), str(i), "3", worker=MANY_WORKER)
        for i in range(8)
    ]
    start_race(barrier, 8, timeout=600)
    outcomes = finish(workers, timeout=300)
    assert all(not outcome["errors"] for outcome in outcomes)
    resumed = sorted(index for outcome in outcomes for index in outcome["resumed"])
    assert resumed == [0, 1, 2]  # each pause resumed by exactly one of the eight processes
    assert sum(len(outcome["rejected"]) for outcome in outcomes) == 8 * 3 - 3
    assert _effect_counts(effects_file) == {0: 1, 1: 1, 2: 1}


async def test_sigkill_of_postgres_during_200_racing_resumes_runs_nothing_twice_and_loses_no_pause(
    postgres_servers: Callable[[], PostgresServer], tmp_path: Path, effects_file: Path
) -> None:
    server = postgres_servers()
    schema = new_schema(server.url)
    spec = StoreSpec("postgres", server.url, namespace=schema)
    checkpoints = f"{server.url}#{schema}"
    pauses = await _pause_many(spec, checkpoints, 200)
    state = tmp_path / "state.json"
    write_json(state, {"pauses": pauses})
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    workers = [
        spawn_worker(spec.to_json(), checkpoints, str(state), str(barrier), str(i), "8", worker=MANY_WORKER)
        for i in range(4)
    ]
    start_race(barrier, 4, timeout=600)
    wait_for(lambda: len(effect_lines(effects_file)) >= 30, timeout=300, what="30 resumes to reach user code")
    server.kill()  # mid-race: in-flight claims, checkpoint reads and saves die with their connections
    effects_at_kill = len(effect_lines(effects_file))
    await asyncio.sleep(1.0)
    server.start()  # same data folder and port: PostgreSQL recovers from its write-ahead log
    outcomes = finish(workers, timeout=600)

    counts = _effect_counts(effects_file)
    assert max(counts.values()) == 1  # nothing ran twice
    assert effects_at_kill < 200 and sum(counts.values()) > effects_at_kill  # the race went on after the restart
    # An operation in flight at the kill fails with a clear error naming the database; one that started
    # while the server was down waited for it (pool_timeout), and pooled connections the kill closed were
    # replaced before use, so the race may also come through without any error.
    errors = [message for outcome in outcomes for message in outcome["errors"].values()]
    assert all("PostgreSQL" in message for message in errors), errors

    # No pause is lost: each one not yet resumed is either still issued (its token resumes it now) or
    # claimed by a resume the crash cut short (its owner restores the pause's checkpoint), exactly once.
    store, storage = spec.open(), open_checkpoint_storage(checkpoints)
    try:
        for index, pause in enumerate(pauses):
            record = await store.get(continuation_token_hash(pause["token"]))
            assert record is not None and record.status in ("issued", "claimed"), index
            if counts[index]:
                assert record.status == "claimed"
                continue
            wf = approval.build(checkpoint_storage=storage, continuation_store=store)
            answer = {pause["request_id"]: f"ok-{index}"}
            if record.status == "issued":
                done = await wf.run(responses=answer, continuation_token=pause["token"])
            else:
                done = await wf.run(checkpoint_id=record.checkpoint_id, responses=answer)
            assert done.get_outputs() == [f"shipped: draft about topic {index} (ok-{index})"]
    finally:
        await close_store(store)
        await close_store(storage)
    assert _effect_counts(effects_file) == dict.fromkeys(range(200), 1)


async def test_a_clear_error_while_postgres_is_down_and_the_same_store_works_after_a_restart(
    postgres_servers: Callable[[], PostgresServer],
) -> None:
    server = postgres_servers()
    store = PostgresContinuationStore(server.url, schema=new_schema(server.url), pool_timeout=1.0)
    # The checkpoint below holds no pending request: only a storage that waits for the disk on every save
    # keeps it through the SIGKILL (the default waits for pauses only: tests/durable/test_postgres_commit.py).
    storage = PostgresCheckpointStorage(
        server.url, schema=new_schema(server.url), pool_timeout=1.0, synchronous_steps=True
    )
    try:
        record = new_record(store)
        await store.save(record)
        checkpoint = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="g", state={"n": 1})
        await storage.save(checkpoint)  # the storage keeps this connection for its next operation
        server.kill()
        with pytest.raises(psycopg.OperationalError, match=r"PostgresContinuationStore: .*PostgreSQL") as caught:
            await store.claim(record.token_hash)
        assert isinstance(caught.value, DurableStoreError)  # a store failure, for callers that catch the group
        with pytest.raises(psycopg.OperationalError, match=r"PostgresCheckpointStorage: .*PostgreSQL"):
            await storage.load(checkpoint.checkpoint_id)  # the kept connection is dead: not used
        server.start()
        wait_for(lambda: server.postmaster_pid() is not None, what="the restarted server")
        await _until_reachable(store)  # the pool reconnects by itself, with its own backoff (slower under load)
        assert await store.claim(record.token_hash) is True  # the pool replaced its broken connections
        assert await store.claim(record.token_hash) is False
        deadline = asyncio.get_running_loop().time() + 60.0
        while True:  # the storage's own pool reconnects too; its kept connection was replaced
            try:
                assert (await storage.load(checkpoint.checkpoint_id)).state == {"n": 1}
                break
            except psycopg.OperationalError:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.2)
    finally:
        await store.aclose()
        await storage.aclose()


async def _until_reachable(store: PostgresContinuationStore, timeout: float = 60.0) -> None:
    """Read through ``store`` until PostgreSQL answers again (a hang guard, not a timing check)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await store.get("0" * 64)
            return
        except psycopg.OperationalError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_setup_from_racing_workers_creates_the_tables_once(postgres_server: str) -> None:
    schema = f"t_{uuid.uuid4().hex}"
    stores = [PostgresContinuationStore(postgres_server, schema=schema) for _ in range(8)]
    storages = [PostgresCheckpointStorage(postgres_server, schema=schema) for _ in range(4)]
    sessions = PostgresSessionStore(postgres_server, schema=schema)
    try:
        await asyncio.gather(*(component.setup() for component in (*stores, *storages, sessions)))
        await stores[0].setup()  # again: nothing to do
        records = [new_record(store) for store in stores]
        await asyncio.gather(
            *(store.save(record) for store, record in zip(stores, records, strict=True)),
            *(storage.list_checkpoint_ids(workflow_name="approval") for storage in storages),
        )
        assert [await stores[0].get(record.token_hash) for record in records] == records
    finally:
        for closable in (*stores, *storages, sessions):
            await closable.aclose()


async def test_a_component_whose_tables_were_not_set_up_says_to_call_setup(postgres_server: str) -> None:
    schema = f"t_{uuid.uuid4().hex}"
    store = PostgresContinuationStore(postgres_server, schema=schema)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    sessions = PostgresSessionStore(postgres_server, schema=schema)
    try:
        for attempt in (store.get("0" * 64), storage.load(str(uuid.uuid4())), sessions.get("conversation:c1")):
            with pytest.raises(DurableStoreError, match=r"does not exist .*\.setup\(\)` or `await migrate_postgres"):
                await attempt
        with psycopg.connect(postgres_server) as conn:  # nothing was created on first use
            assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None
        await store.setup()
        await storage.setup()
        await sessions.setup()
        assert await store.get("0" * 64) is None  # the same objects, now that the tables exist
        assert await storage.list_checkpoint_ids(workflow_name="approval") == []
    finally:
        for closable in (store, storage, sessions):
            await closable.aclose()


async def test_purge_deletes_only_records_past_retention(postgres_server: str, clock: FakeClock) -> None:
    store = PostgresContinuationStore(
        postgres_server, schema=new_schema(postgres_server), ttl=10.0, retention=100.0, clock=clock, purge_interval=None
    )
    try:
        old = new_record(store)
        await store.save(old)
        claimed = new_record(store)
        await store.save(claimed)
        assert await store.claim(claimed.token_hash)
        clock.advance(50.0)
        fresh = new_record(store)
        await store.save(fresh)
        assert await store.purge_expired() == 0
        clock.advance(70.0)  # old expired 110 s ago, claimed finished 120 s ago (> retention); fresh 60 s ago
        assert await store.purge_expired() == 2
        assert await store.get(old.token_hash) is None and await store.get(claimed.token_hash) is None
        assert await store.get(fresh.token_hash) is not None
    finally:
        await store.aclose()


async def test_a_write_purges_once_per_interval(postgres_server: str, clock: FakeClock) -> None:
    store = PostgresContinuationStore(
        postgres_server, schema=new_schema(postgres_server), ttl=10.0, retention=10.0, clock=clock, purge_interval=600.0
    )
    try:
        old = new_record(store)
        await store.save(old)  # the first write purges (nothing yet)
        clock.advance(30.0)
        await store.save(new_record(store))  # within the interval: no purge
        assert await store.get(old.token_hash) is not None
        clock.advance(600.0)
        await store.save(new_record(store))  # past the interval: purged first
        assert await store.get(old.token_hash) is None
    finally:
        await store.aclose()


async def test_checkpoints_expire_after_ttl_and_a_later_save_deletes_them(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema, ttl=1.0)
    store = PostgresContinuationStore(postgres_server, schema=schema)
    try:
        paused = await approval.build(checkpoint_storage=storage, continuation_store=store).run("tea")
        ids = await storage.list_checkpoint_ids(workflow_name="approval")
        assert ids
        await asyncio.sleep(1.2)
        assert await storage.list_checkpoint_ids(workflow_name="approval") == []
        with pytest.raises(Exception, match="No checkpoint found"):
            await storage.load(ids[0])
        assert paused.continuation_token is not None
        # Expired rows stay until a save purges them (the first save of a storage object purges).
        rows = f'SELECT count(checkpoint_id) FROM "{schema}".delta_checkpoints'
        with psycopg.connect(postgres_server) as conn:
            assert conn.execute(rows).fetchone() == (len(ids),)
        later = PostgresCheckpointStorage(postgres_server, schema=schema, ttl=1.0)
        try:
            await later.save(WorkflowCheckpoint(workflow_name="other", graph_signature_hash="h" * 64))
        finally:
            await later.aclose()
        with psycopg.connect(postgres_server) as conn:
            assert conn.execute(rows).fetchone() == (1,)
            segments = f"SELECT count(*) FROM \"{schema}\".delta_segments WHERE workflow_name = 'approval'"
            assert conn.execute(segments).fetchone() == (0,)  # the later save's: alone in its own
    finally:
        await storage.aclose()
        await store.aclose()


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="schema"):
        PostgresContinuationStore("postgresql://127.0.0.1:1/x", schema="Bad-Name")
    with pytest.raises(ValueError, match="schema"):
        PostgresCheckpointStorage("postgresql://127.0.0.1:1/x", schema="x; DROP TABLE y")
    with pytest.raises(ValueError, match="a PostgreSQL system schema"):  # PostgreSQL refused it at first use
        PostgresSessionStore("postgresql://127.0.0.1:1/x", schema="pg_sessions")
    with pytest.raises(ValueError, match="a PostgreSQL system schema"):  # the superuser could write there
        PostgresContinuationStore("postgresql://127.0.0.1:1/x", schema="information_schema")
    with pytest.raises(TypeError, match=r"connection string \(str\) or a psycopg_pool"):
        PostgresContinuationStore(b"postgresql://127.0.0.1:1/x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"connection string \(str\) or a psycopg_pool"):
        PostgresSessionStore(pool="postgresql://127.0.0.1:1/x")  # type: ignore[arg-type]
    dict_rows = AsyncConnectionPool("postgresql://127.0.0.1:1/x", open=False, kwargs={"row_factory": dict_row})
    with pytest.raises(TypeError, match="reads rows as tuples"):  # it failed after the pause's commit
        PostgresCheckpointStorage(pool=dict_rows)
    with pytest.raises(ValueError, match="max_size"):
        PostgresContinuationStore("postgresql://127.0.0.1:1/x", max_size=0)
    with pytest.raises(ValueError, match="ttl"):
        PostgresCheckpointStorage("postgresql://127.0.0.1:1/x", ttl=0)
    with pytest.raises(TypeError, match="allowed_checkpoint_types"):
        PostgresCheckpointStorage("postgresql://127.0.0.1:1/x", allowed_checkpoint_types=[1])  # type: ignore[list-item]


async def test_a_closed_component_refuses_every_call(postgres_server: str) -> None:
    """After ``aclose()`` a call is refused: it used to open a new pool nobody closed (or report an outage)."""
    schema = new_schema(postgres_server)
    store = PostgresContinuationStore(postgres_server, schema=schema)
    await store.aclose()
    with pytest.raises(DurableStoreError, match=r"is closed \(aclose\(\) was called\)"):
        await store.get("anything")
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    await storage.list_checkpoint_ids(workflow_name="w")
    await storage.aclose()
    with pytest.raises(DurableStoreError, match="is closed"):
        await storage.list_checkpoint_ids(workflow_name="w")
