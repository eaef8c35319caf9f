"""One call per host, correct by default: AG-UI, DevUI and the OpenAI Responses API.

Installed with the ``hosting`` extra (``pip install "agent-framework-functional[hosting]"``):
``agui_endpoint`` (AG-UI; ``ThreadSnapshotStore`` keeps its thread snapshots in a session store),
``serve_devui`` / ``devui_app`` (DevUI) and ``responses_app`` (``agent-framework-hosting-responses``).
Each host package is imported only when its call is first used, so ``import agent_framework_functional``
never needs them. README "Host it" shows each call.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._snapshots import ThreadSnapshotStore
    from .agui import agui_endpoint
    from .devui import devui_app, serve_devui
    from .responses import responses_app

_MODULES = {
    "ThreadSnapshotStore": "._snapshots",
    "agui_endpoint": ".agui",
    "devui_app": ".devui",
    "responses_app": ".responses",
    "serve_devui": ".devui",
}

__all__ = ["ThreadSnapshotStore", "agui_endpoint", "devui_app", "responses_app", "serve_devui"]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(module, __name__), name)
    except ImportError as exc:
        raise ImportError(
            f"agent_framework_functional.hosting.{name} needs the hosting packages: "
            'pip install "agent-framework-functional[hosting]"'
        ) from exc
