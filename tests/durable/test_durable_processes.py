"""Real worker processes race for one pause; a SIGKILL after the claim spends the token.

Every worker is a separate Python process (``durable_worker.py``) that opens its own store on the
shared database and its own ``FileCheckpointStorage`` on the shared folder. Resumed user code
appends one line per run to the effects file, so the file counts how often a pause really resumed.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from agent_framework import FileCheckpointStorage
from durable_support import (
    StoreSpec,
    close_store,
    effect_lines,
    finish,
    pause_here,
    record_status,
    spawn_worker,
    start_race,
    wait_for,
)
from durable_workflows import approval

from agent_framework_functional import ContinuationAuthorityError, continuation_token_hash
from agent_framework_functional._errors import AUTHORITY_ERROR_MESSAGE

pytestmark = pytest.mark.slow


def _args(spec: StoreSpec, checkpoint_dir: Path, state: Path) -> list[str]:
    return [spec.to_json(), str(checkpoint_dir), str(state)]


async def test_eight_processes_race_to_resume_one_pause(
    store_spec: StoreSpec, checkpoint_dir: Path, tmp_path: Path, effects_file: Path
) -> None:
    state = tmp_path / "state.json"
    args = _args(store_spec, checkpoint_dir, state)
    assert finish([spawn_worker("pause", *args)]) == [{"outcome": "paused"}]  # paused in its own process
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    workers = [spawn_worker("resume", *args, str(barrier), str(i)) for i in range(8)]
    start_race(barrier, 8)
    outcomes = finish(workers)
    resumed = [o for o in outcomes if o["outcome"] == "resumed"]
    rejected = [o for o in outcomes if o["outcome"] == "rejected"]
    assert len(resumed) == 1 and len(rejected) == 7
    assert resumed[0]["outputs"] == ["shipped: draft about tea (approved)"]
    assert {o["message"] for o in rejected} == {AUTHORITY_ERROR_MESSAGE}
    assert len(effect_lines(effects_file)) == 1  # the resumed code ran exactly once
    token = json.loads(state.read_text(encoding="utf-8"))["token"]
    assert await record_status(store_spec, token) == "claimed"


async def test_resume_in_a_races_abandon_in_b(
    store_spec: StoreSpec, checkpoint_dir: Path, tmp_path: Path, effects_file: Path
) -> None:
    seen: set[tuple[str, str]] = set()
    for round_number in range(3):
        state = tmp_path / f"state-{round_number}.json"
        data = await pause_here(store_spec, checkpoint_dir, state)
        barrier = tmp_path / f"barrier-{round_number}"
        barrier.mkdir()
        args = _args(store_spec, checkpoint_dir, state)
        before = len(effect_lines(effects_file))
        workers = [spawn_worker("resume", *args, str(barrier), "a"), spawn_worker("abandon", *args, str(barrier), "b")]
        start_race(barrier, 2)
        resume, abandon = (o["outcome"] for o in finish(workers))
        seen.add((resume, abandon))
        ran = len(effect_lines(effects_file)) - before
        status = await record_status(store_spec, data["token"])
        assert (resume, abandon, ran, status) in {
            ("resumed", "rejected", 1, "claimed"),
            ("rejected", "abandoned", 0, "abandoned"),
        }
    assert seen  # each round had exactly one winner (which one is up to the scheduler)


async def test_sigkill_after_the_claim_spends_the_token_and_the_owner_restores(
    store_spec: StoreSpec, checkpoint_dir: Path, tmp_path: Path, effects_file: Path
) -> None:
    state = tmp_path / "state.json"
    data = await pause_here(store_spec, checkpoint_dir, state)
    marker = tmp_path / "in-resumed-code"
    args = _args(store_spec, checkpoint_dir, state)
    victim = spawn_worker("resume", *args, env={"AFF_DURABLE_HANG": str(marker)})
    try:
        wait_for(marker.exists, what="the worker to reach resumed user code")
        os.kill(victim.pid, signal.SIGKILL)
    finally:
        victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    assert len(effect_lines(effects_file)) == 1  # it did run (part of) the resumed code

    # The token is spent: at most once, even though the run never finished.
    assert await record_status(store_spec, data["token"]) == "claimed"
    retry = finish([spawn_worker("resume", *args)])
    assert retry == [{"outcome": "rejected", "message": AUTHORITY_ERROR_MESSAGE}]
    assert len(effect_lines(effects_file)) == 1

    # The owner recovers by restoring the pause's checkpoint (the record says which).
    store = store_spec.open()
    try:
        record = await store.get(continuation_token_hash(data["token"]))
        assert record is not None
        wf = approval.build(checkpoint_storage=FileCheckpointStorage(checkpoint_dir), continuation_store=store)
        with pytest.raises(ContinuationAuthorityError):
            await wf.run(responses={data["request_id"]: "approved"}, continuation_token=data["token"])
        done = await wf.run(checkpoint_id=record.checkpoint_id, responses={data["request_id"]: "approved"})
        assert done.get_outputs() == ["shipped: draft about tea (approved)"]
    finally:
        await close_store(store)
