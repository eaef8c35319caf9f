"""Serve the DevUI sample's agent with DevUI's tracing switch on, for ``js/devui_traces.mjs``.

Usage: ``python devui_traces_server.py <port> <auth token>``. It uses DevUI's documented option,
``serve(..., instrumentation_enabled=True)``, and sets ``ENABLE_INSTRUMENTATION=true``, which DevUI's page
reads (``/meta``) to offer its Traces panel. It runs in its own process: DevUI installs a process-global
OpenTelemetry ``TracerProvider``, which the rest of the suite must not share.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "samples"))
os.environ["ENABLE_INSTRUMENTATION"] = "true"

from agent_framework_devui import serve
from host_devui import build_agent


def main() -> None:
    """Serve until killed."""
    port, token = int(sys.argv[1]), sys.argv[2]
    serve(entities=[build_agent()], port=port, auth_token=token, instrumentation_enabled=True, auto_open=False)


if __name__ == "__main__":
    main()
