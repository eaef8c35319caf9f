"""``responses_app`` when its continuation store fails: 503 ``store_unavailable``, not a client error.

Real servers on loopback: a Redis that keeps no append-only file (the store refuses it before its first
write: ``ContinuationStoreDurabilityError``, a retry cannot fix it) and a PostgreSQL address nothing listens
on (``PostgresUnavailableError`` within ``pool_timeout``: a retry may). Both were 409 ``conflict``,
an ``invalid_request_error`` with the server's settings in the message. The details go to the server's log.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hosting_support import deployer
from redis_server import RedisServer
from responses_support import Responses

from agent_framework_functional import (
    ContinuationStore,
    PostgresCheckpointStorage,
    PostgresContinuationStore,
    RedisCheckpointStorage,
    RedisContinuationStore,
)
from agent_framework_functional.hosting import responses_app

pytestmark = pytest.mark.slow


def _serve(serve: Any, http: httpx.Client, store: ContinuationStore, storage: Any) -> Responses:
    """The route over an agent on ``store`` and ``storage``, both closed on the server's loop when it stops."""
    agent = deployer.build(checkpoint_storage=storage, continuation_store=store).as_agent(name="deployer")

    @asynccontextmanager
    async def closing(_: FastAPI) -> AsyncIterator[None]:
        yield
        await store.aclose()
        await storage.aclose()

    app = FastAPI(lifespan=closing)
    app.mount("/", responses_app(agent))
    return Responses(http, serve(app).base)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_redis_that_cannot_keep_a_claim_is_a_503_not_worth_retrying(
    serve: Any, http: httpx.Client, redis_binary: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = RedisServer(redis_binary, tmp_path / "redis").start()  # snapshots only: no appendfsync always
    try:
        store = RedisContinuationStore(server.url)
        client = _serve(serve, http, store, RedisCheckpointStorage(server.url))
        with caplog.at_level(logging.ERROR):
            reply = client.post({"input": "v1"})
        assert reply.status_code == 503, reply.text
        error = reply.json()["error"]
        assert (error["type"], error["code"]) == ("server_error", "store_unavailable")
        assert reply.headers["x-should-retry"] == "false"
        assert "appendfsync" not in error["message"]  # the server's settings stay in its log
        assert any("appendfsync" in str(record.exc_info) for record in caplog.records if record.exc_info)
    finally:
        server.stop()


def test_an_unreachable_postgres_is_a_503_worth_retrying(serve: Any, http: httpx.Client) -> None:
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/postgres?connect_timeout=1"
    store = PostgresContinuationStore(url, pool_timeout=1)
    client = _serve(serve, http, store, PostgresCheckpointStorage(url, pool_timeout=1))
    reply = client.post({"input": "v2"})
    assert reply.status_code == 503, reply.text
    error = reply.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "store_unavailable")
    assert reply.headers["x-should-retry"] == "true" and "retry-after" in reply.headers
