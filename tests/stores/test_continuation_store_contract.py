"""The ContinuationStore contract and attacks on it, run against every store (tests/stores/conftest.py).

What every store must do (``agent_framework_functional.ContinuationStore``): a record round-trips
exactly; claim, abandon and supersede are compare-and-set operations with one winner among any number
of racers on any number of store objects; ``claimed`` and ``abandoned`` are final but for the
claimer's ``release``; expired records are never claimed; hostile keys and cancelled calls leave
nothing inconsistent.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import sqlite3
from collections.abc import Callable
from datetime import timedelta

import pytest
from store_backends import Clock

from agent_framework_functional import ContinuationRecord, ContinuationStore


def _record(store: ContinuationStore, checkpoint_id: str = "checkpoint-1", **changes: object) -> ContinuationRecord:
    now = store.now()
    fields: dict[str, object] = {
        "token_hash": secrets.token_hex(32),
        "workflow_name": "approval",
        "signature_hash": "s" * 64,
        "checkpoint_id": checkpoint_id,
        "pending_request_ids": ("auto::0", "auto::1"),
        "created_at": now,
        "expires_at": now + store.ttl_seconds,
        "response_types": {"auto::0": "builtins:bool", "auto::1": "builtins:str"},
        "conversation": secrets.token_hex(32),
    }
    fields.update(changes)
    return ContinuationRecord(**fields)  # type: ignore[arg-type]


async def _status(store: ContinuationStore, token_hash: str) -> str | None:
    record = await store.get(token_hash)
    return None if record is None else record.status


# ---------------------------------------------------------------- the record


async def test_save_then_get_round_trips_every_field(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    assert await store.get(record.token_hash) == record
    assert await store.get(secrets.token_hex(32)) is None


async def test_odd_text_in_every_field_round_trips(store: ContinuationStore) -> None:
    odd = "quote ' \" ; -- DROP TABLE continuations; \\ % _ {} [] é 漢字 🙂 \u2028"
    record = _record(
        store,
        checkpoint_id=f"checkpoint {odd}",
        workflow_name=f"wf {odd}",
        pending_request_ids=(odd, "auto::0"),
        response_types={odd: "builtins:str", "auto::0": "my.module:Model[list[int]]"},
    )
    await store.save(record)
    assert await store.get(record.token_hash) == record
    assert await store.supersede(record.checkpoint_id, since=store.now())
    assert await _status(store, record.token_hash) == "abandoned"


async def test_a_hash_is_recorded_once(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    with pytest.raises((ValueError, sqlite3.IntegrityError)):
        await store.save(record)
    assert await store.get(record.token_hash) == record  # the refused save changed nothing


@pytest.mark.parametrize(
    "key",
    ["", "' OR '1'='1", "x'; DELETE FROM continuations; --", "*", "a:b:c", "%", "é" * 300, "0" * 10_000],
)
async def test_hostile_keys_find_nothing_and_change_nothing(store: ContinuationStore, key: str) -> None:
    record = _record(store)
    await store.save(record)
    assert await store.get(key) is None
    assert await store.claim(key, claimer=key) is False
    assert await store.release(key, key) is False
    assert await store.abandon(key, force=True) is False
    assert await store.supersede(key, since=0.0) is True  # nothing concerns it
    assert await store.get(record.token_hash) == record


# ---------------------------------------------------------------- compare-and-set


async def test_claim_is_issued_to_claimed_once(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    assert await store.claim(record.token_hash) is True
    assert await store.claim(record.token_hash) is False
    assert await store.abandon(record.token_hash, force=True) is False  # claimed is final
    assert await _status(store, record.token_hash) == "claimed"
    assert await store.claim(secrets.token_hex(32)) is False


async def test_abandon_is_issued_to_abandoned_once(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    assert await store.abandon(record.token_hash) is True
    assert await store.abandon(record.token_hash) is False
    assert await store.claim(record.token_hash) is False  # abandoned is final
    assert await _status(store, record.token_hash) == "abandoned"


async def test_only_the_claimer_can_hand_a_claim_back(store: ContinuationStore) -> None:
    record = _record(store)
    await store.save(record)
    assert await store.claim(record.token_hash, claimer="run-a")
    assert not await store.release(record.token_hash, "run-b")
    assert not await store.release(record.token_hash, "")
    assert await _status(store, record.token_hash) == "claimed"
    assert await store.release(record.token_hash, "run-a")
    assert await _status(store, record.token_hash) == "issued"
    assert not await store.release(record.token_hash, "run-a")  # once
    assert await store.claim(record.token_hash, claimer="run-c")  # usable again, exactly once
    assert not await store.claim(record.token_hash)


async def test_a_claim_without_claimer_and_an_abandoned_record_cannot_be_released(store: ContinuationStore) -> None:
    claimed, abandoned = _record(store), _record(store)
    await store.save(claimed)
    await store.save(abandoned)
    assert await store.claim(claimed.token_hash)
    assert await store.abandon(abandoned.token_hash)
    assert not await store.release(claimed.token_hash, "")
    assert not await store.release(abandoned.token_hash, "")
    assert not await store.release(secrets.token_hex(32), "x")


async def test_supersede_abandons_the_issued_record_of_a_checkpoint(store: ContinuationStore) -> None:
    record, other = _record(store, "checkpoint-a"), _record(store, "checkpoint-b")
    await store.save(record)
    await store.save(other)
    assert await store.supersede("checkpoint-a", since=store.now())
    assert await _status(store, record.token_hash) == "abandoned"
    assert await _status(store, other.token_hash) == "issued"  # only that checkpoint's pause
    assert not await store.claim(record.token_hash)
    assert await store.supersede("checkpoint-a", since=store.now())  # nothing left to supersede
    assert await store.supersede("never-recorded", since=store.now())


async def test_supersede_loses_to_a_claim_made_after_the_restore_started(
    make_store: Callable[..., ContinuationStore], clock: Clock
) -> None:
    store = make_store(clock=clock)
    early, late = _record(store, "checkpoint-early"), _record(store, "checkpoint-late")
    await store.save(early)
    await store.save(late)
    assert await store.claim(early.token_hash)
    clock.advance(1.0)
    since = store.now()
    assert await store.claim(late.token_hash)  # a resume claims while the restore starts
    assert not await store.supersede("checkpoint-late", since=since)
    assert await _status(store, late.token_hash) == "claimed"
    # A resume claimed before the restore started (and failed, or crashed): restoring is the owner's recovery.
    assert await store.supersede("checkpoint-early", since=since)


async def test_expired_records_are_not_claimed_or_abandoned_without_force(
    make_store: Callable[..., ContinuationStore], clock: Clock
) -> None:
    store = make_store(ttl=10.0, clock=clock)
    record = _record(store)
    await store.save(record)
    clock.advance(10.0)
    got = await store.get(record.token_hash)
    assert got is not None and got.status == "issued" and not got.is_claimable(store.now())
    assert await store.claim(record.token_hash) is False
    assert await store.abandon(record.token_hash) is False
    assert await store.abandon(record.token_hash, force=True) is True


@pytest.mark.parametrize("ttl", [timedelta(minutes=5), 300.0, 300])
def test_ttl_accepts_seconds_or_timedelta(make_store: Callable[..., ContinuationStore], ttl: float | timedelta) -> None:
    assert make_store(ttl=ttl).ttl_seconds == 300.0


@pytest.mark.parametrize("ttl", [0, -1.0, timedelta(0), float("inf"), float("nan"), 1e20])
def test_a_ttl_outside_a_positive_finite_range_is_rejected(
    make_store: Callable[..., ContinuationStore], ttl: float | timedelta
) -> None:
    with pytest.raises(ValueError, match="ttl"):
        make_store(ttl=ttl)


# ---------------------------------------------------------------- races (several store objects: several processes)


async def test_many_concurrent_claims_have_exactly_one_winner(make_store: Callable[..., ContinuationStore]) -> None:
    stores = [make_store() for _ in range(8)]  # eight connections / clients on one database
    record = _record(stores[0])
    await stores[0].save(record)
    results = await asyncio.gather(*(s.claim(record.token_hash) for s in stores for _ in range(8)))
    assert results.count(True) == 1 and len(results) == 64


async def test_claim_and_abandon_race_has_exactly_one_winner(make_store: Callable[..., ContinuationStore]) -> None:
    claimer, abandoner = make_store(), make_store()
    for _ in range(10):
        record = _record(claimer)
        await claimer.save(record)
        claimed, abandoned = await asyncio.gather(
            claimer.claim(record.token_hash), abandoner.abandon(record.token_hash)
        )
        assert claimed != abandoned


async def test_concurrent_supersede_and_claim_have_one_winner(make_store: Callable[..., ContinuationStore]) -> None:
    a, b = make_store(), make_store()
    for _ in range(10):
        record = _record(a, f"checkpoint-{secrets.token_hex(4)}")
        await a.save(record)
        since = a.now()
        claimed, superseded = await asyncio.gather(
            a.claim(record.token_hash), b.supersede(record.checkpoint_id, since=since)
        )
        assert claimed != superseded


async def test_300_concurrent_operations_on_one_store_object_all_succeed(store: ContinuationStore) -> None:
    records = [_record(store) for _ in range(100)]
    await asyncio.gather(*(store.save(record) for record in records))
    results = await asyncio.gather(
        *(store.claim(record.token_hash) for record in records),
        *(store.get(record.token_hash) for record in records),
    )
    assert results[:100] == [True] * 100
    assert all(record is not None for record in results[100:])


async def test_a_cancelled_claim_never_lets_two_claims_win_and_never_loses_the_record(
    make_store: Callable[..., ContinuationStore],
) -> None:
    store, checker = make_store(), make_store()
    for _ in range(20):
        record = _record(store)
        await store.save(record)
        task = asyncio.ensure_future(store.claim(record.token_hash, claimer="run"))
        await asyncio.sleep(random.uniform(0, 0.003))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # The cancelled call may still complete inside the store (a thread, a sent query): a later claim
        # then loses. Either way exactly one claim holds the record in the end, and it is never lost.
        won = await checker.claim(record.token_hash)
        assert await _status(checker, record.token_hash) == "claimed"
        if not task.cancelled():
            assert [task.result(), won].count(True) == 1


async def test_a_store_works_with_async_with_and_closes_at_its_end(
    make_store: Callable[..., ContinuationStore],
) -> None:
    opened = make_store()
    if not hasattr(opened, "__aenter__"):
        pytest.skip("a custom store without async with: the protocol asks only for aclose()")
    async with opened as store:
        assert store is opened
        record = _record(store)
        await store.save(record)
        assert await _status(store, record.token_hash) == "issued"
    await store.aclose()  # closing twice does nothing
