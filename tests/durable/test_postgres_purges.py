"""The Postgres purges: housekeeping that never fails a write, and never deletes what a save just extended.

Against a real PostgreSQL cluster (``postgres_server``). Asserted: a checkpoint purge or a record purge
that cannot get a row lock within ``lock_timeout`` is logged and skipped, and the pause or claim it
preceded goes through (token issued, record written); a purge that waited for a segment a save was
extending keeps the segment once the save commits (PostgreSQL re-checks ``expires_at`` on the row's new
version); an automatic session purge that fails leaves the session written; and a run's held step
checkpoints written in one statement of many saves are not prepared.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import psycopg
import pytest
from agent_framework import AgentSession
from joint_support import JointWorker, count_rows, until_a_backend_waits
from postgres_server import new_schema

from agent_framework_functional import PostgresCheckpointStorage, PostgresSessionStore, RunContext, step, workflow
from agent_framework_functional._durable.postgres_rows import PREPARED_PARAMS_MAX

pytestmark = pytest.mark.slow


def _with_lock_timeout(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}options=-c%20lock_timeout%3D300"


def _locked(url: str, statement: str) -> psycopg.Connection[Any]:
    """A connection whose open transaction holds the row locks ``statement`` takes."""
    holder = psycopg.connect(url)
    holder.execute(statement)  # pyright: ignore[reportArgumentType]
    return holder


async def test_a_checkpoint_purge_that_cannot_lock_a_row_does_not_fail_the_pause(
    postgres_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    schema = new_schema(postgres_server, "pu")
    warm = JointWorker.on(postgres_server, schema)
    await warm.ready()
    await warm.aclose()
    with psycopg.connect(postgres_server, autocommit=True) as conn:  # an expired checkpoint, locked elsewhere
        conn.execute(
            f'INSERT INTO "{schema}".delta_segments VALUES (-1, %s, 0, 0, 1, %s, NULL, NULL)',  # pyright: ignore[reportArgumentType]
            ("w", time.time() - 60),
        )
    holder = _locked(postgres_server, f'SELECT 1 FROM "{schema}".delta_segments WHERE segment_id = -1 FOR UPDATE')
    worker = JointWorker.on(_with_lock_timeout(postgres_server), schema)
    try:
        await worker.ready()
        with caplog.at_level(logging.WARNING):
            paused = await worker.build().run("x")  # its first write: the joint pause, which purges first
        assert paused.continuation_token is not None
        assert await count_rows(postgres_server, schema, "continuations") == 1
        assert "the purge of expired rows failed and was skipped" in caplog.text and "lock" in caplog.text
        assert await count_rows(postgres_server, schema, "delta_segments WHERE segment_id = -1") == 1
    finally:
        holder.rollback()
        holder.close()
        await worker.aclose()


async def test_a_record_purge_that_cannot_lock_a_row_does_not_fail_the_claim(
    postgres_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    schema = new_schema(postgres_server, "pu")
    one = JointWorker.on(postgres_server, schema)
    try:
        await one.ready()
        paused = await one.build().run("x")
    finally:
        await one.aclose()
    with psycopg.connect(postgres_server, autocommit=True) as conn:  # a record long past retention
        conn.execute(
            f'INSERT INTO "{schema}".continuations SELECT md5(random()::text), workflow_name, signature_hash, '  # pyright: ignore[reportArgumentType]
            "checkpoint_id, pending_request_ids, 0, 1, 'abandoned', 1, response_types, claimed_by "
            f'FROM "{schema}".continuations LIMIT 1'
        )
    holder = _locked(postgres_server, f'SELECT 1 FROM "{schema}".continuations WHERE updated_at = 1 FOR UPDATE')
    two = JointWorker.on(_with_lock_timeout(postgres_server), schema)
    try:
        request_id = paused.get_request_info_events()[0].request_id
        with caplog.at_level(logging.WARNING):  # the answering store's first write (the claim) purges first
            done = await two.build().run(responses={request_id: "a"}, continuation_token=paused.continuation_token)
        assert done.continuation_token is not None  # answered: the run goes on to its second request
        assert "the purge of expired rows failed and was skipped" in caplog.text
    finally:
        holder.rollback()
        holder.close()
        await two.aclose()


async def test_a_purge_keeps_a_segment_a_save_extended_while_it_waited(postgres_server: str) -> None:
    schema = new_schema(postgres_server, "pu")
    worker = JointWorker.on(postgres_server, schema)
    try:
        await worker.ready()
    finally:
        await worker.aclose()
    now = time.time()
    with psycopg.connect(postgres_server, autocommit=True) as conn:  # a segment that expired 10 s ago
        conn.execute(
            f"INSERT INTO \"{schema}\".delta_segments VALUES (4242, 'w', 1, 0, 1, %s, NULL, NULL)", (now - 10,)
        )  # pyright: ignore[reportArgumentType]
    saver = _locked(  # a save continuing it, not committed yet: the segment's expiry moves an hour on
        postgres_server, f'UPDATE "{schema}".delta_segments SET expires_at = {now + 3600} WHERE segment_id = 4242'
    )

    def purge() -> None:
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute("SET plan_cache_mode = force_generic_plan")  # as the package's pools
            conn.execute(f'SELECT "{schema}".purge_checkpoints(%s)', (now,))  # pyright: ignore[reportArgumentType]

    purging = threading.Thread(target=purge)
    purging.start()
    await until_a_backend_waits(postgres_server)  # the purge, on the saver's row
    saver.commit()
    saver.close()
    purging.join(timeout=10)
    assert not purging.is_alive()
    assert await count_rows(postgres_server, schema, "delta_segments WHERE segment_id = 4242") == 1


async def test_an_automatic_session_purge_that_cannot_lock_a_row_does_not_fail_the_write(
    postgres_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    schema = new_schema(postgres_server, "pu")
    first = PostgresSessionStore(postgres_server, schema=schema)
    await first.set("conversation:a", AgentSession(session_id="conversation:a"))  # its table
    await first.aclose()
    with psycopg.connect(postgres_server, autocommit=True) as conn:  # an expired session row
        conn.execute(f"INSERT INTO \"{schema}\".session_records VALUES ('old', 'g', '{{}}', 1)")  # pyright: ignore[reportArgumentType]
    holder = _locked(postgres_server, f"SELECT 1 FROM \"{schema}\".session_records WHERE key = 'old' FOR UPDATE")
    sessions = PostgresSessionStore(_with_lock_timeout(postgres_server), schema=schema)
    try:
        with caplog.at_level(logging.WARNING):  # a new store's first write purges after it
            await sessions.set("conversation:b", AgentSession(session_id="conversation:b"))
        assert "the purge of expired rows failed and was skipped" in caplog.text
        assert await sessions.get("conversation:b") is not None
    finally:
        holder.rollback()
        holder.close()
        await sessions.aclose()


@step
async def _add(n: int) -> int:
    return n + 1


@workflow(name="batches")
async def _batches(count: int, ctx: RunContext) -> int:
    total = 0
    for n in range(count):  # held, then written by the storage's timer in one statement of `count` saves
        total += await _add(n)
    await asyncio.sleep(0.4)
    return int(await ctx.request_info({"total": total}, response_type=str) == "ok")


async def test_a_statement_of_many_held_saves_is_not_prepared(
    postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = PostgresCheckpointStorage(postgres_server, schema=new_schema(postgres_server, "pu"))
    saves = PREPARED_PARAMS_MAX // 13 + 2
    try:
        sent: list[str] = []
        execute = psycopg.AsyncConnection.execute

        async def recorded(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(query.decode() if isinstance(query, bytes) else str(query))
            return await execute(self, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncConnection, "execute", recorded)
        paused = await _batches.build(checkpoint_storage=storage).run(saves)
        monkeypatch.undo()
        assert paused.get_request_info_events()
        assert max(text.count("save_delta_checkpoint(") for text in sent) == saves  # the batch was one statement

        async def prepared(conn: psycopg.AsyncConnection[Any]) -> list[str]:
            rows = await (await conn.execute("SELECT statement FROM pg_prepared_statements", prepare=False)).fetchall()
            return [str(row[0]) for row in rows]

        statements = await storage.database.run("probe", prepared)  # the pool's one connection, which wrote them
        assert any("save_delta_checkpoint" in text for text in statements)  # a single save's is prepared
        assert max(text.count("save_delta_checkpoint(") for text in statements) <= PREPARED_PARAMS_MAX // 13
    finally:
        await storage.aclose()
