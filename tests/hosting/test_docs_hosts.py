"""The host pages (docs/hosts/) run as written, and what they build completes a round trip over real HTTP.

Each page's Python blocks run with pytest-examples as module ``docs_example`` (``run_example`` of
tests/test_examples.py: the ``if __name__ == "__main__":`` line that would start a server is skipped). The app
the first block builds is then served on a free loopback port and driven once: input, the pause with its
request, the answer, the finished result. A client block of the page (AG-UI's JavaScript under node, the
Python clients of Responses, A2A, MCP and DevUI) is what drives it, pointed at the served app through the
environment variable it reads.
"""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from hosting_support import JS_DIR, ROOT, ServerThread, node_env
from pytest_examples import CodeExample, EvalExample, find_examples
from script_runner import run_command
from test_examples import run_example

PAGES = ROOT / "docs" / "hosts"
HOST_PAGES = ["agui.md", "devui.md", "responses.md", "a2a.md", "mcp.md"]


def python_blocks(page: str) -> list[CodeExample]:
    return list(find_examples(PAGES / page))


def run_page(page: str, eval_example: EvalExample, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    """Run every Python block of ``page`` in order (in ``tmp_path``); return each block's globals."""
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(page)
    assert blocks, f"{page} has no Python block"
    return [run_example(block, eval_example) for block in blocks]


def fenced(page: str, language: str) -> list[str]:
    """The bodies of the ``language`` fenced blocks of ``page``."""
    text = (PAGES / page).read_text()
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_every_host_page_is_driven_here() -> None:
    """A page added to docs/hosts/ gets its test here (tests/test_examples.py leaves these pages out)."""
    assert sorted(path.name for path in PAGES.glob("*.md")) == sorted(["index.md", *HOST_PAGES])
    assert not python_blocks("index.md")


def test_agui_page_round_trip_with_its_javascript_client(
    eval_example: EvalExample, serve: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The page's app served, and the page's ``@ag-ui/client`` script run under node against it: pause, answer."""
    (server_block,) = run_page("agui.md", eval_example, monkeypatch, tmp_path)
    server: ServerThread = serve(server_block["app"])
    (script,) = fenced("agui.md", "js")
    folder = tmp_path / "node"
    folder.mkdir()
    (folder / "node_modules").symlink_to(JS_DIR / "node_modules")  # the tests' @ag-ui/client, nothing written
    (folder / "client.mjs").write_text(script)
    node = shutil.which("node")
    assert node, "node is not on PATH"
    env = {**node_env(), "AGUI_URL": f"{server.base}/agent"}
    proc = run_command([node, "client.mjs"], stdin=None, timeout=120, cwd=folder, env=env)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"asks: auto::0~\S+", lines[0]), proc.stdout
    assert lines[-1] == "deployed v2", proc.stdout


async def test_responses_page_round_trip_with_its_openai_client(
    eval_example: EvalExample, serve: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The page's app served, and the page's ``openai`` client block run against it: pause, approve, text."""
    server_block, client_block = run_page("responses.md", eval_example, monkeypatch, tmp_path)
    server: ServerThread = serve(server_block["app"])
    monkeypatch.setenv("RESPONSES_URL", f"{server.base}/v1")
    assert await client_block["main"]() == "deployed v2"


async def test_a2a_page_round_trip_with_its_a2a_sdk_client(
    eval_example: EvalExample, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The page's app served at the address its ``url=`` names, and the page's client block run against it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    monkeypatch.setenv("PORT", str(port))
    monkeypatch.setenv("A2A_URL", url)
    server_block, client_block = run_page("a2a.md", eval_example, monkeypatch, tmp_path)
    server = ServerThread(server_block["app"], port=port).start()
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
            card = (await http.get(f"{url}.well-known/agent-card.json")).json()
        assert [interface["url"] for interface in card["supportedInterfaces"]] == [url]
        assert await client_block["main"]() == "deployed v2"
    finally:
        server.stop()


async def test_mcp_page_round_trip_with_its_mcp_client(
    eval_example: EvalExample, serve: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The page's app served (its key from ``MCP_STATE_KEY``), and the page's ``mcp`` client block run against it."""
    monkeypatch.setenv("MCP_STATE_KEY", "k" * 32)
    server_block, client_block = run_page("mcp.md", eval_example, monkeypatch, tmp_path)
    assert server_block["key"] == "k" * 32
    server: ServerThread = serve(server_block["app"])
    monkeypatch.setenv("MCP_URL", f"{server.base}/mcp")
    assert await client_block["main"]() == "deployed v2"


def test_mcp_page_says_how_a_text_key_is_read() -> None:
    """The MCP page's claim: a ``str`` key is its UTF-8 bytes, not decoded (32 hex characters are enough, and
    would not be if they were read as the 16 bytes they spell); fewer than 32 bytes is a ValueError."""
    from hosting_support import deployer

    from agent_framework_functional.hosting import mcp_app

    mcp_app(deployer.build().as_agent(), key="ab" * 16)
    mcp_app(deployer.build().as_agent(), key="é" * 16)  # 16 characters, 32 bytes of UTF-8
    with pytest.raises(ValueError, match="at least 32 bytes"):
        mcp_app(deployer.build().as_agent(), key="a" * 31)
    page = (PAGES / "mcp.md").read_text()
    assert "Text is not decoded: a `str` key is used as its UTF-8 bytes" in page


@pytest.mark.usefixtures("no_global_tracer_provider")
async def test_devui_page_round_trip_with_its_httpx_client(
    eval_example: EvalExample,
    serve: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What ``serve_devui`` serves for the page's agent (``devui_app`` with a known token, without blocking), and
    the page's ``httpx`` client block run against it: the entity, a conversation, the pause, Approve, the answer."""
    from agent_framework_functional.hosting import devui_app

    server_block, client_block = run_page("devui.md", eval_example, monkeypatch, tmp_path)
    server: ServerThread = serve(devui_app(server_block["agent"], auth_token="docs-page-token"))
    monkeypatch.setenv("DEVUI_URL", server.base)
    monkeypatch.setenv("DEVUI_AUTH_TOKEN", "docs-page-token")
    capsys.readouterr()
    assert await client_block["main"]() == "deployed v2"
    (asks,) = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        r"asks: \{'request_id': 'auto::0~\S+', 'data': \{'deploy': 'v2'\}, 'response_type': 'bool', "
        r"'response_schema': \{'type': 'boolean'\}\}",
        asks,
    ), asks

    monkeypatch.setenv("DEVUI_AUTH_TOKEN", "not-the-token")
    with pytest.raises(httpx.HTTPStatusError, match="401"):
        await client_block["main"]()


def test_devui_page_shows_the_screenshots_it_links() -> None:
    """The page's images are the ones docs/ holds (scripts/refresh_docs_images.sh refreshes them)."""
    images = re.findall(r"!\[[^\]]*\]\(\.\./([^)]+)\)", (PAGES / "devui.md").read_text())
    assert images and all((ROOT / "docs" / image).is_file() for image in images), images
