"""One call per host, correct by default: AG-UI, DevUI, the OpenAI Responses API, A2A and MCP ("Hosts" in the docs).

Extras: ``hosting`` (``a2a_app`` needs ``a2a``, ``mcp_app`` ``mcp``); a host package is imported on first use.
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
