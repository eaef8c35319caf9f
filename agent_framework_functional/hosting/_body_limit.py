"""``BodyLimit``: the ASGI middleware that refuses an oversized request body with 413 before anything reads it."""

from __future__ import annotations

import json
from typing import Any


class BodyLimit:
    """ASGI middleware: a POST to ``path`` whose body exceeds ``max_bytes`` gets 413 before anything reads it."""

    def __init__(self, app: Any, *, path: str, max_bytes: int) -> None:
        self.app = app
        self.path = path
        self.max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                detail = json.dumps({"detail": f"The request body is larger than {self.max_bytes} bytes."}).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(detail)).encode())]
                await send({"type": "http.response.start", "status": 413, "headers": headers})
                await send({"type": "http.response.body", "body": detail})
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
