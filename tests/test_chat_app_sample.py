"""Runs samples/chat_app.py as a user would, with scripted input and no API key."""

from __future__ import annotations

from pathlib import Path

from script_runner import env_without_openai, run_script

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "chat_app.py"


def run_sample(script: str) -> list[str]:
    env = env_without_openai(prefix="OPENAI_")
    completed = run_script(SAMPLE, stdin=script, timeout=120, cwd=None, env=env)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.splitlines()


def test_chat_pauses_for_approval_and_the_conversation_continues() -> None:
    lines = run_sample("hello\norder a teapot\nyes\norder a kettle\nno\nthanks\nquit\n")

    assert lines[1:] == [
        "you> hello",
        "bot> You said: hello.",
        "you> order a teapot",
        "bot> Approve: place order for a teapot? [yes/no]",
        "you> yes",
        "bot> Order #1 placed for a teapot.",
        "you> order a kettle",
        "bot> Approve: place order for a kettle? [yes/no]",
        "you> no",
        "bot> Okay, I did not place the order.",
        "you> thanks",
        "bot> You said: thanks.",
        "bye",
    ]


def test_end_of_input_ends_the_chat() -> None:
    assert run_sample("order a cup\n")[-2:] == ["bot> Approve: place order for a cup? [yes/no]", "bye"]
