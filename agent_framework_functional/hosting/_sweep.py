"""What every host adds to its app: free heap pages handed back, and a sweep task that releases expired pauses.

A long-running host's live data stays flat (its stores are bounded), but glibc's allocator keeps the pages that
requests in flight freed, so RSS grows by steps of about 1 MB that never come back (``benchmarks/README.md``,
``soak_hosts.py``): :class:`ReleaseFreeMemory` calls ``malloc_trim(0)`` after requests, at most once per interval.

Expiry is checked on access (AGENTS.md invariant 42), so a host that gets no request would keep every pause
that expired after its last one, and the sessions, snapshots and conversations holding them, for good. A
sweep does on a timer what access does: the agent's expired pauses lapse (token, instance and checkpoint go,
``_session.sweep_expired``), the host's stores drop what expired, the spent-token notes past their time go,
and, when anything was dropped, free heap pages go back to the system (``ReleaseFreeMemory.release_now``).
:func:`add_upkeep` adds both to a host's app: the sweep runs inside the app's lifespan.
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


DEFAULT_SWEEP_EVERY = 60.0
"""Seconds between two sweeps of a host by default (at most a quarter of the agent's ``continuation_ttl``)."""

Purge = Callable[[], Awaitable[int]]
"""A host store's purge of what expired: returns how many entries it dropped."""


class ExpirySweep:
    """Every ``every`` seconds: the agent's expired pauses lapse, the host's stores purge, free pages go back.

    Args:
        agent: The host's agent.

    Keyword Args:
        every: Seconds between two sweeps; the interval used is at most a quarter of the agent's
            ``continuation_ttl``, so a pause is released within 1.25 TTLs with no request at all.
        purges: The host's stores' purges (session store, snapshots, DevUI's conversations, AG-UI's approvals).
        release_memory: Hand free heap pages back after a sweep that dropped something.
    """

    def __init__(
        self,
        agent: FunctionalWorkflowAgent,
        *,
        every: float,
        purges: Sequence[Purge] = (),
        release_memory: bool = True,
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

    def start(self) -> None:
        """Start the sweep task on the running loop (once)."""
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run(), name="agent-framework-functional-sweep")

    async def stop(self) -> None:
        """Cancel the sweep task and wait for it to end."""
        task, self.task = self.task, None
        if task is not None:
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
    """What every host adds to its Starlette or FastAPI ``app`` (not started yet) so memory follows live data.

    :class:`ReleaseFreeMemory` (once per app: the first host's ``release_memory_every``), and an
    :class:`ExpirySweep` every ``sweep_every`` seconds inside the app's lifespan: it starts after the app's own
    lifespan started and stops before it ends; several hosts on one app each add theirs, listed in
    ``app.state.expiry_sweeps``. Each of ``stores`` that has a ``purge_expired`` coroutine method (the
    package's session stores, ``ThreadSnapshotStore``, DevUI's bounded conversations) is purged, then each
    of ``purges`` runs. Each of ``closing`` is awaited when the lifespan ends, after the sweep stopped.
    Starlette does not run a mounted app's lifespan: there pauses expire on access only.

    Returns:
        The sweep, or None when ``sweep_every`` is None.

    Raises:
        ValueError: ``release_memory_every`` or ``sweep_every`` is not a positive, finite number or None
            (checked before ``app`` changes).
    """
    check_release_every(release_memory_every)
    seconds = check_release_every(sweep_every, "sweep_every")
    add_release_once(app, release_memory_every)
    sweep = None
    if seconds is not None:
        found = [purge for store in stores if callable(purge := getattr(store, "purge_expired", None))]
        release = release_memory_every is not None
        sweep = ExpirySweep(agent, every=seconds, purges=[*found, *purges], release_memory=release)
        if not hasattr(app.state, "expiry_sweeps"):
            app.state.expiry_sweeps = []
        app.state.expiry_sweeps.append(sweep)
    if sweep is not None or closing:
        _run_in_lifespan(app, sweep, closing)
    return sweep


def _run_in_lifespan(app: Any, sweep: ExpirySweep | None, closing: Sequence[Callable[[], Awaitable[object]]]) -> None:
    """Wrap ``app``'s lifespan: ``sweep`` runs while the app serves; ``closing`` is awaited at its end."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(started: Any) -> AsyncIterator[Any]:
        async with inner(started) as state:
            if sweep is not None:
                sweep.start()
            try:
                yield state
            finally:
                if sweep is not None:
                    await sweep.stop()
                for close in closing:
                    await close()

    app.router.lifespan_context = lifespan
