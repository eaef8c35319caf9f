"""Serve a deployer agent with DevUI's tracing switch on, for ``js/devui_traces.mjs``.

Usage: ``python devui_traces_server.py <port> <auth token>``. It uses DevUI's documented option,
``serve(..., instrumentation_enabled=True)``, and sets ``ENABLE_INSTRUMENTATION=true``, which DevUI's page
reads (``/meta``) to offer its Traces panel. It runs in its own process: DevUI installs a process-global
OpenTelemetry ``TracerProvider``, which the rest of the suite must not share.
"""

from __future__ import annotations

import os
import sys

os.environ["ENABLE_INSTRUMENTATION"] = "true"

from agent_framework_devui import serve

from agent_framework_functional import FunctionalWorkflowAgent, RunContext, workflow


@workflow(name="deployer", description="Asks one approval, then deploys.")
async def deployer(text: str, ctx: RunContext) -> str:
    """Pause once for a bool approval, then answer with text (what ``js/devui_traces.mjs`` clicks through)."""
    approved = await ctx.request_info({"action": "deploy", "target": text}, response_type=bool)
    return f"deployed: {text}" if approved else f"not deployed: {text}"


def build_agent() -> FunctionalWorkflowAgent:
    """One agent for every DevUI conversation."""
    return deployer.build().as_agent(name="deployer")


def main() -> None:
    """Serve until killed."""
    port, token = int(sys.argv[1]), sys.argv[2]
    serve(entities=[build_agent()], port=port, auth_token=token, instrumentation_enabled=True, auto_open=False)


if __name__ == "__main__":
    main()
