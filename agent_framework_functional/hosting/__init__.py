"""Host a FunctionalWorkflowAgent in one call per host, correct by default (extra ``hosting``).

``responses_app(agent)`` serves the OpenAI Responses API (``agent-framework-hosting-responses``). The
names are imported on first use, so ``import agent_framework_functional`` never needs a host package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .responses import responses_app

_LAZY = {"responses_app": ".responses"}

__all__ = ["responses_app"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(module, __name__), name)
    except ImportError as exc:
        raise ImportError(
            f"agent_framework_functional.hosting.{name} needs the hosting packages: "
            'pip install "agent-framework-functional[hosting]"'
        ) from exc
