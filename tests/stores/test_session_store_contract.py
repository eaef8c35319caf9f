"""Every bounded session store, one contract: core's SessionStore as JSON, a TTL from the last write, ``max_entries``.

Runs once per backend (in memory, SQLite, a real Redis, a real PostgreSQL), and for each the AG-UI snapshot view
(``hosting.ThreadSnapshotStore``) kept in the same store, and what a paused conversation whose session the store
dropped (evicted or expired) does next.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentSession, InMemoryCheckpointStorage, Message, RunContext, SessionStore
from agent_framework_ag_ui import AGUIThreadSnapshot
from postgres_server import setup_schema

from agent_framework_functional import (
    SESSION_STATE_KEY,
    ContinuationAuthorityError,
    InMemorySessionStore,
    PostgresSessionStore,
    RedisSessionStore,
    SQLiteContinuationStore,
    SQLiteSessionStore,
    workflow,
)
from agent_framework_functional._durable.session_store import BoundedSessionStore
from agent_framework_functional.hosting import ThreadSnapshotStore

KINDS = ["memory", "sqlite", "redis", "postgres"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=KINDS)
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable[..., BoundedSessionStore]]:
    """Open session stores (``make(ttl=..., max_entries=..., clock=...)``) on one fresh database."""
    kind: str = request.param
    tag = uuid.uuid4().hex
    opened: list[BoundedSessionStore] = []

    def open_store(**options: Any) -> BoundedSessionStore:
        store: BoundedSessionStore
        if kind == "memory":
            store = InMemorySessionStore(**options)
        elif kind == "sqlite":
            store = SQLiteSessionStore(tmp_path / "sessions.db", purge_interval=None, **options)
        elif kind == "redis":
            url = request.getfixturevalue("redis_server")
            store = RedisSessionStore(url, namespace=f"s:{tag}", purge_interval=None, **options)
        else:
            url = request.getfixturevalue("postgres_server")
            store = PostgresSessionStore(url, schema=setup_schema(url, f"s_{tag}"), purge_interval=None, **options)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        await store.aclose()


def _session(session_id: str = "conversation:c1") -> AgentSession:
    session = AgentSession(session_id=session_id, service_session_id="svc")
    session.state[SESSION_STATE_KEY] = {"agent": {"continuation_token": {"kind": "functional_workflow", "token": "x"}}}
    session.state["notes"] = ["é", 1, None, {"nested": True}]
    return session


async def test_a_session_round_trips_as_json_and_is_a_fresh_object(make: Callable[..., BoundedSessionStore]) -> None:
    store = make()
    assert isinstance(store, SessionStore)
    session = _session("conversation:\udc80 surrogate and é")
    await store.set(session.session_id, session)
    found = await store.get(session.session_id)
    assert found is not None and found is not session
    assert found.to_dict() == session.to_dict()
    found.state["notes"].append("changed")
    assert (await store.get(session.session_id)).to_dict() == session.to_dict()  # type: ignore[union-attr]
    await store.delete(session.session_id)
    assert await store.get(session.session_id) is None
    await store.delete(session.session_id)  # deleting what is gone is fine


async def test_a_second_store_object_on_the_same_backend_sees_the_session(
    make: Callable[..., BoundedSessionStore],
) -> None:
    first, second = make(), make()
    await first.set("k", _session())
    if isinstance(first, InMemorySessionStore):
        assert await second.get("k") is None  # one process only: that is what the durable stores are for
    else:
        assert (await second.get("k")).to_dict() == _session().to_dict()  # type: ignore[union-attr]


async def test_a_session_expires_ttl_after_its_last_write_and_reads_do_not_extend_it(
    make: Callable[..., BoundedSessionStore],
) -> None:
    clock = Clock()
    store = make(ttl=100, clock=clock)
    await store.set("k", _session())
    clock.now += 60
    assert await store.get("k") is not None
    await store.set("k", _session())  # a write extends
    clock.now += 60
    assert await store.get("k") is not None
    clock.now += 41
    if isinstance(store, RedisSessionStore):
        return  # Redis expires keys by its own clock (a real TTL of 100 s); the clock judges only the trim
    assert await store.get("k") is None


async def test_past_max_entries_the_least_recently_written_sessions_go_first(
    make: Callable[..., BoundedSessionStore],
) -> None:
    clock = Clock()
    store = make(max_entries=3, clock=clock)
    for number in range(5):
        clock.now += 1
        await store.set(f"s{number}", _session(f"s{number}"))
    await store.set("s1", _session("s1"))  # rewritten: now the newest
    purge = getattr(store, "purge_expired", None)
    assert purge is not None
    await purge()
    kept = [name for name in ("s0", "s1", "s2", "s3", "s4") if await store.get(name) is not None]
    assert kept == ["s1", "s3", "s4"]


async def test_bad_input_is_refused_and_changes_nothing(make: Callable[..., BoundedSessionStore]) -> None:
    store = make()
    await store.set("k", _session())
    with pytest.raises(ValueError, match="non-empty"):
        await store.set("", _session())
    session = _session()
    session.state["not json"] = object()
    with pytest.raises(TypeError), pytest.warns(RuntimeWarning, match="unsupported type"):  # core warns first
        await store.set("k", session)
    assert (await store.get("k")).to_dict() == _session().to_dict()  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="max_entries"):
        make(max_entries=0)


async def test_a_huge_max_entries_is_refused_when_made_or_works(make: Callable[..., BoundedSessionStore]) -> None:
    """A bound past what SQL takes as a row count failed every write (OverflowError) instead of the constructor."""
    with pytest.raises(ValueError, match="at most 2\\*\\*63 - 1"):
        make(max_entries=2**63)
    store = make(max_entries=2**63 - 1)
    await store.set("k", _session())
    assert await store.purge_expired() == 0  # type: ignore[attr-defined]
    assert (await store.get("k")).to_dict() == _session().to_dict()  # type: ignore[union-attr]


async def test_agui_snapshots_live_in_the_same_store_apart_per_scope(make: Callable[..., BoundedSessionStore]) -> None:
    store = make()
    snapshots = ThreadSnapshotStore(store)
    snapshot = AGUIThreadSnapshot(
        messages=[{"id": "m1", "role": "user", "content": "deploy"}],
        state={"shared": 1},
        interrupt=[{"id": "auto::0", "value": {"x": 1}}],
        session_state={SESSION_STATE_KEY: {"agent": {"continuation_token": {"token": "t"}}}},
    )
    await snapshots.save(scope="alice", thread_id="t1", snapshot=snapshot)
    await snapshots.save(scope="bob", thread_id="t1", snapshot=AGUIThreadSnapshot())
    await store.set("t1", _session("t1"))  # a session of the same name is another record
    found = await snapshots.get(scope="alice", thread_id="t1")
    assert found == snapshot and found is not snapshot
    assert json.loads(json.dumps(found.session_state)) == snapshot.session_state
    await snapshots.clear(scope="alice")
    assert await snapshots.get(scope="alice", thread_id="t1") is None
    assert await snapshots.get(scope="bob", thread_id="t1") == AGUIThreadSnapshot()
    assert await store.get("t1") is not None
    assert await snapshots.delete(scope="bob", thread_id="t1") is True
    assert await snapshots.delete(scope="bob", thread_id="t1") is False
    with pytest.raises(ValueError, match="needs a scope"):
        await snapshots.clear()
    with pytest.raises(ValueError, match="non-empty"):
        await snapshots.get(scope="", thread_id="t1")


def test_thread_snapshot_store_needs_one_of_the_package_stores() -> None:
    with pytest.raises(TypeError, match="session stores"):
        ThreadSnapshotStore(SessionStore())  # type: ignore[arg-type]


async def test_redis_clear_keeps_to_its_namespace_whatever_its_characters(redis_server: str) -> None:
    """A namespace is a key prefix, not a pattern: clearing a scope in ``app*`` must not clear ``apple``'s."""
    tag = uuid.uuid4().hex
    stores = [RedisSessionStore(redis_server, namespace=tag + name, purge_interval=None) for name in ("app*", "apple")]
    try:
        globbed, other = (ThreadSnapshotStore(store) for store in stores)
        await globbed.save(scope="alice", thread_id="t1", snapshot=AGUIThreadSnapshot())
        await other.save(scope="alice", thread_id="t1", snapshot=AGUIThreadSnapshot(state={"kept": 1}))
        await globbed.clear(scope="alice")
        assert await globbed.get(scope="alice", thread_id="t1") is None
        kept = await other.get(scope="alice", thread_id="t1")
        assert kept is not None and kept.state == {"kept": 1}
    finally:
        for store in stores:
            await store.aclose()


async def test_every_session_store_works_with_async_with(make: Callable[..., BoundedSessionStore]) -> None:
    async with make() as store:
        await store.set("k", _session())
        assert (await store.get("k")) is not None
    await store.aclose()  # closing twice does nothing


@workflow(name="lost_session_probe")
async def lost_session_probe(target: str, ctx: RunContext) -> str:
    return f"deployed {target}" if await ctx.request_info({"target": target}, response_type=bool) else "declined"


async def _lose(store: BoundedSessionStore, clock: Clock, lost: str, turn: Callable[..., Any]) -> None:
    """Drop the paused conversation's session from ``store``: past ``max_entries`` (2) or past its TTL."""
    if lost == "evicted":
        for number in range(2):
            clock.now += 1
            await turn(f"other-{number}", "other")
        await store.purge_expired()  # type: ignore[attr-defined]
    elif isinstance(store, RedisSessionStore):  # Redis expires keys by its own clock: wait for it
        for _ in range(500):  # at most 10 s
            if await store.get("paused") is None:
                break
            await asyncio.sleep(0.02)
    else:
        clock.now += 101


def _approve(paused: Any) -> Message:
    return Message("user", [paused.user_input_requests[0].to_function_approval_response(approved=True)])


@pytest.mark.parametrize("authority", ["memory", "continuation_store"])
@pytest.mark.parametrize("lost", ["evicted", "expired"])
async def test_a_paused_conversation_whose_session_was_dropped_takes_new_input(
    make: Callable[..., BoundedSessionStore], lost: str, authority: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The session held the pause's token; once the store drops it (eviction, expiry), new input starts a new turn
    (the orphaned pause is abandoned, in the continuation store too, and its checkpoint deleted), and an answer gets
    the authority error (hosts: "start over"). Without this the conversation was refused until the pause's TTL."""
    clock = Clock()
    redis_expiry = lost == "expired" and request.node.callspec.params["make"] == "redis"  # a real TTL: short
    store = make(max_entries=2, ttl=0.3 if redis_expiry else 100, clock=clock)
    checkpoints = InMemoryCheckpointStorage()
    continuations = SQLiteContinuationStore(tmp_path / "c.db") if authority == "continuation_store" else None
    agent = lost_session_probe.build(checkpoint_storage=checkpoints, continuation_store=continuations).as_agent()

    async def turn(session_id: str, message: Any) -> Any:
        """One host turn: the stored session (or a new one with the conversation's id), the run, the write."""
        session = await store.get(session_id) or agent.create_session(session_id=session_id)
        try:
            return await agent.run(message, session=session)
        finally:
            await store.set(session_id, session)

    try:
        paused = await turn("paused", "first")
        assert paused.continuation_token is not None
        await _lose(store, clock, lost, turn)
        assert await store.get("paused") is None

        with pytest.raises(ContinuationAuthorityError):  # refused, nothing runs: start over
            await turn("paused", _approve(paused))
        again = await turn("paused", "second")  # a new turn, not "answer the pending request first"
        assert again.continuation_token is not None
        assert again.continuation_token != paused.continuation_token
        with pytest.raises(ContinuationAuthorityError):  # the orphaned pause is abandoned everywhere
            await agent.workflow.verify_continuation_token_async(paused.continuation_token)
        live = 1 + (2 if lost == "evicted" else 0)  # the pauses still open: "paused" again, and the others
        assert len(await checkpoints.list_checkpoint_ids(workflow_name="lost_session_probe")) == live
        assert (await turn("paused", _approve(again))).text == "deployed second"
    finally:
        if continuations is not None:
            await continuations.aclose()


@pytest.mark.parametrize("lost", ["evicted", "expired"])
async def test_a_pause_orphaned_on_one_worker_blocks_nothing_there_once_another_paused_the_conversation(
    make: Callable[..., BoundedSessionStore], lost: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two workers share the stores. Worker A pauses a conversation; its session is dropped; worker B, which holds
    nothing for it, starts a new turn that pauses again. Back on A (which still holds the orphaned first pause),
    the answer to B's pause deploys, and new input conflicts only with B's pause, as on any worker."""
    kind = request.node.callspec.params["make"]
    if kind == "memory":
        pytest.skip("one process only: an in-memory session store is not shared by workers")
    clock = Clock()
    stores = [make(max_entries=2, ttl=0.3 if kind == "redis" and lost == "expired" else 100, clock=clock)]
    stores.append(make(max_entries=2, ttl=stores[0].records.ttl, clock=clock))  # type: ignore[attr-defined]
    checkpoints = InMemoryCheckpointStorage()
    continuations = [SQLiteContinuationStore(tmp_path / "c.db") for _ in range(2)]
    workers = [
        lost_session_probe.build(checkpoint_storage=checkpoints, continuation_store=store).as_agent(name="probe")
        for store in continuations
    ]

    async def turn(worker: int, session_id: str, message: Any) -> Any:
        store, agent = stores[worker], workers[worker]
        session = await store.get(session_id) or agent.create_session(session_id=session_id)
        try:
            return await agent.run(message, session=session)
        finally:
            await store.set(session_id, session)

    try:
        first = await turn(0, "paused", "first")
        await _lose(stores[0], clock, lost, lambda session_id, text: turn(0, session_id, text))
        assert await stores[1].get("paused") is None
        second = await turn(1, "paused", "second")  # B holds nothing for it: a new turn
        assert second.continuation_token is not None
        assert (await turn(0, "paused", _approve(second))).text == "deployed second"  # on A
        with pytest.raises(ContinuationAuthorityError):
            await workers[1].workflow.verify_continuation_token_async(first.continuation_token)
    finally:
        for store in continuations:
            await store.aclose()
