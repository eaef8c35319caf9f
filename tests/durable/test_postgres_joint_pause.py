"""A pause's record and checkpoint are written in one statement when the store and storage share a database.

Against a real PostgreSQL cluster (``postgres_server``). Asserted: one statement carries both, the
pause resumes on the same worker (its run's later saves continue the pause's segment) and on another;
a failed statement leaves the pause's checkpoint saved alone and no record; a save the storage refuses
is saved whole under the inserted record; a joint pause no record took is saved by the recorder's flush; the
statement purges expired checkpoints first when a purge is due, as the storage's own saves do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from joint_support import JointWorker, answer, count_rows, request
from postgres_server import new_schema

from agent_framework_functional import PostgresCheckpointStorage, PostgresContinuationStore
from agent_framework_functional._checkpoint_chain import RecordingCheckpointStorage
from agent_framework_functional._durable.postgres_store import PostgresJoint

pytestmark = pytest.mark.slow


async def test_a_pause_is_one_statement_and_resumes_on_either_worker(
    postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = new_schema(postgres_server, "p")
    one, two = JointWorker.on(postgres_server, schema), JointWorker.on(postgres_server, schema)
    sent: list[str] = []
    execute = psycopg.AsyncConnection.execute

    async def recorded(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(bytes(query).decode() if isinstance(query, bytes) else str(query))
        return await execute(self, query, *args, **kwargs)

    try:
        await one.ready()
        await two.ready()
        monkeypatch.setattr(psycopg.AsyncConnection, "execute", recorded)
        paused = await one.build().run("x")
        pause_statements = [text for text in sent if "save_delta_checkpoint" in text or "INSERT INTO" in text]
        assert len(pause_statements) == 1 and "continuations" in pause_statements[0]
        again = await answer(one, paused, "a")  # the same worker: its deduper continues the pause's segment
        assert again.continuation_token is not None
        done = await answer(
            two, again, "b", {request(paused): "a"}
        )  # the other worker reads the joint statement's rows
        assert done.get_outputs() == ["draft about x: a, b"]
        assert await count_rows(postgres_server, schema, "delta_checkpoints") == 0  # the finished chain deleted
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_failed_statement_leaves_the_pause_checkpoint_alone_and_no_record(postgres_server: str) -> None:
    schema = new_schema(postgres_server, "p")
    pair = JointWorker.on(postgres_server, schema)
    try:
        await pair.ready()
        async with await psycopg.AsyncConnection.connect(postgres_server, autocommit=True) as conn:
            await conn.execute(
                f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS '
                "$$ BEGIN RAISE EXCEPTION 'no records today'; END $$"
            )
            await conn.execute(
                f'CREATE TRIGGER refuse BEFORE INSERT ON "{schema}".continuations '
                f'FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()'
            )
        with pytest.raises(psycopg.Error, match="no records today"):
            await pair.build().run("y")
        assert await count_rows(postgres_server, schema, "continuations") == 0
        kept = await pair.storage.list_checkpoints(workflow_name="joint_pause")
        assert [bool(checkpoint.pending_request_info_events) for checkpoint in kept] == [True]  # its restore point
    finally:
        await pair.aclose()


async def test_a_save_the_storage_refuses_is_saved_whole_under_the_record(
    postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = new_schema(postgres_server, "p")
    one, two = JointWorker.on(postgres_server, schema), JointWorker.on(postgres_server, schema)
    init = PostgresJoint.__init__

    def refusing(self: PostgresJoint, *args: Any) -> None:
        init(self, *args)
        self.save_with_record = self.save_with_record.replace(b") SELECT ", b") SELECT FALSE AND ", 1)

    monkeypatch.setattr(PostgresJoint, "__init__", refusing)
    try:
        await one.ready()
        await two.ready()
        paused = await one.build().run("z")
        assert await count_rows(postgres_server, schema, "continuations") == 1
        assert await count_rows(postgres_server, schema, "delta_checkpoints") == 1  # whole, under the same id
        assert await count_rows(postgres_server, schema, "delta_segments WHERE parent_ids IS NULL") == 1  # alone
        again = await answer(two, paused, "c")
        done = await answer(one, again, "d", {request(paused): "c"})
        assert done.get_outputs() == ["draft about z: c, d"]
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_joint_pause_no_record_took_is_saved_when_its_run_ends(
    postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = new_schema(postgres_server, "p")
    one, two = JointWorker.on(postgres_server, schema), JointWorker.on(postgres_server, schema)
    take = RecordingCheckpointStorage.take_joint_pause
    calls: list[bool] = []

    def first_refused(self: RecordingCheckpointStorage) -> Any:
        calls.append(self.joint_pause is not None)
        return None if len(calls) == 1 else take(self)  # record_pause gets nothing; flush gets the pause

    monkeypatch.setattr(RecordingCheckpointStorage, "take_joint_pause", first_refused)
    try:
        await one.ready()
        await two.ready()
        paused = await one.build().run("w")
        assert calls[:2] == [True, True]
        done = await answer(two, await answer(two, paused, "e"), "f", {request(paused): "e"})
        assert done.get_outputs() == ["draft about w: e, f"]
    finally:
        await one.aclose()
        await two.aclose()


async def test_no_joint_for_another_database_or_a_subclass(postgres_server: str) -> None:
    schema = new_schema(postgres_server, "p")
    separator = "&" if "?" in postgres_server else "?"
    store = PostgresContinuationStore(postgres_server, schema=schema)
    elsewhere = PostgresCheckpointStorage(f"{postgres_server}{separator}application_name=other", schema=schema)
    reordered = PostgresCheckpointStorage(postgres_server, schema=schema)

    class Custom(PostgresCheckpointStorage):
        pass

    class CustomStore(PostgresContinuationStore):
        pass

    custom = Custom(postgres_server, schema=schema)
    custom_store = CustomStore(postgres_server, schema=schema)
    try:
        assert store.joint(elsewhere) is None
        assert store.joint(custom) is None
        assert custom_store.joint(reordered) is None
        assert isinstance(store.joint(reordered), PostgresJoint)
    finally:
        for closable in (store, elsewhere, reordered, custom, custom_store):
            await closable.aclose()


async def test_a_pause_saved_with_its_record_purges_expired_checkpoints_when_due(postgres_server: str) -> None:
    # Regression: the joint statement skipped the storage's purge, so a worker whose every save was a
    # pause (a HITL cycle: pause, answer, finish) never deleted expired checkpoints.
    schema = new_schema(postgres_server, "p")
    short, late = JointWorker.on(postgres_server, schema, ttl=1), JointWorker.on(postgres_server, schema)
    expired = "delta_segments WHERE expires_at <= extract(epoch FROM clock_timestamp())"
    try:
        await short.ready()
        await short.build().run("x")  # its checkpoints expire a second later
        await asyncio.sleep(1.2)
        assert await count_rows(postgres_server, schema, expired) > 0
        await late.ready()
        await late.build().run("y")  # this storage's first write: a joint pause, which purges first
        assert await count_rows(postgres_server, schema, expired) == 0
    finally:
        await short.aclose()
        await late.aclose()
