"""A resume on another worker reads the pause's record and checkpoint in one round trip (``postgres_store``).

Against a real PostgreSQL cluster (``postgres_server``). Asserted: the resuming storage's own ``load``
is not called when the store and the storage share a database (also on a fresh worker's first resume; it
is, exactly once, when they do not), every record check still refuses what it refused, and a checkpoint
the joint read cannot serve (an id that is not a random uuid, a row gone) is loaded the usual way.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from durable_support import new_record
from postgres_server import new_schema

from agent_framework_functional import (
    ContinuationAuthorityError,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RunContext,
    continuation_token_hash,
    workflow,
)
from agent_framework_functional._durable.postgres_store import PostgresJoint

pytestmark = pytest.mark.slow


@workflow(name="joint_review")
async def _review(topic: str, ctx: RunContext) -> str:
    answer = await ctx.request_info({"draft": topic}, response_type=str)
    return f"{topic}: {answer}"


@workflow(name="joint_other")
async def _other(topic: str, ctx: RunContext) -> str:
    answer = await ctx.request_info({"draft": topic}, response_type=str)
    return f"other {topic}: {answer}"


class _Worker:
    """A worker's store and storage on ``url``, counting the storage's own loads."""

    def __init__(self, url: str, schema: str, *, store_url: str | None = None, **store_options: Any) -> None:
        self.storage = PostgresCheckpointStorage(url, schema=schema)
        self.store = PostgresContinuationStore(store_url or url, schema=schema, **store_options)
        self.loads: list[str] = []
        load = self.storage.load

        async def counted(checkpoint_id: str) -> WorkflowCheckpoint:
            self.loads.append(checkpoint_id)
            return await load(checkpoint_id)

        self.storage.load = counted  # type: ignore[method-assign]  # an instance attribute: the class stays exact

    def build(self, definition: Any = _review) -> Any:
        return definition.build(checkpoint_storage=self.storage, continuation_store=self.store)

    async def aclose(self) -> None:
        await self.store.aclose()
        await self.storage.aclose()


async def _pause(worker: _Worker, topic: str, definition: Any = _review) -> tuple[str, str]:
    paused = await worker.build(definition).run(topic)
    return paused.get_request_info_events()[0].request_id, paused.continuation_token


async def test_the_resuming_worker_reads_record_and_checkpoint_together(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    pausing, resuming = _Worker(postgres_server, schema), _Worker(postgres_server, schema)
    try:
        await resuming.storage.list_checkpoints(workflow_name="joint_review")  # their schema checks done: ready
        await resuming.store.purge_expired()
        request_id, token = await _pause(pausing, "a")
        done = await resuming.build().run(responses={request_id: "yes"}, continuation_token=token)
        assert done.get_outputs() == ["a: yes"]
        assert resuming.loads == []  # the checkpoint came with the record
        with pytest.raises(ContinuationAuthorityError):  # spent
            await resuming.build().run(responses={request_id: "again"}, continuation_token=token)
    finally:
        await pausing.aclose()
        await resuming.aclose()


async def test_a_fresh_worker_reads_together_another_conninfo_loads_alone(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    separator = "&" if "?" in postgres_server else "?"
    other_url = f"{postgres_server}{separator}application_name=joint-test"
    pausing = _Worker(postgres_server, schema)
    fresh = _Worker(postgres_server, schema)
    apart = _Worker(postgres_server, schema, store_url=other_url)
    try:
        request_id, token = await _pause(pausing, "b")
        done = await fresh.build().run(responses={request_id: "ok"}, continuation_token=token)
        assert done.get_outputs() == ["b: ok"] and fresh.loads == []  # a first use checks the schemas, then reads
        request_id, token = await _pause(pausing, "c")
        done = await fresh.build().run(responses={request_id: "ok"}, continuation_token=token)
        assert done.get_outputs() == ["c: ok"] and fresh.loads == []
        assert apart.store.joint(apart.storage) is None
        request_id, token = await _pause(pausing, "d")
        done = await apart.build().run(responses={request_id: "ok"}, continuation_token=token)
        assert done.get_outputs() == ["d: ok"] and len(apart.loads) == 1
    finally:
        for worker in (pausing, fresh, apart):
            await worker.aclose()


async def test_the_record_checks_still_refuse(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    now = [1_000.0]
    pausing = _Worker(postgres_server, schema, ttl=60, clock=lambda: now[0])
    resuming = _Worker(postgres_server, schema, ttl=60, clock=lambda: now[0])
    try:
        await resuming.storage.list_checkpoints(workflow_name="joint_review")
        await resuming.store.purge_expired()
        request_id, token = await _pause(pausing, "e")
        with pytest.raises(ContinuationAuthorityError):  # another workflow's record
            await resuming.build(_other).run(responses={request_id: "x"}, continuation_token=token)
        with pytest.raises(ContinuationAuthorityError):  # a guessed token
            await resuming.build().run(
                responses={request_id: "x"}, continuation_token={**token, "token": token["token"][::-1]}
            )
        now[0] += 61
        with pytest.raises(ContinuationAuthorityError):  # expired
            await resuming.build().run(responses={request_id: "x"}, continuation_token=token)
        now[0] -= 61
        done = await resuming.build().run(responses={request_id: "still"}, continuation_token=token)
        assert done.get_outputs() == ["e: still"] and resuming.loads == []  # nothing was spent by the refusals
    finally:
        await pausing.aclose()
        await resuming.aclose()


async def test_a_checkpoint_the_joint_read_cannot_serve_is_loaded_the_usual_way(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    worker = _Worker(postgres_server, schema)
    try:
        reader = worker.store.joint(worker.storage)
        assert isinstance(reader, PostgresJoint)
        assert await reader.read("no such hash") == (None, None)  # a first use: both schemas checked, then read
        checkpoint = WorkflowCheckpoint(
            workflow_name="joint_review", graph_signature_hash="s", checkpoint_id="custom-id"
        )
        await worker.storage.save(checkpoint)
        random_id = str(uuid.uuid4())
        await worker.storage.save(
            WorkflowCheckpoint(workflow_name="joint_review", graph_signature_hash="s", checkpoint_id=random_id)
        )
        custom, stored, gone = (
            dataclasses.replace(new_record(worker.store), checkpoint_id=name)
            for name in ("custom-id", random_id, str(uuid.uuid4()))
        )
        for record in (custom, stored, gone):
            await worker.store.save(record)
        assert await reader.read("no such hash") == (None, None)
        found = await reader.read(custom.token_hash)
        assert found is not None and found[0] is not None and found[0].checkpoint_id == "custom-id"
        assert found[1] is None  # not its row key: loaded on its own
        found = await reader.read(gone.token_hash)
        assert found is not None and found[0] is not None and found[1] is None  # no row: the usual load reports it
        found = await reader.read(stored.token_hash)  # a direct save's row: read with its record too
        assert found is not None and found[1] is not None and found[1]().checkpoint_id == random_id
        assert (await worker.storage.load(random_id)).checkpoint_id == random_id
        with pytest.raises(WorkflowCheckpointException):
            await worker.storage.load(gone.checkpoint_id)
        request_id, token = await _pause(worker, "f")  # a run's pause: a delta row, served with its record
        found = await reader.read(continuation_token_hash(token))
        assert found is not None and found[0] is not None and found[1] is not None
        assert request_id in found[1]().pending_request_info_events
    finally:
        await worker.aclose()
