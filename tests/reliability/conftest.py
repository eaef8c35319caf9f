"""Fixtures for the reliability suite: unraisable-exception recording and a clean-loop check."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import Any

import pytest


class UnraisableRecorder:
    """Collects everything Python reports through ``sys.unraisablehook`` while installed."""

    def __init__(self) -> None:
        self.records: list[str] = []

    def hook(self, unraisable: Any) -> None:
        self.records.append(f"{unraisable.exc_type.__name__}: {unraisable.exc_value!r} in {unraisable.object!r}")

    def assert_clean(self) -> None:
        gc.collect()
        assert self.records == [], self.records


@pytest.fixture
def unraisable() -> Iterator[UnraisableRecorder]:
    """Record unraisable exceptions (finalizers, ``__del__``, async generator cleanup) during a test."""
    recorder = UnraisableRecorder()
    previous = sys.unraisablehook
    sys.unraisablehook = recorder.hook
    try:
        yield recorder
        gc.collect()
    finally:
        sys.unraisablehook = previous


LOOP_NOISE = ("Task was destroyed", "never retrieved", "was never awaited", "Exception ignored", "Traceback")


class CleanLoopCheck:
    """Asserts that nothing leaked out of band: unraisables, destroyed tasks, unretrieved exceptions."""

    def __init__(self, caplog: pytest.LogCaptureFixture, recorder: UnraisableRecorder) -> None:
        self._caplog = caplog
        self._recorder = recorder

    def check(self) -> None:
        self._recorder.assert_clean()
        noisy = [
            f"{record.name}: {record.getMessage()}"
            for record in self._caplog.records
            if record.levelno >= 30 or any(noise in record.getMessage() for noise in LOOP_NOISE)
        ]
        assert noisy == []


@pytest.fixture
def clean_loop(caplog: pytest.LogCaptureFixture, unraisable: UnraisableRecorder) -> CleanLoopCheck:
    """Check after the interesting part of a test that no warning, log error or unraisable escaped."""
    caplog.set_level("DEBUG", logger="asyncio")
    caplog.set_level("WARNING")
    return CleanLoopCheck(caplog, unraisable)
