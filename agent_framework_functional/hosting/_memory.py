"""Free heap pages handed back to the system after requests, at most once per interval (glibc only).

A long-running host's live data stays flat (its stores are bounded), but glibc's allocator keeps the
pages that requests in flight freed and reaches new high-water marks when more of them overlap, so
RSS grows by steps of about 1 MB that never come back (``benchmarks/README.md``, ``soak_hosts.py``).
``malloc_trim(0)`` returns free pages inside the heap too, so RSS follows what is in use.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

DEFAULT_RELEASE_MEMORY_EVERY = 60.0
"""Seconds between two releases of free heap pages by a host, by default."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc), or None where it has none (musl, macOS, Windows)."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        trim = ctypes.CDLL(None).malloc_trim
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        return trim
    return None


class ReleaseFreeMemory:
    """ASGI middleware: when an HTTP request ends, hand free heap pages back if ``every`` seconds passed.

    The interval is shared by every instance in the process (the heap is the process's). One release
    walks the heap once (about a millisecond for a host's tens of MB), on the event loop, after the
    response was sent.

    Args:
        app: The ASGI app to wrap.

    Keyword Args:
        every: Seconds between two releases.

    Raises:
        ValueError: ``every`` is not a positive number.
    """

    _trim: Callable[[int], int] | None = None
    _looked_up = False
    _last = float("-inf")

    def __init__(self, app: ASGIApp, *, every: float = DEFAULT_RELEASE_MEMORY_EVERY) -> None:
        self.app = app
        self.every = float(check_release_every(every) or DEFAULT_RELEASE_MEMORY_EVERY)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if scope.get("type") == "http":
                self.release()

    def release(self) -> bool:
        """Hand free heap pages back now if ``every`` seconds passed since the last release; True if it did."""
        if time.monotonic() - ReleaseFreeMemory._last < self.every:
            return False
        return ReleaseFreeMemory.release_now()

    @staticmethod
    def release_now() -> bool:
        """Hand free heap pages back now, whatever the interval (a host's sweep, after it dropped something).

        Returns:
            True if the C library could (glibc), else False.
        """
        ReleaseFreeMemory._last = time.monotonic()
        if not ReleaseFreeMemory._looked_up:
            ReleaseFreeMemory._trim, ReleaseFreeMemory._looked_up = _malloc_trim(), True
        if ReleaseFreeMemory._trim is None:
            return False
        ReleaseFreeMemory._trim(0)
        return True


def add_release_once(app: Any, every: float | None) -> None:
    """Add :class:`ReleaseFreeMemory` to a Starlette ``app`` (not started) unless it has one or ``every`` is None."""
    if every is not None and not any(m.cls is ReleaseFreeMemory for m in app.user_middleware):
        app.add_middleware(ReleaseFreeMemory, every=every)


def check_release_every(every: float | None, name: str = "release_memory_every") -> float | None:
    """``every`` when it is None or a positive, finite number of seconds (infinity would release once, then never).

    Raises:
        ValueError: Anything else (the message names the option, ``name``).
    """
    if every is not None and (
        isinstance(every, bool)
        or not isinstance(every, int | float)  # pyright: ignore[reportUnnecessaryIsInstance]
        or not 0 < every <= sys.float_info.max  # NaN, infinity, and an int no float holds
    ):  # refused here: the middleware keeps a float, and the app would fail at its first request
        raise ValueError(f"{name} must be a positive, finite number of seconds or None, not {every!r}.")
    return every
