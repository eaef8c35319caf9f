"""Deterministic counts per Postgres HITL cycle: ours and LangGraph's ``AsyncPostgresSaver``, same and other worker.

The paired timings of ``postgres_peers.py`` move with the machine's load; these counts do not. For each
of its four block makers, after three untimed cycles, ``--cycles`` cycles are counted:

* ``stmts``: ``psycopg.AsyncCursor.execute`` calls (statements sent one by one; LangGraph also sends
  pipelined ``executemany`` batches, which ``waits`` counts),
* ``waits``: ``psycopg.AsyncConnection.wait`` calls (each a send or a receive the client waits for),
* ``commits``: transactions committed on the server (``pg_stat_database.xact_commit``; reads count too),
* ``wal syncs``: ``pg_stat_wal.wal_sync`` (each an ``fdatasync`` of the write-ahead log, by a backend or
  the WAL writer), read after the block's connections closed so every backend has reported,
* ``py calls``: Python function calls in the client (``cProfile``'s total).

Run it (a throwaway cluster is started as the tests do, or pass ``--postgres-url``)::

    python benchmarks/postgres_cycle_counts.py [--cycles 20] [maker ...]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import logging
import pstats
import sys
import warnings
from pathlib import Path
from typing import Any

import postgres_peers as pp
import psycopg

COUNTS = {"waits": 0, "stmts": 0}


def _install_counters() -> None:
    """Count ``AsyncConnection.wait`` and ``AsyncCursor.execute`` calls (class attributes, this process only)."""
    wait, execute = psycopg.AsyncConnection.wait, psycopg.AsyncCursor.execute

    async def counted_wait(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS["waits"] += 1
        return await wait(self, gen, *args, **kwargs)

    async def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS["stmts"] += 1
        return await execute(self, query, *args, **kwargs)

    psycopg.AsyncConnection.wait = counted_wait  # type: ignore[method-assign]
    psycopg.AsyncCursor.execute = counted_execute  # type: ignore[method-assign]


def _server_counts(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        wal = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
        xact = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
    assert wal is not None and xact is not None
    return int(wal[0]), int(xact[0])


async def count(url: str, names: list[str], cycles: int) -> None:
    """Print the counts per cycle of each maker in ``names``."""
    makers = pp.makers(url)
    print(f"{'per cycle':<12}{'stmts':>8}{'waits':>8}{'commits':>9}{'wal syncs':>11}{'py calls':>10}")
    for name in names:
        block = await makers[name](Path("/tmp"))
        for _ in range(3):
            await block.cycle()
        await asyncio.sleep(1.2)  # backends report their statistics at most once a second
        wal_before, xact_before = _server_counts(url)
        COUNTS.update(waits=0, stmts=0)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(cycles):
            await block.cycle()
        profile.disable()
        counted = dict(COUNTS)
        await block.close()
        await asyncio.sleep(1.5)
        wal_after, xact_after = _server_counts(url)
        calls = pstats.Stats(profile).total_calls  # pyright: ignore[reportAttributeAccessIssue]
        print(
            f"{name:<12}{counted['stmts'] / cycles:>8.2f}{counted['waits'] / cycles:>8.2f}"
            f"{(xact_after - xact_before) / cycles:>9.2f}{(wal_after - wal_before) / cycles:>11.2f}"
            f"{calls / cycles:>10.0f}"
        )


def main() -> None:
    """Parse the arguments, start a cluster unless one is given, print the counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("makers", nargs="*", default=["ours same", "lg same", "ours other", "lg other"])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--postgres-url")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # core's experimental marker
    logging.getLogger("agent_framework_functional").setLevel(logging.ERROR)  # the unsealed-bodies warning
    _install_counters()
    server = None if args.postgres_url else pp.start_postgres()
    try:
        asyncio.run(count(args.postgres_url or server.url, args.makers, args.cycles))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
