"""DevUI's Traces panel after an approval: the pause and the resume as two traced turns, with our continuation spans.

DevUI runs in its own process (``devui_traces_server.py``) with its documented tracing switch
(``serve(..., instrumentation_enabled=True)``): it installs a process-global OpenTelemetry provider, which
the rest of the suite must not share. ``js/devui_traces.mjs`` drives the page in headless Chromium,
approves, opens the Traces panel and the continuation spans it draws under each turn's agent span
(``functional_workflow.continuation.issued`` in the pause's turn, ``.accepted`` and ``.spent`` in the
resume's, each with the token hash among its attributes), saves ``devui_traces.png`` (to a temporary folder;
``scripts/refresh_docs_images.sh`` saves it to ``docs/``) and prints the page's text and the spans DevUI
streamed.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hosting_support import CHROMIUM, ROOT, node_env, run_node, screenshot_dir

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

TOKEN = "traces-test-token"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_healthy(base: str, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert server.poll() is None, "DevUI exited at startup"
        try:
            if httpx.get(f"{base}/health", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("DevUI did not start within 90 s")


def _agent_span(turn: list[dict[str, Any]]) -> dict[str, Any]:
    (span,) = [span for span in turn if span["name"] == "invoke_agent deployer"]
    return span


def test_devui_traces_panel_shows_the_pause_and_the_resume(tmp_path: Path) -> None:
    assert Path(CHROMIUM).exists(), "Chromium is missing: scripts/services/chromium.sh installs it"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("devui_traces_server.py")), str(port), TOKEN],
        cwd=ROOT,
        env=node_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        _wait_healthy(base, server)
        screenshot = screenshot_dir(tmp_path) / "devui_traces.png"
        proc = run_node("devui_traces.mjs", base, TOKEN, "build 42", str(screenshot), timeout=180)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert screenshot.stat().st_size > 10_000
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("TRACES ")]
    paused_turn, resumed_turn = json.loads(line.removeprefix("TRACES "))
    paused, resumed = _agent_span(paused_turn), _agent_span(resumed_turn)
    assert paused["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    (issued,) = [e for e in paused["events"] if e["name"] == "functional_workflow.continuation.issued"]
    names = [event["name"] for event in resumed["events"]]
    assert names == ["functional_workflow.continuation.accepted", "functional_workflow.continuation.spent"]
    token_hash = issued["attributes"]["functional_workflow.continuation_token_hash"]
    assert len(token_hash) == 64
    assert all(e["attributes"]["functional_workflow.continuation_token_hash"] == token_hash for e in resumed["events"])
    assert issued["attributes"]["functional_workflow.request_ids"] == ["auto::0"]
    # What the Traces panel draws: under each turn's agent span, the continuation points as child spans
    # (DevUI draws span names and a leaf span's attributes, never span events).
    assert [span["name"] for span in paused_turn if span["name"].startswith("functional_workflow.")] == [
        "functional_workflow.continuation.issued"
    ]
    assert [span["name"] for span in resumed_turn if span["name"].startswith("functional_workflow.")] == names
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("PANEL ")]
    panel = json.loads(line.removeprefix("PANEL "))
    text: str = panel["text"]
    assert panel["shown"] == ["functional_workflow.continuation.issued", *names]
    # Turns are listed newest first: the resume (accepted, spent) above the pause (issued).
    accepted, spent = text.index(names[0]), text.index(names[1])
    assert accepted < spent < text.index("functional_workflow.continuation.issued")
    assert text.count(token_hash) == 3  # the opened spans' attributes: issued, accepted and spent name one token
