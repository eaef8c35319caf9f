"""The SQLite store deletes records past retention by itself, so its file stays bounded.

An injected clock (``FakeClock``) drives the schedule: a write purges when ``purge_interval`` has
passed since the store's last purge (the first write always does).
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from durable_support import FakeClock, new_record

from agent_framework_functional import SQLiteContinuationStore


def _rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM continuations").fetchone()[0])


async def test_writes_purge_expired_and_finished_records_at_most_once_per_interval(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "store.db"
    store = SQLiteContinuationStore(path, ttl=1000.0, retention=100.0, purge_interval=50.0, clock=clock)
    try:
        start = clock.now
        expired = new_record(store, expires_in=10.0)  # expires at start + 10
        claimed, abandoned, pending = new_record(store), new_record(store), new_record(store)
        for record in (expired, claimed, abandoned, pending):
            await store.save(record)  # the first save purges (nothing to delete yet)
        assert await store.claim(claimed.token_hash)  # finished at start
        assert await store.abandon(abandoned.token_hash)  # finished at start

        clock.now = start + 60.0  # a purge is due (last one at start), but nothing is past retention yet
        recent = new_record(store)
        await store.save(recent)
        assert await store.claim(recent.token_hash)  # finished at start + 60
        assert _rows(path) == 5

        clock.now = start + 105.0  # claimed and abandoned are now past retention, but the last purge was at +60
        await store.save(new_record(store))
        assert _rows(path) == 6  # no purge before the interval is over

        clock.now = start + 111.0  # interval over: this write purges first
        await store.save(new_record(store))
        assert await store.get(expired.token_hash) is None  # expired 101 s ago (> retention)
        assert await store.get(claimed.token_hash) is None  # claimed 111 s ago
        assert await store.get(abandoned.token_hash) is None  # abandoned 111 s ago
        kept = await store.get(pending.token_hash)
        assert kept is not None and kept.status == "issued"  # pending: never purged before expiry + retention
        kept = await store.get(recent.token_hash)
        assert kept is not None and kept.status == "claimed"  # finished only 51 s ago
        assert _rows(path) == 4
    finally:
        await store.aclose()


async def test_the_file_stays_bounded_under_a_steady_stream_of_pauses(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "store.db"
    store = SQLiteContinuationStore(path, ttl=30.0, retention=100.0, purge_interval=50.0, clock=clock)
    try:
        largest = 0
        for round_number in range(300):  # one pause every 10 s; two of three resumed, one left to expire
            record = new_record(store)
            await store.save(record)
            if round_number % 3:
                assert await store.claim(record.token_hash)
            largest = max(largest, _rows(path))
            clock.advance(10.0)
        # Kept: expired-or-finished within retention (<= 130 s of pauses) plus one interval of slack.
        assert largest <= (30 + 100 + 50) // 10 + 1
        assert _rows(path) < 300
    finally:
        await store.aclose()


async def test_purge_interval_none_turns_the_automatic_purge_off(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "store.db"
    store = SQLiteContinuationStore(path, ttl=10.0, retention=10.0, purge_interval=None, clock=clock)
    try:
        old = new_record(store)
        await store.save(old)
        assert await store.claim(old.token_hash)
        clock.advance(1000.0)
        await store.save(new_record(store))
        assert await store.get(old.token_hash) is not None  # no automatic purge
        assert await store.purge_expired() == 1  # the host purges when it likes
        assert await store.get(old.token_hash) is None
    finally:
        await store.aclose()


async def test_purge_expired_deletes_finished_records_past_retention(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteContinuationStore(tmp_path / "store.db", ttl=1000.0, retention=100.0, clock=clock)
    try:
        done, pending = new_record(store), new_record(store)
        await store.save(done)
        await store.save(pending)
        assert await store.abandon(done.token_hash)
        clock.advance(101.0)
        assert await store.purge_expired() == 1
        assert await store.get(done.token_hash) is None
        assert await store.get(pending.token_hash) is not None
    finally:
        await store.aclose()


async def test_purge_interval_accepts_a_timedelta_and_rejects_a_non_positive_one(tmp_path: Path) -> None:
    await SQLiteContinuationStore(tmp_path / "a.db", purge_interval=timedelta(minutes=1)).aclose()
    with pytest.raises(ValueError, match="purge_interval"):
        SQLiteContinuationStore(tmp_path / "b.db", purge_interval=0)
