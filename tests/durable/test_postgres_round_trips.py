"""Postgres round trips and CPU per HITL cycle: batched claims, one delete per chain, signatures.

Every test runs against a real PostgreSQL cluster (``postgres_server``). What is asserted is behaviour:
exactly one winner per token however claims are batched, which statements a chain's cleanup sends,
and that a cached signature is the one core computes.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import psycopg
import pytest
from agent_framework import FunctionalWorkflow as CoreFunctionalWorkflow
from agent_framework import WorkflowCheckpoint
from durable_support import new_record
from postgres_server import new_schema

from agent_framework_functional import (
    ContinuationAuthorityError,
    FunctionalWorkflowDefinition,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RunContext,
    step,
    workflow,
)
from agent_framework_functional._core_compat import build_core

pytestmark = pytest.mark.slow


async def test_claims_made_together_have_one_winner_each_and_record_the_winner(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    store = PostgresContinuationStore(postgres_server, schema=schema)
    try:
        records = [new_record(store) for _ in range(40)]
        for record in records:
            await store.save(record)
        expired = new_record(store, expires_in=-1.0)
        await store.save(expired)
        claims: list[tuple[str, str]] = [(r.token_hash, secrets.token_hex(8)) for r in records for _ in range(3)]
        claims += [(expired.token_hash, "late"), ("0" * 64, "missing")]
        results = await asyncio.gather(*(store.claim(token_hash, claimer=claimer) for token_hash, claimer in claims))
        winners: dict[str, list[str]] = {}
        for (token_hash, claimer), won in zip(claims, results, strict=True):
            if won:
                winners.setdefault(token_hash, []).append(claimer)
        assert sorted(winners) == sorted(r.token_hash for r in records)  # not the expired, not the missing one
        assert all(len(claimers) == 1 for claimers in winners.values())
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            rows = dict(conn.execute(f'SELECT token_hash, claimed_by FROM "{schema}".continuations').fetchall())
        for token_hash, (claimer,) in winners.items():
            assert rows[token_hash] == claimer  # only this claimer can release it
        assert rows[expired.token_hash] is None
        # A claim made alone afterwards sees the batch's outcome.
        assert not await store.claim(records[0].token_hash)
        assert await store.release(records[0].token_hash, winners[records[0].token_hash][0])
        assert await store.claim(records[0].token_hash)
    finally:
        await store.aclose()


async def test_a_cancelled_claim_before_its_batch_is_sent_claims_nothing(postgres_server: str) -> None:
    store = PostgresContinuationStore(postgres_server, schema=new_schema(postgres_server))
    try:
        record = new_record(store)
        await store.save(record)
        task = asyncio.ensure_future(store.claim(record.token_hash))
        await asyncio.sleep(0)  # the claim is queued for the next tick
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        stored = await store.get(record.token_hash)
        assert stored is not None and stored.status == "issued"
    finally:
        await store.aclose()


def _checkpoint(name: str) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name=name, graph_signature_hash="g", state={"n": 1})


async def test_delete_many_deletes_in_one_statement(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    try:
        saved = [await storage.save(_checkpoint("wf")) for _ in range(4)]
        assert await storage.delete_many([saved[0], saved[1], saved[1], "missing"]) == 2
        assert await storage.delete_many([]) == 0
        assert await storage.list_checkpoint_ids(workflow_name="wf") == saved[2:]
        assert await storage.delete(saved[2]) and not await storage.delete(saved[2])
    finally:
        await storage.aclose()


class _CountingStorage(PostgresCheckpointStorage):
    """Counts the deleting calls a run chain makes."""

    calls: list[tuple[str, int]]

    async def delete(self, checkpoint_id: str) -> bool:
        self.calls.append(("delete", 1))
        return await super().delete(checkpoint_id)

    async def delete_many(self, checkpoint_ids: list[str]) -> int:
        self.calls.append(("delete_many", len(checkpoint_ids)))
        return await super().delete_many(checkpoint_ids)


@step
async def _draft(topic: str) -> str:
    return f"draft about {topic}"


@workflow
async def _review(topic: str, ctx: RunContext) -> str:
    text = await _draft(topic)
    answer = await ctx.request_info({"draft": text}, response_type=str)
    return f"{text}: {answer}"


async def test_a_finished_chain_deletes_its_checkpoints_in_one_call(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    storage = _CountingStorage(postgres_server, schema=schema)
    storage.calls = []
    store = PostgresContinuationStore(postgres_server, schema=schema)
    try:
        at_once = FunctionalWorkflowDefinition(_review.func, checkpoint_retention=0)  # the finish deletes the chain
        wf = at_once.build(checkpoint_storage=storage, continuation_store=store)
        paused = await wf.run("x")
        request_id = paused.get_request_info_events()[0].request_id
        done = await wf.run(responses={request_id: "ok"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == ["draft about x: ok"]
        assert [name for name, _ in storage.calls] == ["delete_many", "delete_many"]  # pause, then the end
        assert await storage.list_checkpoint_ids(workflow_name=wf.name) == []
    finally:
        await store.aclose()
        await storage.aclose()


async def _core_review(topic: str, ctx: Any) -> str:
    return await _draft(topic)


def test_a_cached_signature_is_core_s_and_follows_a_rebound_global() -> None:
    ours = build_core(_core_review, name="r", description=None, checkpoint_storage=None)
    core = CoreFunctionalWorkflow(_core_review, name="r")
    assert ours.graph_signature_hash == core.graph_signature_hash
    assert build_core(_core_review, name="r", description=None, checkpoint_storage=None).graph_signature_hash == (
        core.graph_signature_hash
    )
    original = globals()["_draft"]

    @step
    async def _draft_v2(topic: str) -> str:
        return f"another draft about {topic}"

    globals()["_draft"] = _draft_v2  # the workflow's global now names another step: another signature
    try:
        rebuilt = build_core(_core_review, name="r", description=None, checkpoint_storage=None)
        assert rebuilt.graph_signature_hash == CoreFunctionalWorkflow(_core_review, name="r").graph_signature_hash
        assert rebuilt.graph_signature_hash != core.graph_signature_hash
    finally:
        globals()["_draft"] = original


class _LoadCountingStorage(PostgresCheckpointStorage):
    """Counts loads."""

    loads: list[str]

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        self.loads.append(checkpoint_id)
        return await super().load(checkpoint_id)


async def test_a_resume_on_another_worker_loads_the_pause_checkpoint_once(postgres_server: str) -> None:
    schema = new_schema(postgres_server)
    pausing_storage = PostgresCheckpointStorage(postgres_server, schema=schema)
    resuming_storage = _LoadCountingStorage(postgres_server, schema=schema)
    resuming_storage.loads = []
    pausing_store = PostgresContinuationStore(postgres_server, schema=schema)
    resuming_store = PostgresContinuationStore(postgres_server, schema=schema)
    try:
        paused = await _review.build(checkpoint_storage=pausing_storage, continuation_store=pausing_store).run("y")
        request_id = paused.get_request_info_events()[0].request_id
        wf = _review.build(checkpoint_storage=resuming_storage, continuation_store=resuming_store)
        done = await wf.run(responses={request_id: "fine"}, continuation_token=paused.continuation_token)
        assert done.get_outputs() == ["draft about y: fine"]
        assert len(resuming_storage.loads) == 1  # the answer-type check's load serves core's restore too
        again = _review.build(checkpoint_storage=resuming_storage, continuation_store=resuming_store)
        with pytest.raises(ContinuationAuthorityError):  # spent: the record is claimed
            await again.run(responses={request_id: "twice"}, continuation_token=paused.continuation_token)
    finally:
        for closable in (pausing_store, resuming_store, pausing_storage, resuming_storage):
            await closable.aclose()
