"""samples/streaming_chat.py and benchmarks/bench_streaming.py run end to end as scripts.

Each runs in a subprocess with ``sys.executable`` and without ``OPENAI_API_KEY``, so the local
streaming agent is used and no network is touched. No timing is asserted (benchmarks/ holds goals).
"""

from __future__ import annotations

import re
from pathlib import Path

import script_runner
from script_runner import ROOT, assert_ok

ANSWER = (
    "Sunlight scatters off the molecules in the air, and blue light scatters far more than red, "
    "so blue reaches your eyes from every part of the sky."
)


def run_script(path: Path, *args: str, timeout: float = 120) -> str:
    return assert_ok(script_runner.run_script(path, *args, timeout=timeout))


def line_with(prefix: str, out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, out
    return lines[0].removeprefix(prefix)


def test_streaming_chat_streams_the_answer_once_and_live() -> None:
    out = run_script(ROOT / "samples" / "streaming_chat.py", "--delay-ms", "5")
    assert line_with("Inner agent: ", out) == "deterministic local agent (no OPENAI_API_KEY)"
    assert line_with("Progress: ", out) == "{'stage': 'answering', 'question': 'Why is the sky blue?'}"
    assert line_with("Answer: ", out) == ANSWER  # the chunks, printed as they came, add up to the answer
    chunks = re.fullmatch(r"(\d+); first after \d+ ms, all after \d+ ms", line_with("Chunks: ", out))
    assert chunks is not None and int(chunks.group(1)) == len(ANSWER.split(" "))
    assert line_with("First chunk arrived while the workflow was still running: ", out) == "True"
    assert line_with("Final text: ", out) == ANSWER  # once, not twice
    assert line_with("Same text without streaming: ", out) == "True"
    # Order: progress note, then the answer, then the summary lines.
    assert out.index("Progress: ") < out.index("Answer: ") < out.index("Chunks: ") < out.index("Final text: ")


def test_streaming_chat_answers_other_questions() -> None:
    out = run_script(ROOT / "samples" / "streaming_chat.py", "--question", "What is tea?", "--delay-ms", "0")
    assert line_with("Final text: ", out) == "I have no notes on 'What is tea?' yet, sorry."
    assert line_with("Same text without streaming: ", out) == "True"


def test_bench_streaming_quick_prints_both_parts() -> None:
    out = run_script(ROOT / "benchmarks" / "bench_streaming.py", "--quick", timeout=180)
    number = r"\d+(?:\.\d+)?"
    lines = out.splitlines()
    assert any(re.match(r"^side\s+first ms\s+total ms\s+first/total$", line) for line in lines), out
    for side in ("core", "ours"):
        assert any(re.match(rf"^{side}\s+{number}\s+{number}\s+{number}$", line) for line in lines), out
    assert any(re.match(r"^path\s+us/update$", line) for line in lines), out
    for path in ("workflow stream", "agent stream, text", "agent stream, updates", "core add_event \\(buffered\\)"):
        assert any(re.match(rf"^{path}\s+-?{number}$", line) for line in lines), f"{path} missing:\n{out}"
    assert re.search(r"^target: ours first/total <= 0\.05: (met|MISSED)$", out, re.MULTILINE), out
    assert re.search(r"^target: workflow stream < 20 us/update: (met|MISSED)$", out, re.MULTILINE), out
