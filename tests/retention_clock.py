"""A clock for checkpoint retention: the ``retention_clock`` fixture (``tests/conftest.py`` offers it)."""

from __future__ import annotations

import time

import pytest

from agent_framework_functional import _expiry


class RetentionClock:
    """The wall clock checkpoint retention reads (``_expiry.time``), moved forward by the test: no sleeping."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset

    async def pass_retention(self, seconds: float = 24 * 3600.0) -> None:
        """Move past ``seconds`` of retention, sweep (as the next run does) and wait for the deletions."""
        self.offset += seconds + 1
        _expiry.sweep_retained()
        await _expiry.checkpoint_deletions()


@pytest.fixture
def retention_clock(monkeypatch: pytest.MonkeyPatch) -> RetentionClock:
    """A finished run's checkpoints, kept for their retention, go on ``await retention_clock.pass_retention()``."""
    clock = RetentionClock()
    monkeypatch.setattr(_expiry, "time", clock)
    return clock
