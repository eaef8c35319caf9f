"""Chat-native resume across real processes: a session serialised in one process, answered in others.

Every step is a separate Python process (``durable_agent_worker.py``) with its own store client and
``FileCheckpointStorage`` on the shared folder; only the state file (the session as JSON and the
approval request as a dict) travels between them. Resumed user code appends one line per run to
the effects file, so the file counts how often the pause really resumed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from durable_support import (
    AGENT_WORKER,
    StoreSpec,
    effect_lines,
    finish,
    record_status,
    run_worker,
    spawn_worker,
    start_race,
)

from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE, STALE_CONTINUATION_MESSAGE

pytestmark = pytest.mark.slow


def spawn(command: str, spec: StoreSpec, checkpoint_dir: Path, state: Path, *rest: str) -> subprocess.Popen[str]:
    return spawn_worker(command, spec.to_json(), str(checkpoint_dir), str(state), *rest, worker=AGENT_WORKER)


def run_one(command: str, spec: StoreSpec, checkpoint_dir: Path, state: Path, *rest: str) -> dict[str, Any]:
    return run_worker(command, spec.to_json(), str(checkpoint_dir), str(state), *rest, worker=AGENT_WORKER)


@pytest.mark.parametrize(
    ("workflow", "wrong", "right", "text"),
    [
        ("approve_bool", "result-for:nope:true", "approve", "shipped: draft about tea (approved=True)"),
        (
            "ask_verdict",
            "approve",
            'result:{"approved": true, "note": "ok"}',
            "Verdict: Verdict(approved=True, note='ok')",
        ),
    ],
    ids=["approval-to-bool", "function-result-to-pydantic"],
)
async def test_pause_in_one_process_answer_in_another_replay_in_a_third(
    store_spec: StoreSpec,
    checkpoint_dir: Path,
    tmp_path: Path,
    effects_file: Path,
    workflow: str,
    wrong: str,
    right: str,
    text: str,
) -> None:
    state = tmp_path / "state.json"
    paused = run_one("pause", store_spec, checkpoint_dir, state, workflow, "-")
    assert paused["outcome"] == "paused"
    token = paused["token"]
    session = json.loads(state.read_text(encoding="utf-8"))["session"]
    assert json.dumps(token) in json.dumps(session)  # the serialised session carries the token

    # A wrong answer in another process: a clear error, and the token is not spent.
    invalid = run_one("answer", store_spec, checkpoint_dir, state, workflow, wrong)
    assert invalid["outcome"] == "invalid" and "still pending" in invalid["message"]
    assert invalid["session_has_token"]
    assert await record_status(store_spec, token) == "issued"

    # The right answer in a process that never saw the pause resumes it.
    resumed = run_one("answer", store_spec, checkpoint_dir, state, workflow, right)
    assert resumed == {"outcome": "resumed", "text": text, "token": None, "session_has_token": False}
    assert await record_status(store_spec, token) == "claimed"

    # The same session replayed in a third process: its own token is spent (StaleContinuationError, an
    # authority error with its own message); the code ran once.
    replay = run_one("answer", store_spec, checkpoint_dir, state, workflow, right)
    assert replay == {"outcome": "rejected", "message": STALE_CONTINUATION_MESSAGE, "session_has_token": True}
    assert len(effect_lines(effects_file)) == 1


async def test_four_processes_answer_one_pause_with_the_same_session(
    store_spec: StoreSpec, checkpoint_dir: Path, tmp_path: Path, effects_file: Path
) -> None:
    state = tmp_path / "state.json"
    assert run_one("pause", store_spec, checkpoint_dir, state, "approve_bool", "-")["outcome"] == "paused"
    barrier = tmp_path / "barrier"
    barrier.mkdir()

    workers = [
        spawn("answer", store_spec, checkpoint_dir, state, "approve_bool", "approve", str(barrier), str(i))
        for i in range(4)
    ]
    start_race(barrier, 4)
    outcomes = finish(workers)

    assert sorted(o["outcome"] for o in outcomes) == ["rejected", "rejected", "rejected", "resumed"]
    # A loser of the claim gets the authority error; one that starts after the winner's claim finds the
    # session's own token spent (StaleContinuationError's message).
    rejected = {o["message"] for o in outcomes if o["outcome"] == "rejected"}
    assert rejected and rejected <= {AUTHORITY_ERROR_MESSAGE, STALE_CONTINUATION_MESSAGE}
    assert [o["text"] for o in outcomes if o["outcome"] == "resumed"] == ["shipped: draft about tea (approved=True)"]
    assert len(effect_lines(effects_file)) == 1  # exactly one process ran the resumed code
