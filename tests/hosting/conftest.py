"""Fixtures of the host integration tests: a server factory that stops what it started, and an HTTP client.

Helpers that the test modules import (workflows, the server thread, SSE parsing, the AG-UI order check)
live in ``hosting_support.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hosting_support import ServerThread


@pytest.fixture
def serve() -> Iterator[Callable[[Any], ServerThread]]:
    """Start an ASGI app on a real 127.0.0.1 socket (free port); every server started is stopped afterwards."""
    started: list[ServerThread] = []

    def start(app: Any) -> ServerThread:
        server = ServerThread(app).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    """A plain HTTP client; ``trust_env=False`` keeps loopback requests away from any proxy settings."""
    with httpx.Client(timeout=60, trust_env=False) as client:
        yield client


@pytest.fixture(scope="session")
def no_global_tracer_provider() -> None:
    """Keep DevUI from installing a process-global OpenTelemetry SDK ``TracerProvider``.

    DevUI's executor sets one when none is set yet, then adds a span processor for every request and shuts
    it down without removing it: every later span in the process logs "Processor is already shutdown" once
    per earlier request and the spans are real (memory), which breaks the rest of the suite run in this
    process (tests/reliability checks for log noise and memory). A no-op provider set first behaves like the
    default (no tracing) and makes DevUI leave the process alone; it only loses DevUI's trace panel.
    """
    from opentelemetry import trace

    if type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":  # nothing set yet
        trace.set_tracer_provider(trace.NoOpTracerProvider())
