"""Workers whose role may not create anything run on tables ``migrate_postgres`` made with a role that may.

Against a real PostgreSQL cluster (``postgres_server``). Asserted: ``migrate_postgres`` creates every
component's tables at the package's versions (and does nothing more a second time); a role with only
``USAGE`` on the schema and ``SELECT, INSERT, UPDATE, DELETE`` on its tables pauses, resumes on another
worker, refuses a replay and keeps sessions; on tables nobody made, such a worker's first operation is a
clear error naming ``migrate_postgres`` and creates nothing, and the same objects work once the tables exist.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from agent_framework import AgentSession
from joint_support import until_a_backend_waits

from agent_framework_functional import (
    ContinuationAuthorityError,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    PostgresSessionStore,
    RunContext,
    migrate_postgres,
    workflow,
)
from agent_framework_functional._durable.postgres_migrate import COMPONENTS

pytestmark = pytest.mark.slow

LATEST = {component: len(migrations) for component, migrations in COMPONENTS.items()}


@workflow(name="roles_review")
async def _review(topic: str, ctx: RunContext) -> str:
    answer = await ctx.request_info({"draft": topic}, response_type=str)
    return f"{topic}: {answer}"


def _worker_role(url: str, schema: str) -> str:
    """A new login role with DML rights on ``schema``'s tables (when they exist) and nothing else; its URL."""
    role = f"worker_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")  # pyright: ignore[reportArgumentType]
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
        if exists:
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")  # pyright: ignore[reportArgumentType]
            conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}")  # pyright: ignore[reportArgumentType]
    assert url.startswith("postgresql://postgres@")
    return url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)


def _versions(url: str, schema: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT component, version FROM {schema}.schema_version").fetchall()  # pyright: ignore[reportArgumentType]
    return {str(component): int(version) for component, version in rows}


class _Worker:
    def __init__(self, url: str, schema: str) -> None:
        self.store = PostgresContinuationStore(url, schema=schema)
        self.storage = PostgresCheckpointStorage(url, schema=schema)

    def build(self) -> Any:
        return _review.build(checkpoint_storage=self.storage, continuation_store=self.store)

    async def aclose(self) -> None:
        await self.store.aclose()
        await self.storage.aclose()


async def test_dml_only_workers_run_on_tables_migrate_postgres_made(postgres_server: str) -> None:
    schema = f"roles_{uuid.uuid4().hex[:12]}"
    assert await migrate_postgres(postgres_server, schema=schema) == LATEST
    assert await migrate_postgres(postgres_server, schema=schema) == LATEST  # again: nothing to do
    assert _versions(postgres_server, schema) == LATEST
    url = _worker_role(postgres_server, schema)
    one, two = _Worker(url, schema), _Worker(url, schema)
    sessions = PostgresSessionStore(url, schema=schema)
    try:
        paused = await one.build().run("x")
        request_id = paused.get_request_info_events()[0].request_id
        done = await two.build().run(responses={request_id: "ok"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == ["x: ok"]
        with pytest.raises(ContinuationAuthorityError):
            await one.build().run(responses={request_id: "again"}, continuation_token=paused.continuation_token)
        await sessions.set("conversation:c1", AgentSession(session_id="conversation:c1"))
        found = await sessions.get("conversation:c1")
        assert found is not None and found.session_id == "conversation:c1"
        assert await sessions.purge_expired() == 0  # planned for its values: SET LOCAL, on a DML-only role too
    finally:
        await one.aclose()
        await two.aclose()
        await sessions.aclose()


async def test_a_worker_that_may_not_create_missing_tables_is_told_to_run_migrate_postgres(
    postgres_server: str,
) -> None:
    schema = f"roles_{uuid.uuid4().hex[:12]}"
    url = _worker_role(postgres_server, schema)  # no schema yet: the role may not create it
    worker = _Worker(url, schema)
    try:
        with pytest.raises(RuntimeError, match=r"may not create them .*migrate_postgres\(url, schema=\.\.\.\)"):
            await worker.build().run("x")
        with psycopg.connect(postgres_server) as conn:
            assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None
        await migrate_postgres(postgres_server, schema=schema)
        role = url.split("//", 1)[1].split("@", 1)[0]
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")  # pyright: ignore[reportArgumentType]
            conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}")  # pyright: ignore[reportArgumentType]
        paused = await worker.build().run("y")  # the same objects, now that the tables exist
        assert paused.continuation_token is not None
    finally:
        await worker.aclose()


async def test_migrate_postgres_runs_as_the_owner_of_a_schema_a_dba_made(postgres_server: str) -> None:
    # Regression: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the schema exists.
    schema = f"roles_{uuid.uuid4().hex[:12]}"
    url = _worker_role(postgres_server, schema)
    owner = url.split("//", 1)[1].split("@", 1)[0]
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {owner}")  # pyright: ignore[reportArgumentType]
    assert await migrate_postgres(url, schema=schema) == LATEST
    assert _versions(postgres_server, schema) == LATEST


def _migrating(url: str, schema: str) -> psycopg.Connection[Any]:
    """A migration in progress: the schema's advisory lock held, checkpoints at the latest version, not committed."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {schema}.schema_version SET version = version - 1 WHERE component = 'checkpoints'"  # pyright: ignore[reportArgumentType]
        )
    migrator = psycopg.connect(url)
    migrator.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"aff:{schema}",))
    migrator.execute(f"UPDATE {schema}.schema_version SET version = version + 1 WHERE component = 'checkpoints'")  # pyright: ignore[reportArgumentType]
    return migrator


@pytest.mark.parametrize("role", ["dml_only", "owner_repeatable_read"])
async def test_a_worker_that_waited_for_a_migration_uses_the_tables_it_made(postgres_server: str, role: str) -> None:
    # Regression: after the lock a worker ran DDL before reading the version again, so a DML-only worker
    # failed, and under REPEATABLE READ (its snapshot taken before the wait) an owner failed to serialize.
    schema = f"roles_{uuid.uuid4().hex[:12]}"
    await migrate_postgres(postgres_server, schema=schema)
    if role == "dml_only":
        url = _worker_role(postgres_server, schema)
    else:
        url = f"{postgres_server}?options=-c%20default_transaction_isolation%3Drepeatable%5C%20read"
    migrator = _migrating(postgres_server, schema)
    storage = PostgresCheckpointStorage(url, schema=schema)
    try:
        listing = asyncio.create_task(storage.list_checkpoints(workflow_name="roles_review"))
        await until_a_backend_waits(postgres_server, "wait_event = 'advisory'")  # the worker read an older version
        migrator.commit()
        assert await asyncio.wait_for(listing, 10) == []
        assert _versions(postgres_server, schema)["checkpoints"] == LATEST["checkpoints"]
    finally:
        migrator.close()
        await storage.aclose()


async def test_a_role_without_grants_is_told_what_to_grant_and_migrate_postgres_what_role_to_use(
    postgres_server: str,
) -> None:
    schema = f"roles_{uuid.uuid4().hex[:12]}"
    url = _worker_role(postgres_server, schema)  # no schema yet: no grants either
    with pytest.raises(RuntimeError, match="Run it with a role that has CREATE on the database, or one that owns"):
        await migrate_postgres(url, schema=schema)  # not the circular "run migrate_postgres"
    await migrate_postgres(postgres_server, schema=schema)  # the tables exist; this role still has no rights there
    worker = _Worker(url, schema)
    try:
        with pytest.raises(RuntimeError, match=r"may not read .*schema_version .*Grant it USAGE on the schema"):
            await worker.build().run("x")
    finally:
        await worker.aclose()
