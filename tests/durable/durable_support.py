"""Helpers shared by the durable tests and their worker processes (no fixtures here: see conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent_framework_functional import ContinuationStore, RedisContinuationStore, SQLiteContinuationStore

HERE = Path(__file__).resolve().parent
WORKER = HERE / "durable_worker.py"


@dataclass(frozen=True)
class StoreSpec:
    """How to open the same continuation store in any process."""

    kind: str  # "sqlite" or "redis"
    location: str  # database file, or redis URL
    namespace: str = "aff-test"

    def open(self, *, ttl: float | None = None, clock: Callable[[], float] | None = None) -> ContinuationStore:
        options: dict[str, Any] = {}
        if ttl is not None:
            options["ttl"] = ttl
        if clock is not None:
            options["clock"] = clock
        if self.kind == "sqlite":
            return SQLiteContinuationStore(self.location, **options)
        return RedisContinuationStore(self.location, namespace=self.namespace, **options)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> StoreSpec:
        return cls(**json.loads(text))


async def close_store(store: ContinuationStore) -> None:
    closer = getattr(store, "aclose", None)
    if closer is not None:
        await closer()


def spawn_worker(command: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``durable_worker.py <command> <args>`` with the test's environment plus ``env``."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONWARNINGS"] = "ignore"
    return subprocess.Popen(
        [sys.executable, str(WORKER), command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )


def wait_for(predicate: Callable[[], bool], *, timeout: float = 120.0, what: str = "condition") -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds (a hang guard, not a timing check)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def finish(workers: Sequence[subprocess.Popen[str]], *, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Wait for every worker and return the JSON outcome each printed on its last stdout line."""
    outcomes: list[dict[str, Any]] = []
    for worker in workers:
        out, err = worker.communicate(timeout=timeout)
        assert worker.returncode == 0, f"worker failed ({worker.returncode}):\n{out}\n{err}"
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    return outcomes


def start_race(barrier: Path, count: int) -> None:
    """Wait until ``count`` workers are ready at ``barrier``, then release them all at once."""
    wait_for(lambda: len(list(barrier.glob("ready-*"))) >= count, what=f"{count} workers to be ready")
    (barrier / "go").write_text("go", encoding="utf-8")


def effect_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


class FakeClock:
    """A settable clock for expiry tests (the stores take ``clock=``)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
