"""One call per host, correct by default: AG-UI, DevUI, the OpenAI Responses API, A2A and MCP.

Installed with the ``hosting`` extra (``pip install "agent-framework-functional[hosting]"``):
``agui_endpoint`` (AG-UI; ``ThreadSnapshotStore`` keeps its thread snapshots in a session store),
``serve_devui`` / ``devui_app`` (DevUI) and ``responses_app`` (``agent-framework-hosting-responses``).
Each host package is imported only when its call is first used, so ``import agent_framework_functional``
never needs them. ``a2a_app`` (A2A) needs the ``a2a`` extra, ``mcp_app`` (an MCP tool) the ``mcp``
extra. ``ReleaseFreeMemory`` (ASGI middleware every hosting call adds) hands the allocator's free heap pages back
after requests; every call's app also runs a task in its lifespan that releases expired pauses with no request
(``sweep_every``). README "Host it" shows each call.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._snapshots import ThreadSnapshotStore
    from ._sweep import ReleaseFreeMemory
    from .a2a import a2a_app
    from .agui import agui_endpoint
    from .devui import devui_app, serve_devui
    from .mcp import mcp_app
    from .responses import responses_app

_MODULES = {
    "ReleaseFreeMemory": "._sweep",
    "ThreadSnapshotStore": "._snapshots",
    "a2a_app": ".a2a",
    "agui_endpoint": ".agui",
    "devui_app": ".devui",
    "mcp_app": ".mcp",
    "responses_app": ".responses",
    "serve_devui": ".devui",
}

_EXTRAS = {".a2a": "a2a", ".mcp": "mcp"}

__all__ = [
    "ReleaseFreeMemory",
    "ThreadSnapshotStore",
    "a2a_app",
    "agui_endpoint",
    "devui_app",
    "mcp_app",
    "responses_app",
    "serve_devui",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(module, __name__), name)
    except ImportError as exc:
        extra = _EXTRAS.get(module, "hosting")
        raise ImportError(
            f"agent_framework_functional.hosting.{name} needs the {extra} packages: "
            f'pip install "agent-framework-functional[{extra}]"'
        ) from exc
