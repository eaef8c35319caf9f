"""Attacks on the joint pause of a Postgres store and storage on one database (``_durable/postgres_store.py``).

Against a real PostgreSQL cluster (``postgres_server``). Asserted: two caller pools on different databases
are not taken for one; store and storage on different schemas of one database pause and resume across
workers; a sealed storage refuses a tampered row before anything decodes it; a stream its caller stops
reading at the request still saves the pause's checkpoint (its restore point); instances pausing at once
on one worker resume alternately on two; a restore then pauses again; a pause saved alone before its
record came is recorded after it (a failed save: no record); a run cancelled in its joint statement
keeps its restore point; the agent resumes a pause made with one pool object on another worker; kept
checkpoints and synchronous steps resume across workers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import psycopg
import pytest
from agent_framework import AgentSession, Message, WorkflowCheckpointException
from durable_workflows import CHECKPOINT_TYPES, EFFECTS, approve_bool
from joint_support import JointWorker, answer, draft, request, twice
from postgres_server import new_schema
from psycopg_pool import AsyncConnectionPool

from agent_framework_functional import (
    CheckpointSealer,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RunContext,
    continuation_token_hash,
    workflow,
)
from agent_framework_functional._durable import postgres_store
from agent_framework_functional._durable.postgres_store import PAUSE_HOLD_SECONDS
from agent_framework_functional._store_records import StoreRecords

pytestmark = pytest.mark.slow

KEY = b"k" * 32


async def _execute(url: str, *statements: str) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows: list[Any] = []
        for statement in statements:
            cursor = await conn.execute(statement)
            rows = await cursor.fetchall() if cursor.description else []
        return rows


async def test_two_caller_pools_on_different_databases_are_not_one(postgres_server: str) -> None:
    database = f"d_{uuid.uuid4().hex}"
    await _execute(postgres_server, f'CREATE DATABASE "{database}"')
    schema = new_schema(postgres_server, "a")
    elsewhere = AsyncConnectionPool(postgres_server, kwargs={"autocommit": True, "dbname": database}, open=False)
    here = AsyncConnectionPool(postgres_server, kwargs={"autocommit": True}, open=False)
    await elsewhere.open()
    await here.open()
    worker = JointWorker(
        PostgresCheckpointStorage(elsewhere, schema=schema), PostgresContinuationStore(here, schema=schema)
    )
    try:
        assert worker.store.joint(worker.storage) is None  # one conninfo, but the pools' kwargs differ
        await worker.ready()
        paused = await worker.build().run("p")
        done = await answer(worker, await answer(worker, paused, "a"), "b", {request(paused): "a"})
        assert done.get_outputs() == ["draft about p: a, b"]
    finally:
        await worker.aclose()
        await elsewhere.close()
        await here.close()


async def test_store_and_storage_on_two_schemas_of_one_database(postgres_server: str) -> None:
    schema, store_schema = new_schema(postgres_server, "a"), new_schema(postgres_server, "a")
    one = JointWorker.on(postgres_server, schema, store_schema)
    two = JointWorker.on(postgres_server, schema, store_schema)
    try:
        await one.ready()
        await two.ready()
        assert one.store.joint(one.storage) is not None
        paused = await one.build().run("s")
        again = await answer(two, paused, "a")
        done = await answer(one, again, "b", {request(paused): "a"})
        assert done.get_outputs() == ["draft about s: a, b"]
        rows = await _execute(postgres_server, f'SELECT count(*) FROM "{schema}".delta_checkpoints')
        assert rows[0][0] == 0
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_sealed_storage_refuses_a_tampered_row_read_with_the_record(
    postgres_server: str, decodes: list[object]
) -> None:
    schema = new_schema(postgres_server, "a")
    one = JointWorker.on(postgres_server, schema, sealer=CheckpointSealer({"k1": KEY}))
    two = JointWorker.on(postgres_server, schema, sealer=CheckpointSealer({"k1": KEY}))
    try:
        await one.ready()
        await two.ready()
        kept = await one.build().run("kept")
        done = await answer(one, await answer(two, kept, "a"), "b", {request(kept): "a"})
        assert done.get_outputs() == ["draft about kept: a, b"]  # sealed rows read with the record decode
        paused = await one.build().run("t")
        await _execute(
            postgres_server,
            f"UPDATE \"{schema}\".delta_checkpoints SET body = overlay(body placing '\\xff'::bytea from 60 for 1) "
            "WHERE checkpoint_id IS NOT NULL",
        )
        decodes.clear()
        with pytest.raises(WorkflowCheckpointException):
            await answer(two, paused, "a")
        assert decodes == []  # refused before core's decoder saw anything
    finally:
        await one.aclose()
        await two.aclose()


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "left"])
async def test_a_stream_abandoned_at_its_request_leaves_a_restore_point(postgres_server: str, closed: bool) -> None:
    schema = new_schema(postgres_server, "a")
    worker = JointWorker.on(postgres_server, schema)
    try:
        await worker.ready()
        stream = worker.build().run("u", stream=True)
        async for event in stream:
            if event.type == "request_info":
                break
        if closed:
            await stream.close()
        await asyncio.sleep(PAUSE_HOLD_SECONDS + 0.3)  # read on or not: the pause is saved
        other = PostgresCheckpointStorage(postgres_server, schema=schema)
        kept = await other.list_checkpoints(workflow_name="joint_pause")
        await other.aclose()
        assert any(checkpoint.pending_request_info_events for checkpoint in kept)
    finally:
        await worker.aclose()


async def test_instances_pausing_at_once_resume_alternately_on_two_workers(postgres_server: str) -> None:
    schema = new_schema(postgres_server, "a")
    one, two = JointWorker.on(postgres_server, schema), JointWorker.on(postgres_server, schema)
    try:
        await one.ready()
        await two.ready()
        topics = [f"t{i}" for i in range(6)]
        paused = await asyncio.gather(*(one.build().run(topic) for topic in topics))
        again = await asyncio.gather(*(answer(two, p, f"a{i}") for i, p in enumerate(paused)))
        done = await asyncio.gather(
            *(
                answer(one, a, f"b{i}", {request(p): f"a{i}"})
                for i, (p, a) in enumerate(zip(paused, again, strict=True))
            )
        )
        assert [d.get_outputs() for d in done] == [[f"draft about t{i}: a{i}, b{i}"] for i in range(6)]
        rows = await _execute(postgres_server, f'SELECT count(*) FROM "{schema}".delta_checkpoints')
        assert rows[0][0] == 0
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_restore_then_pauses_again(postgres_server: str) -> None:
    schema = new_schema(postgres_server, "a")
    one, two = JointWorker.on(postgres_server, schema), JointWorker.on(postgres_server, schema)
    try:
        await one.ready()
        await two.ready()
        paused = await one.build().run("r")
        record = await one.store.get(continuation_token_hash(paused.continuation_token))
        assert record is not None
        again = await two.build().run(checkpoint_id=record.checkpoint_id, responses={request(paused): "a"})
        assert again.continuation_token is not None
        done = await answer(one, again, "b", {request(paused): "a"})
        assert done.get_outputs() == ["draft about r: a, b"]
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_pause_saved_alone_before_its_record_came_is_recorded_after_it(
    postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_store, "PAUSE_HOLD_SECONDS", 0.0)  # the record always comes too late
    released: list[str] = []
    release = postgres_store.PostgresJointPause._release

    def counted(self: postgres_store.PostgresJointPause) -> None:
        released.append(self.checkpoint_id)
        release(self)

    monkeypatch.setattr(postgres_store.PostgresJointPause, "_release", counted)
    save = StoreRecords.save

    async def slow(self: StoreRecords, *args: Any) -> None:
        await asyncio.sleep(0.05)
        await save(self, *args)

    monkeypatch.setattr(StoreRecords, "save", slow)
    schema = new_schema(postgres_server, "a")
    one, two = JointWorker.on(postgres_server, schema), JointWorker.on(postgres_server, schema)
    try:
        await one.ready()
        await two.ready()
        paused = await one.build().run("late")
        assert len(released) == 1
        again = await answer(two, paused, "a")
        done = await answer(one, again, "b", {request(paused): "a"})
        assert done.get_outputs() == ["draft about late: a, b"]
        await _execute(
            postgres_server,
            f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS '
            "$$ BEGIN RAISE EXCEPTION 'no checkpoints today'; END $$",
            f'CREATE TRIGGER refuse BEFORE INSERT ON "{schema}".delta_checkpoints '
            f'FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()',
        )
        before = (await _execute(postgres_server, f'SELECT count(*) FROM "{schema}".continuations'))[0][0]
        with pytest.raises(psycopg.Error, match="no checkpoints today"):
            await one.build().run("refused")  # its save alone failed: no record, no token
        after = (await _execute(postgres_server, f'SELECT count(*) FROM "{schema}".continuations'))[0][0]
        assert after == before
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_run_cancelled_in_its_joint_statement_keeps_its_restore_point(postgres_server: str) -> None:
    schema = new_schema(postgres_server, "a")
    one, two = JointWorker.on(postgres_server, schema), JointWorker.on(postgres_server, schema)
    try:
        await one.ready()
        await two.ready()
        await _execute(
            postgres_server,
            f'CREATE FUNCTION "{schema}".slow() RETURNS trigger LANGUAGE plpgsql AS '
            "$$ BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$",
            f'CREATE TRIGGER slow BEFORE INSERT ON "{schema}".continuations '
            f'FOR EACH ROW EXECUTE FUNCTION "{schema}".slow()',
        )
        run = asyncio.ensure_future(one.build().run("c"))
        await asyncio.sleep(0.5)  # in the joint statement
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await asyncio.sleep(1.5)
        kept = await two.storage.list_checkpoints(workflow_name="joint_pause")
        assert [bool(checkpoint.pending_request_info_events) for checkpoint in kept] == [True]
        records = await _execute(postgres_server, f'SELECT status FROM "{schema}".continuations')
        assert records in ([], [("issued",)])  # the statement cancelled, or committed: no token either way
        restored = await two.build().run(checkpoint_id=kept[0].checkpoint_id, responses={"auto::0": "a"})
        assert restored.continuation_token is not None
    finally:
        await one.aclose()
        await two.aclose()


@pytest.mark.parametrize("stream", [False, True], ids=["collected", "streamed"])
async def test_the_agent_resumes_a_joint_pause_on_another_worker(postgres_server: str, stream: bool) -> None:
    schema = new_schema(postgres_server, "a")
    pool = AsyncConnectionPool(postgres_server, kwargs={"autocommit": True}, open=False)
    await pool.open()
    owner_storage = PostgresCheckpointStorage(pool, schema=schema, allowed_checkpoint_types=CHECKPOINT_TYPES)
    owner_store = PostgresContinuationStore(pool, schema=schema)  # the same pool object: one database
    worker = JointWorker.on(postgres_server, schema, allowed_checkpoint_types=CHECKPOINT_TYPES)
    try:
        assert owner_store.joint(owner_storage) is not None
        owner = approve_bool.build(checkpoint_storage=owner_storage, continuation_store=owner_store).as_agent()
        await worker.ready()
        session = owner.create_session()
        paused = await owner.run("tea", session=session, stream=stream).get_final_response() if stream else None
        if paused is None:
            paused = await owner.run("tea", session=session)
        assert paused.continuation_token is not None
        other = approve_bool.build(checkpoint_storage=worker.storage, continuation_store=worker.store).as_agent()
        answer = Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=True)])
        moved = AgentSession.from_dict(json.loads(json.dumps(session.to_dict())))
        done = await other.run(answer, session=moved)
        assert done.text == "shipped: draft about tea (approved=True)" and EFFECTS == ["True"]
        rows = await _execute(postgres_server, f'SELECT count(*) FROM "{schema}".delta_checkpoints')
        assert rows[0][0] == 3  # the finished chain (the pause's, the resume's step, core's final) for its retention
    finally:
        await worker.aclose()
        await owner_store.aclose()
        await owner_storage.aclose()
        await pool.close()


@workflow(name="joint_pause", checkpoint_retention=None)
async def _kept(topic: str, ctx: RunContext) -> str:
    text = await draft(topic)
    first = await ctx.request_info({"draft": text}, response_type=str)
    second = await ctx.request_info({"again": first}, response_type=str)
    return f"{text}: {first}, {second}"


@pytest.mark.parametrize("kind", ["kept", "synchronous"])
async def test_kept_checkpoints_and_synchronous_steps_resume_across_workers(postgres_server: str, kind: str) -> None:
    schema = new_schema(postgres_server, "a")
    options = {"synchronous_steps": True} if kind == "synchronous" else {}
    one, two = JointWorker.on(postgres_server, schema, **options), JointWorker.on(postgres_server, schema, **options)
    definition = _kept if kind == "kept" else twice

    async def resume(worker: JointWorker, paused: Any, text: str, earlier: dict[str, str] | None = None) -> Any:
        responses = {**(earlier or {}), request(paused): text}
        built = definition.build(checkpoint_storage=worker.storage, continuation_store=worker.store)
        return await built.run(responses=responses, continuation_token=paused.continuation_token)

    try:
        await one.ready()
        await two.ready()
        paused = await definition.build(checkpoint_storage=one.storage, continuation_store=one.store).run("k")
        again = await resume(two, paused, "a")
        done = await resume(one, again, "b", {request(paused): "a"})
        assert done.get_outputs() == ["draft about k: a, b"]
        left = await two.storage.list_checkpoints(workflow_name="joint_pause")
        assert (len(left) > 2) if kind == "kept" else left == []
    finally:
        await one.aclose()
        await two.aclose()
