"""The samples and the benchmarks run end to end as scripts, the way a user runs them.

Each runs in a subprocess with ``sys.executable`` and without ``OPENAI_API_KEY``, so the
deterministic writer is used and no network is touched. The OpenAI writer path of
``hitl_review.py`` runs in process, against the Responses API faked with respx.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import httpx
import pytest
import respx
from agent_framework import Agent
from openai_wire import MODEL, RESPONSES_URL, chat_client, json_response, request_input_text
from script_runner import ROOT, assert_ok, run_script

pytestmark = pytest.mark.slow  # more than a few seconds in all: `pytest -m "not slow"` leaves it out

SAMPLES = ROOT / "samples"
BENCHMARKS = ROOT / "benchmarks"
FEEDBACK = "Mention the water temperature."


def final_text(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("Final text: ")]
    assert len(lines) == 1, stdout
    return lines[0].removeprefix("Final text: ")


def test_hitl_review_with_feedback_flag() -> None:
    out = assert_ok(run_script(SAMPLES / "hitl_review.py", "--feedback", FEEDBACK))
    assert "Writer: deterministic (no OPENAI_API_KEY)" in out
    assert "Paused: state=IDLE_WITH_PENDING_REQUESTS, request_id=auto::0" in out
    assert "Token keys: ['kind', 'token', 'version']" in out
    assert "Token kind='functional_workflow' version='1'" in out
    assert "Token JSON round trip equal: True" in out
    assert "Resumed: state=IDLE, continuation_token=None" in out
    assert FEEDBACK in final_text(out)
    assert "Replayed token rejected: ContinuationAuthorityError" in out
    # The draft step ran once: the resume replayed its cached result.
    assert out.count("[step] write_draft(") == 1
    assert out.count("[step] revise(") == 1


def test_hitl_review_prints_only_a_prefix_of_the_secret() -> None:
    out = assert_ok(run_script(SAMPLES / "hitl_review.py", "--feedback", FEEDBACK))
    match = re.search(r"secret=(\S+)\.\.\. \(truncated\)", out)
    assert match is not None, out
    prefix = match.group(1)
    assert len(prefix) == 6
    # No url-safe run as long as a 256-bit secret (43 characters) appears anywhere in the output.
    assert re.search(r"[A-Za-z0-9_-]{40,}", out) is None, out


def test_hitl_review_reads_feedback_from_the_prompt() -> None:
    out = assert_ok(run_script(SAMPLES / "hitl_review.py", "--topic", "oolong", stdin="Add a brewing time.\n"))
    assert "Your feedback: " in out
    assert "Draft for review:" in out
    assert "Oolong" in out
    assert "Add a brewing time." in final_text(out)
    assert "Replayed token rejected: ContinuationAuthorityError" in out


@pytest.mark.parametrize("script", ["hitl_review.py", "agent_hitl.py"])
def test_sample_without_feedback_abandons_and_fails(script: str) -> None:
    proc = run_script(SAMPLES / script, stdin="")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "No feedback given" in proc.stderr
    assert "Final text:" not in proc.stdout


def test_agent_hitl_streams_and_resumes() -> None:
    out = assert_ok(run_script(SAMPLES / "agent_hitl.py", "--feedback", FEEDBACK))
    update_lines = [line for line in out.splitlines() if line.startswith("update ")]
    published = re.escape("auto::0~") + "[A-Za-z0-9_-]{16}"  # core's id and its pause's tag
    assert len(update_lines) == 2
    assert re.fullmatch(f"update 1: function_call, approval request id={published}", update_lines[0])
    assert update_lines[1] == "update 2: continuation_token(kind='functional_workflow')"
    assert "Token on the last update: True" in out
    assert "Token from AgentResponse.from_updates: True" in out
    assert re.search(f"Approval request: id={published}, ", out)
    assert re.search(f"Pending requests on the agent: \\['{published}'\\]", out)
    resume_lines = [line for line in out.splitlines() if line.startswith("resume update: ")]
    assert len(resume_lines) == 1 and FEEDBACK in resume_lines[0]
    assert "Resumed: continuation_token=None, pending=[]" in out
    assert FEEDBACK in final_text(out)
    assert "Replayed token rejected: ContinuationAuthorityError" in out
    assert out.count("[step] write_draft(") == 1


def test_agent_hitl_reads_feedback_from_the_prompt() -> None:
    out = assert_ok(run_script(SAMPLES / "agent_hitl.py", stdin="Shorter, please.\n"))
    assert "Your feedback: " in out
    assert "Shorter, please." in final_text(out)
    assert "Replayed token rejected: ContinuationAuthorityError" in out


def test_benchmark_quick_prints_three_rows() -> None:
    out = assert_ok(run_script(BENCHMARKS / "bench_continuation.py", "--quick", timeout=120))
    header = re.compile(r"^row\s+core us\s+ours us\s+ours/core\s+paired$")
    assert any(header.match(line) for line in out.splitlines()), out
    number = r"\d+(?:\.\d+)?"
    for row in ("pause+resume", "pause+resume+ckpt", "plain run"):
        pattern = rf"^{re.escape(row)}\s+{number}\s+{number}\s+{number}\s+{number}$"
        assert any(re.match(pattern, line) for line in out.splitlines()), f"row {row!r} missing:\n{out}"


PEER_ROWS = (
    ("memory", "cpu"),
    ("memory+ckpt", "cpu"),
    ("disk same", "cpu"),
    ("disk same", "wall"),
    ("disk cold", "cpu"),
    ("disk cold", "wall"),
)


def test_peers_benchmark_quick_prints_every_row_with_numeric_ratios() -> None:
    # scripts/test.sh installs the bench extra; without it this fails with the script's install hint.
    out = assert_ok(run_script(BENCHMARKS / "bench_peers.py", "--quick", timeout=180))
    lines = out.splitlines()
    ratios = r"\s+ours/core\s+lg/core\s+ours/lg"
    header = re.compile(rf"^row\s+clock\s+core us\s+ours us\s+lg us{ratios}{ratios}$")
    assert any(header.match(line) for line in lines), out
    number, skipped = r"\s+\d+\.\d+", r"\s+-"
    if sys.version_info >= (3, 11):
        # Three sides' microseconds, then three best-block ratios and three paired ratios.
        cells = number * 9
        assert "LangGraph columns skipped" not in out
    else:  # LangGraph's async functional API needs 3.11: its cells are "-" and the script says why
        cells = number * 2 + skipped + (number + skipped * 2) * 2
        assert "LangGraph columns skipped: LangGraph's async functional API" in out and "needs Python 3.11" in out
    for row, clock in PEER_ROWS:
        pattern = re.compile(rf"^{re.escape(row)}\s+{clock}{cells}$")
        matching = [line for line in lines if pattern.match(line)]
        assert len(matching) == 1, f"row {row!r} ({clock}) missing or repeated:\n{out}"
        values = [float(value) for value in matching[0].removeprefix(row).split()[1:] if value != "-"]
        assert values and all(value > 0 for value in values), matching[0]


def load_sample(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"sample_{name}", SAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hitl_review_builds_an_openai_agent_only_with_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_framework.openai import OpenAIChatClient

    sample = load_sample("hitl_review")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert sample._openai_agent() is None
    assert sample.writer_description() == "deterministic (no OPENAI_API_KEY)"
    sample._openai_agent.cache_clear()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_CHAT_MODEL", raising=False)
    agent = sample._openai_agent()
    assert isinstance(agent, Agent)
    assert isinstance(agent.client, OpenAIChatClient)
    assert agent.client.model == MODEL
    assert sample.writer_description() == "OpenAI model"


async def test_hitl_review_openai_writer_drafts_once_and_revises_with_the_feedback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = load_sample("hitl_review")

    def answer(request: httpx.Request) -> httpx.Response:
        prompt = request_input_text(request)
        return json_response("Model revision." if "Reviewer feedback" in prompt else "Model draft.")

    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(RESPONSES_URL).mock(side_effect=answer)
        agent = Agent(client=chat_client(), name="writer", instructions="Write short posts.")
        monkeypatch.setattr(sample, "_openai_agent", lambda: agent)
        assert await sample.main(["--feedback", FEEDBACK]) == 0

    out = capsys.readouterr().out
    assert "Writer: OpenAI model" in out
    # One call for the draft, one for the revision: the resume replays the cached draft.
    assert route.call_count == 2
    revision_prompt = request_input_text(route.calls[-1].request)
    assert "Model draft." in revision_prompt and FEEDBACK in revision_prompt
    assert final_text(out) == "Model revision."
    assert "Replayed token rejected: ContinuationAuthorityError" in out
