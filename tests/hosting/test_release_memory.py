"""Hosts hand the allocator's free heap pages back after requests (``hosting/_sweep.py``)."""

from __future__ import annotations

import ctypes
import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hosting_support import deployer
from responses_support import approval_items, approve, serve_agent

from agent_framework_functional.hosting import ReleaseFreeMemory, agui_endpoint, devui_app, responses_app

TOKEN = "release-test-token"


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def _has_malloc_trim() -> bool:
    try:
        ctypes.CDLL(None).malloc_trim  # noqa: B018 - the lookup is the check
    except (OSError, AttributeError):
        return False
    return True


@pytest.fixture(autouse=True)
def _fresh_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as if the last release was long ago."""
    monkeypatch.setattr(ReleaseFreeMemory, "_last", float("-inf"))


def _middleware(app: Any) -> list[float]:
    return [m.kwargs["every"] for m in app.user_middleware if m.cls is ReleaseFreeMemory]


def test_both_app_hosts_release_by_default_and_can_be_told_not_to() -> None:
    agent = deployer.build().as_agent(name="deployer")
    assert _middleware(responses_app(agent)) == [60.0]
    assert _middleware(devui_app(agent, auth_token=TOKEN)) == [60.0]
    assert _middleware(responses_app(agent, release_memory_every=5)) == [5]
    assert _middleware(responses_app(agent, release_memory_every=None)) == []
    assert _middleware(devui_app(agent, auth_token=TOKEN, release_memory_every=None)) == []


def test_agui_endpoint_adds_the_release_to_the_app_once() -> None:
    agent = deployer.build().as_agent(name="deployer")
    app = FastAPI()
    agui_endpoint(app, agent, "/one", single_user=True)
    agui_endpoint(app, agent, "/two", single_user=True, release_memory_every=5)
    assert _middleware(app) == [60.0]  # the first endpoint's setting; one middleware for the process's heap
    quiet = FastAPI()
    agui_endpoint(quiet, agent, "/agent", single_user=True, release_memory_every=None)
    assert _middleware(quiet) == []


@pytest.mark.parametrize("every", [0, -1, float("nan"), float("inf"), True, "60", 10**400])
def test_a_bad_interval_is_refused_naming_the_option(every: Any) -> None:
    agent = deployer.build().as_agent(name="deployer")
    with pytest.raises(ValueError, match="release_memory_every must be a positive, finite number"):
        responses_app(agent, release_memory_every=every)
    with pytest.raises(ValueError, match="release_memory_every must be a positive, finite number"):
        devui_app(agent, auth_token=TOKEN, release_memory_every=every)
    app = FastAPI()
    with pytest.raises(ValueError, match="release_memory_every must be a positive, finite number"):
        agui_endpoint(app, agent, "/agent", single_user=True, release_memory_every=every)
    assert [r.path for r in app.routes] == [r.path for r in FastAPI().routes] and app.user_middleware == []


def test_releases_at_most_once_per_interval() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    middleware = ReleaseFreeMemory(app, every=3600)
    assert middleware.release() is _has_malloc_trim()
    assert middleware.release() is False  # within the interval: nothing
    assert ReleaseFreeMemory(app, every=3600).release() is False  # the interval is the process's, not the object's


def _released_since(mark: float) -> bool:
    """Wait until the middleware's release after a request has run (it runs once the response is sent)."""
    deadline = time.monotonic() + 10
    while ReleaseFreeMemory._last == mark and time.monotonic() < deadline:  # pyright: ignore[reportPrivateUsage]
        time.sleep(0.01)
    return ReleaseFreeMemory._last != mark  # pyright: ignore[reportPrivateUsage]


@pytest.mark.skipif(not _has_malloc_trim(), reason="the C library has no malloc_trim (not glibc)")
def test_a_request_through_the_host_gives_freed_heap_pages_back(serve: Any, http: httpx.Client) -> None:
    client = serve_agent(serve, http, deployer, release_memory_every=3600)
    paused = client.call({"input": "app-1", "conversation": "c-release"})
    assert _released_since(float("-inf"))  # the first request released (and started the interval)
    # Freed C-heap blocks glibc keeps: 40 MB of 1 KB buffers, every 64th kept so the heap cannot shrink from its top.
    buffers = [ctypes.create_string_buffer(1024) for _ in range(40_000)]
    kept = buffers[::64]
    del buffers
    before = _rss_kb()
    ReleaseFreeMemory._last = float("-inf")  # pyright: ignore[reportPrivateUsage]  # the interval has passed
    answered = client.call({"input": [approve(approval_items(paused)[0]["id"])], "conversation": "c-release"})
    assert _released_since(float("-inf"))
    deadline = time.monotonic() + 10
    while before - _rss_kb() < 10_000 and time.monotonic() < deadline:  # the release may still be running
        time.sleep(0.01)
    after = _rss_kb()
    assert "deployed" in str(answered["output"]) and kept
    assert before - after > 10_000, (before, after)  # KB: most of the freed 40 MB went back after the request
