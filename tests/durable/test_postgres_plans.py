"""The package's pools plan each statement once, and keep their index scans on large tables.

The pools ``PostgresPool`` builds from a connection string prepare every statement on first use
(``prepare_threshold=0``) and plan generically (``plan_cache_mode = force_generic_plan``), so a new
connection is at its long-run speed from its second use on. A generic plan cannot fold a condition on a
parameter's value, so each statement has to be right for any value: checked here on tables of 40,000
rows with PostgreSQL's own ``auto_explain`` (``log_analyze``: only nodes that ran count). A pause, an
answer on another worker and the finished run's release scan no whole table (also with every filler row
of one other workflow, so that a generic plan would take a workflow's name for half the table); listing
a workflow's checkpoints is planned for the name it asks for, and clearing a session group reads no
whole table either; the purges, planned for their values (``execute_custom_plan``), use the
``expires_at`` indexes when few rows are due.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_framework import AgentSession
from postgres_server import new_schema

from agent_framework_functional import (
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    PostgresSessionStore,
    RunContext,
    workflow,
)

pytestmark = pytest.mark.slow

ROWS = 40_000
TABLES = ("continuations", "delta_segments", "delta_checkpoints", "session_records")
MARK = "plans: the tables are full"


@workflow(name="plans_review", checkpoint_retention=0)  # the finish deletes its chain: a hot-path statement here
async def _review(topic: str, ctx: RunContext) -> str:
    answer = await ctx.request_info({"draft": topic}, response_type=str)
    return f"{topic}: {answer}"


def _explain_everything(url: str) -> None:
    """Have every new session log the plan of every statement, nested ones too, with what ran."""
    settings = {
        "session_preload_libraries": "auto_explain",
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_analyze": "on",
        "log_min_messages": "log",
    }
    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(f"ALTER DATABASE postgres SET {name} = '{value}'")  # pyright: ignore[reportArgumentType]


def _fill(url: str, schema: str) -> None:
    """``ROWS`` rows in each table, all of one other workflow (``main``) and none due for a purge; statistics."""
    far = 4e10
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in (
            f"INSERT INTO {schema}.continuations SELECT md5(i::text), 'main', 's', i::text, '[]', {far}, {far} + i, "
            f"'issued', {far}, NULL, NULL FROM generate_series(1, {ROWS}) AS i",
            f"INSERT INTO {schema}.delta_segments SELECT -i, 'main', 1, 0, 1, {far} + i, NULL, NULL "
            f"FROM generate_series(1, {ROWS}) AS i",
            f"INSERT INTO {schema}.delta_checkpoints SELECT -i, 0, {far} + i, 0, gen_random_uuid(), NULL, 1, true, "
            f"'main', '\\x00' FROM generate_series(1, {ROWS}) AS i",
            f"INSERT INTO {schema}.session_records SELECT md5(i::text), 'g' || (i % 2), '{{}}', {far} + i "
            f"FROM generate_series(1, {ROWS}) AS i",
        ):
            conn.execute(statement)  # pyright: ignore[reportArgumentType]
        for table in TABLES:
            conn.execute(f"ANALYZE {schema}.{table}")  # pyright: ignore[reportArgumentType]
        conn.execute(f"SELECT '{MARK}'")  # pyright: ignore[reportArgumentType]


def _scans(log: str) -> list[str]:
    """The whole-table scans of our tables that ran (``never executed`` nodes left out), as logged."""
    scans = re.finditer(r"Seq Scan on (\w+)[^\n]*", log)
    return [scan[0] for scan in scans if scan[1] in TABLES and "never executed" not in scan[0]]


async def _cycle(pausing: tuple[Any, Any], answering: tuple[Any, Any]) -> None:
    store, storage = pausing
    paused = await _review.build(checkpoint_storage=storage, continuation_store=store).run("plans")
    request_id = paused.get_request_info_events()[0].request_id
    store, storage = answering
    resumed = _review.build(checkpoint_storage=storage, continuation_store=store)
    done = await resumed.run(responses={request_id: "ok"}, continuation_token=paused.continuation_token)
    assert done.get_outputs() == ["plans: ok"]


async def test_owned_pools_prepare_on_first_use_and_plan_generically(postgres_server: str) -> None:
    schema = new_schema(postgres_server, "plans")
    store = PostgresContinuationStore(postgres_server, schema=schema)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    try:
        await _cycle((store, storage), (store, storage))

        async def probe(conn: psycopg.AsyncConnection[Any]) -> tuple[Any, ...]:
            await conn.execute("SELECT %s::int + 1", (1,))  # once, on whichever pooled connection this is
            mode = await (await conn.execute("SHOW plan_cache_mode", prepare=False)).fetchone()
            prepared = await (
                await conn.execute("SELECT count(*) FROM pg_prepared_statements", prepare=False)
            ).fetchone()
            assert mode is not None and prepared is not None
            return conn.prepare_threshold, mode[0], prepared[0]

        for pool in (store.database, storage.database):
            threshold, mode, prepared = await pool.run("probe", probe)
            assert (threshold, mode) == (0, "force_generic_plan")
            assert prepared >= 1  # statements run once are prepared already (psycopg's default waits for 5)
    finally:
        await store.aclose()
        await storage.aclose()


async def test_a_pool_the_caller_passes_keeps_its_settings(postgres_server: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(postgres_server, min_size=1, max_size=2, open=False, kwargs={"autocommit": True})
    await pool.open()
    store = PostgresContinuationStore(pool, schema=new_schema(postgres_server, "plans"))
    try:
        await store.purge_expired()  # the schema exists now; the purge planned for its values on this pool too

        async def probe(conn: psycopg.AsyncConnection[Any]) -> tuple[Any, ...]:
            mode = await (await conn.execute("SHOW plan_cache_mode")).fetchone()
            assert mode is not None
            return conn.prepare_threshold, mode[0]

        assert await store.database.run("probe", probe) == (5, "auto")
    finally:
        await store.aclose()
        await pool.close()


async def test_large_tables_keep_index_scans_on_the_hot_path_and_in_purges(postgres_servers: Any) -> None:
    server = postgres_servers()
    _explain_everything(server.url)
    schema = new_schema(server.url, "plans")
    workers = [
        (PostgresContinuationStore(server.url, schema=schema), PostgresCheckpointStorage(server.url, schema=schema))
        for _ in range(2)
    ]
    sessions = PostgresSessionStore(server.url, schema=schema)
    log_path = Path(server.root) / "server.log"
    try:
        await _cycle(workers[0], workers[1])  # the tables exist now
        await _cycle(workers[1], workers[0])  # each storage's first pause purged: none due for 10 minutes
        await sessions.set("conversation:a", AgentSession(session_id="conversation:a"))  # its table and first purge
        _fill(server.url, schema)
        for _ in range(3):
            await _cycle(workers[0], workers[1])
            await _cycle(workers[1], workers[1])
        hot = log_path.read_text(errors="replace").split(MARK)[-1]
        assert "free_delta_segments" in hot and "delete_checkpoints" in hot
        assert _scans(hot) == []

        purging = PostgresCheckpointStorage(server.url, schema=schema, ttl=3600)  # a first save purges
        store = workers[0][0]
        try:
            await _cycle((store, purging), workers[1])
            assert await store.purge_expired() == 0
            await _review.build(checkpoint_storage=purging, continuation_store=store).run("listed")
            listed = await purging.list_checkpoints(workflow_name="plans_review")  # a name few rows have
            assert listed and {checkpoint.workflow_name for checkpoint in listed} == {"plans_review"}
            assert await sessions.records.remove_group("snapshots") == 0  # a group other than the one most rows have
            assert await sessions.get("conversation:a") is not None
        finally:
            await purging.aclose()
        purges = log_path.read_text(errors="replace").split(MARK)[-1][len(hot) :]
        assert "purge_checkpoints" in purges and "updated_at <" in purges and "workflow_name = " in purges
        assert "WHERE grp = " in purges
        # delta_segments has no expires_at index: the checkpoint purge reads that table whole, as before.
        assert [scan for scan in _scans(purges) if "delta_segments" not in scan] == []
    finally:
        for store, storage in workers:
            await store.aclose()
            await storage.aclose()
        await sessions.aclose()


async def test_components_take_the_caller_s_pool_by_keyword_and_set_up_explicitly(postgres_server: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    from agent_framework_functional import PostgresSessionStore

    schema = f"plans_{uuid.uuid4().hex[:12]}"
    pool = AsyncConnectionPool(postgres_server, min_size=1, max_size=2, open=False, kwargs={"autocommit": True})
    await pool.open()
    components = (
        PostgresContinuationStore(pool=pool, schema=schema),
        PostgresCheckpointStorage(pool=pool, schema=schema),
        PostgresSessionStore(pool=pool, schema=schema),
    )
    try:
        for component in components:
            await component.setup()
        async with pool.connection() as conn:
            rows = await (
                await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,))
            ).fetchall()
        assert [row[0] for row in rows] == [
            "continuations",
            "delta_checkpoints",
            "delta_segments",
            "session_records",
        ]
        for component in components:
            await component.aclose()
        assert not pool.closed  # the caller's pool stays open
        with pytest.raises(TypeError, match="exactly one"):
            PostgresContinuationStore(postgres_server, pool=pool)
        with pytest.raises(TypeError, match="exactly one"):
            PostgresCheckpointStorage()
    finally:
        await pool.close()
