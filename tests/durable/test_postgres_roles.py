"""Workers whose role may not create anything run on tables ``migrate_postgres`` made with a role that may.

Against a real PostgreSQL cluster (``postgres_server``). Asserted: ``migrate_postgres`` creates every
component's tables (and does nothing more a second time); a role with only ``USAGE`` on the schema and
``SELECT, INSERT, UPDATE, DELETE`` on its tables pauses, resumes on another worker, refuses a replay and
keeps sessions; on tables nobody made, such a worker's first operation is a clear error naming ``setup()``
and ``migrate_postgres`` and creates nothing, and the same objects work once the tables exist.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from agent_framework import AgentSession

from agent_framework_functional import (
    ContinuationAuthorityError,
    DurableStoreError,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    PostgresSessionStore,
    RunContext,
    migrate_postgres,
    workflow,
)

pytestmark = pytest.mark.slow

LATEST = {"continuations": 1, "checkpoints": 1, "sessions": 1}
TABLES = ["continuations", "delta_checkpoints", "delta_segments", "session_records"]


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


def _tables(url: str, schema: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)).fetchall()
    return [str(row[0]) for row in rows]


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
    assert _tables(postgres_server, schema) == TABLES
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


async def test_a_worker_on_missing_tables_is_told_to_run_setup_or_migrate_postgres(
    postgres_server: str,
) -> None:
    schema = f"roles_{uuid.uuid4().hex[:12]}"
    url = _worker_role(postgres_server, schema)  # no schema yet: the role may not create it
    worker = _Worker(url, schema)
    try:
        with pytest.raises(DurableStoreError, match=r"does not exist .*setup\(\)` or `await migrate_postgres\(url"):
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
    assert _tables(postgres_server, schema) == TABLES


async def test_a_role_that_may_not_create_the_tables_gets_postgresql_s_refusal(postgres_server: str) -> None:
    schema = f"roles_{uuid.uuid4().hex[:12]}"
    url = _worker_role(postgres_server, schema)  # no schema yet, and no CREATE on the database
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        await migrate_postgres(url, schema=schema)
    assert _tables(postgres_server, schema) == []
