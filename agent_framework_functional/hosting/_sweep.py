"""What every host adds to its app: free heap pages handed back (glibc keeps them), and a sweep of expired pauses.

Expiry is checked on access (AGENTS.md invariant 42); :class:`ExpirySweep` does it on a timer for an idle host.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from .._agent import FunctionalWorkflowAgent
from .._continuation import forget_spent
from .._session import sweep_expired

logger = logging.getLogger(__name__)

DEFAULT_RELEASE_MEMORY_EVERY = 60.0
"""Seconds between two releases of free heap pages by a host, by default."""

DEFAULT_SWEEP_EVERY = 60.0
"""Seconds between two sweeps of a host by default (at most a quarter of the agent's ``continuation_ttl``)."""

Purge = Callable[[], Awaitable[int]]
"""A host store's purge of what expired: returns how many entries it dropped."""


class ReleaseFreeMemory:
    """ASGI middleware: after an HTTP request, hand free heap pages back if ``every`` seconds passed (per process).

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

    def __init__(self, app: Any, *, every: float = DEFAULT_RELEASE_MEMORY_EVERY) -> None:
        self.app = app
        self.every = float(check_release_every(every) or DEFAULT_RELEASE_MEMORY_EVERY)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if scope.get("type") == "http":
                self.release()

    def release(self) -> bool:
        """Hand free heap pages back now if ``every`` seconds passed since the last release; True if it did."""
        return time.monotonic() - ReleaseFreeMemory._last >= self.every and ReleaseFreeMemory.release_now()

    @staticmethod
    def release_now() -> bool:
        """Hand free heap pages back now, whatever the interval; True if the C library could (glibc)."""
        ReleaseFreeMemory._last = time.monotonic()
        if not ReleaseFreeMemory._looked_up:
            ReleaseFreeMemory._looked_up = True
            with contextlib.suppress(OSError, AttributeError, TypeError):  # no malloc_trim: musl, macOS, Windows
                trim = ctypes.CDLL(None).malloc_trim
                trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
                ReleaseFreeMemory._trim = trim
        if ReleaseFreeMemory._trim is None:
            return False
        ReleaseFreeMemory._trim(0)
        return True


def check_release_every(every: float | None, name: str = "release_memory_every") -> float | None:
    """``every`` when it is None or a positive, finite number of seconds, else ``ValueError`` naming ``name``."""
    if every is not None and (
        isinstance(every, bool)
        or not isinstance(every, int | float)  # pyright: ignore[reportUnnecessaryIsInstance]
        or not 0 < every <= sys.float_info.max  # NaN, infinity, and an int no float holds
    ):
        raise ValueError(f"{name} must be a positive, finite number of seconds or None, not {every!r}.")
    return every


class ExpirySweep:
    """Every ``every`` seconds (at most a quarter TTL): the agent's expired pauses lapse, ``purges`` run."""

    def __init__(
        self, agent: FunctionalWorkflowAgent, *, every: float, purges: Sequence[Purge] = (), release_memory: bool = True
    ) -> None:
        self.agent = agent
        self.every = min(float(every), agent.continuation_ttl / 4)
        self.purges = tuple(purges)
        self.release_memory = release_memory
        self.task: asyncio.Task[None] | None = None
        self.sweeps = 0  # sweeps done (operators' metrics, tests)

    async def sweep(self) -> int:
        """Sweep once now; returns how many pauses, spent-token notes and store entries were dropped."""
        dropped = sweep_expired(self.agent.workflow) + forget_spent()
        for purge in self.purges:
            try:
                dropped += await purge()
            except Exception:  # a store outage must not end the sweeps; the next one tries again
                logger.warning("A host store's purge failed; the next sweep retries.", exc_info=True)
        if dropped and self.release_memory:
            ReleaseFreeMemory.release_now()
        self.sweeps += 1
        return dropped

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await self.sweep()
            except Exception:  # pragma: no cover - a bug; the host keeps its on-access expiry
                logger.exception("The sweep of expired pauses failed; the next one tries again.")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the sweep task while the block runs."""
        self.task = asyncio.get_running_loop().create_task(self._run(), name="agent-framework-functional-sweep")
        try:
            yield
        finally:
            task, self.task = self.task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def add_upkeep(
    app: Any,
    agent: FunctionalWorkflowAgent,
    release_memory_every: float | None,
    sweep_every: float | None,
    *,
    stores: Sequence[Any] = (),
    purges: Sequence[Purge] = (),
    closing: Sequence[Callable[[], Awaitable[object]]] = (),
) -> ExpirySweep | None:
    """Add :class:`ReleaseFreeMemory` and an :class:`ExpirySweep` (purging ``stores``, ``purges``) to ``app``.

    ``closing`` runs at the lifespan's end; ValueError for a bad interval, before ``app`` changes.
    """
    check_release_every(release_memory_every)
    seconds = check_release_every(sweep_every, "sweep_every")
    if release_memory_every is not None and not any(m.cls is ReleaseFreeMemory for m in app.user_middleware):
        app.add_middleware(ReleaseFreeMemory, every=release_memory_every)
    sweep = None
    if seconds is not None:
        found = [purge for store in stores if callable(purge := getattr(store, "purge_expired", None))]
        release = release_memory_every is not None
        sweep = ExpirySweep(agent, every=seconds, purges=[*found, *purges], release_memory=release)
        if not hasattr(app.state, "expiry_sweeps"):
            app.state.expiry_sweeps = []
        app.state.expiry_sweeps.append(sweep)
    if sweep is None and not closing:
        return None
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(started: Any) -> AsyncIterator[Any]:
        async with inner(started) as state, contextlib.AsyncExitStack() as stack:
            for close in closing:
                stack.push_async_callback(close)
            if sweep is not None:
                await stack.enter_async_context(sweep.running())
            yield state

    app.router.lifespan_context = lifespan
    return sweep
