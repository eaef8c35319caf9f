"""Data through a pause.

Request payloads and response values that are pydantic models, dataclasses, nested dicts and
datetimes must arrive as the same types after an in-memory resume, and after a checkpoint restore
in a separate Python process with ``FileCheckpointStorage`` (``allowed_checkpoint_types``). The
workflow and its types live in a small module written to ``tmp_path`` so both processes import
the very same code (the checkpoint's signature hash depends on it).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage, WorkflowCheckpoint
from pydantic import BaseModel

MODULE = "reliability_payloads"
ALLOWED = [f"{MODULE}:Ticket", f"{MODULE}:Decision", f"{MODULE}:Note"]

PAYLOADS_SOURCE = '''
"""Workflow and payload types shared by the test process and the restoring subprocess."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel

from agent_framework_functional import RunContext, step, workflow

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


class Ticket(BaseModel):
    id: int
    due: datetime
    tags: list[str]
    meta: dict[str, Any]


@dataclass
class Note:
    text: str
    at: datetime


@dataclass
class Decision:
    approved: bool
    at: datetime
    notes: list[Note] = field(default_factory=list)


@step
async def enrich(ticket: Ticket) -> Ticket:
    return ticket.model_copy(update={"tags": [*ticket.tags, "enriched"]})


def describe(value: Any) -> Any:
    """JSON description of a value: its type name and a JSON-safe dump, recursively for containers."""
    if isinstance(value, BaseModel):
        return {"type": type(value).__qualname__, "value": value.model_dump(mode="json")}
    if isinstance(value, (Decision, Note)):
        return {"type": type(value).__qualname__, "fields": {k: describe(v) for k, v in vars(value).items()}}
    if isinstance(value, dict):
        return {"type": "dict", "items": {k: describe(v) for k, v in value.items()}}
    if isinstance(value, list):
        return {"type": "list", "items": [describe(v) for v in value]}
    if isinstance(value, datetime):
        return {"type": "datetime", "value": value.isoformat()}
    return {"type": type(value).__name__, "value": value}


@workflow(name="payloads")
async def payloads(ticket: Ticket, ctx: RunContext) -> dict[str, Any]:
    enriched = await enrich(ticket)
    ctx.set_state("seen", {"at": T0, "ticket": enriched, "history": [Note("state", T0)]})
    decision = await ctx.request_info(
        {
            "ticket": enriched,
            "deadline": T0 + timedelta(days=1),
            "nested": {"notes": [Note("please review", T0)], "levels": {"a": [1, 2, {"b": T0}]}},
        },
        response_type=Decision,
    )
    revised = await ctx.request_info({"decision": decision, "ticket": enriched}, response_type=Ticket)
    return {
        "message": ticket,
        "enriched": enriched,
        "decision": decision,
        "revised": revised,
        "state": ctx.get_state("seen"),
    }


def sample_ticket() -> Ticket:
    return Ticket(id=7, due=T0, tags=["urgent"], meta={"owner": {"name": "ana", "since": "2020"}, "n": [1, 2]})


def sample_decision() -> Decision:
    return Decision(approved=True, at=T0 + timedelta(hours=2), notes=[Note("ok", T0 + timedelta(hours=3))])


def sample_revised() -> Ticket:
    return Ticket(id=8, due=T0 + timedelta(days=2), tags=["revised"], meta={"from": 7})
'''

RESTORE_SCRIPT = '''
"""Restore the first pause of the payloads workflow from a FileCheckpointStorage in a new process."""

import asyncio
import json
import sys
import warnings

sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")

from agent_framework import FileCheckpointStorage

import reliability_payloads as p


async def main() -> None:
    storage = FileCheckpointStorage(sys.argv[2], allowed_checkpoint_types=json.loads(sys.argv[4]))
    checkpoint = await storage.load(sys.argv[3])
    request = checkpoint.pending_request_info_events["auto::0"]
    wf = p.payloads.build(checkpoint_storage=storage)
    restored = await wf.run(checkpoint_id=sys.argv[3], responses={"auto::0": p.sample_decision()})
    second = restored.get_request_info_events()[0]
    done = await wf.run(
        responses={"auto::0": p.sample_decision(), "auto::1": p.sample_revised()},
        continuation_token=restored.continuation_token,
    )
    print(json.dumps({
        "checkpoint_request": p.describe(request.data),
        "second_request": p.describe(second.data),
        "restored_token": restored.continuation_token is not None,
        "output": p.describe(done.get_outputs()[0]),
        "final_token": done.continuation_token,
    }))


asyncio.run(main())
'''


@pytest.fixture
def payloads(tmp_path: Path) -> Iterator[ModuleType]:
    module_dir = tmp_path / "pkg"
    module_dir.mkdir()
    (module_dir / f"{MODULE}.py").write_text(textwrap.dedent(PAYLOADS_SOURCE), encoding="utf-8")
    sys.path.insert(0, str(module_dir))
    try:
        yield importlib.import_module(MODULE)
    finally:
        sys.path.remove(str(module_dir))
        sys.modules.pop(MODULE, None)


def expected_output(p: ModuleType) -> dict[str, Any]:
    enriched = p.sample_ticket().model_copy(update={"tags": ["urgent", "enriched"]})
    return {
        "message": p.sample_ticket(),
        "enriched": enriched,
        "decision": p.sample_decision(),
        "revised": p.sample_revised(),
        "state": {"at": p.T0, "ticket": enriched, "history": [p.Note("state", p.T0)]},
    }


def assert_same_types(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (actual, expected)
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys()
        for key in expected:
            assert_same_types(actual[key], expected[key])
    elif isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same_types(a, e)
    else:
        for name in _field_names(expected):
            assert_same_types(getattr(actual, name), getattr(expected, name))
    assert actual == expected


def _field_names(value: Any) -> list[str]:
    """The fields of a dataclass or pydantic model (none for anything else)."""
    if hasattr(value, "__dataclass_fields__"):
        return list(value.__dataclass_fields__)
    if isinstance(value, BaseModel):
        return list(type(value).model_fields)
    return []


@pytest.mark.parametrize("as_json", [False, True], ids=["objects", "json-answers"])
async def test_in_memory_resume_keeps_types(payloads: ModuleType, as_json: bool) -> None:
    p = payloads
    wf = p.payloads.build()
    paused = await wf.run(p.sample_ticket())
    (request,) = paused.get_request_info_events()
    assert_same_types(request.data["ticket"], p.sample_ticket().model_copy(update={"tags": ["urgent", "enriched"]}))
    assert_same_types(request.data["deadline"], p.T0 + timedelta(days=1))
    assert_same_types(request.data["nested"]["notes"], [p.Note("please review", p.T0)])
    decision: Any = p.sample_decision()
    revised: Any = p.sample_revised()
    if as_json:
        # What a host gets back from a human: JSON, which core coerces to a pydantic response type.
        # (Core does not coerce JSON into dataclasses: dataclass answers must be passed as objects.)
        revised = json.loads(revised.model_dump_json())
    second = await wf.run(responses={"auto::0": decision}, continuation_token=paused.continuation_token)
    (second_request,) = second.get_request_info_events()
    assert_same_types(second_request.data["decision"], p.sample_decision())
    done = await wf.run(
        responses={"auto::0": decision, "auto::1": revised}, continuation_token=second.continuation_token
    )
    assert_same_types(done.get_outputs()[0], expected_output(p))


async def test_agent_surfaces_typed_payloads_as_json(payloads: ModuleType) -> None:
    p = payloads
    agent = p.payloads.build().as_agent()
    paused = await agent.run(p.sample_ticket())
    (content,) = [c for m in paused.messages for c in m.contents if c.type == "function_approval_request"]
    arguments = content.function_call.parse_arguments()
    json.dumps(arguments)  # JSON-safe
    assert arguments["data"]["deadline"] == (p.T0 + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert arguments["data"]["nested"]["notes"][0]["text"] == "please review"
    # The workflow's own pending view still holds the typed objects.
    assert_same_types(agent.pending_requests[content.id].data["nested"]["notes"], [p.Note("please review", p.T0)])


async def test_checkpoint_restore_in_another_process_keeps_types(payloads: ModuleType, tmp_path: Path) -> None:
    p = payloads
    storage_dir = tmp_path / "checkpoints"
    storage = FileCheckpointStorage(storage_dir, allowed_checkpoint_types=ALLOWED)
    wf = p.payloads.build(checkpoint_storage=storage)
    paused = await wf.run(p.sample_ticket())
    assert paused.continuation_token is not None
    checkpoints = [WorkflowCheckpoint.from_dict(json.loads(f.read_text())) for f in storage_dir.glob("*.json")]
    pause = max(checkpoints, key=lambda cp: cp.timestamp)
    assert pause.pending_request_info_events
    script = tmp_path / "restore.py"
    script.write_text(textwrap.dedent(RESTORE_SCRIPT), encoding="utf-8")
    completed = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            str(script),
            str(tmp_path / "pkg"),
            str(storage_dir),
            pause.checkpoint_id,
            json.dumps(ALLOWED),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["checkpoint_request"] == p.describe(
        {
            "ticket": p.sample_ticket().model_copy(update={"tags": ["urgent", "enriched"]}),
            "deadline": p.T0 + timedelta(days=1),
            "nested": {"notes": [p.Note("please review", p.T0)], "levels": {"a": [1, 2, {"b": p.T0}]}},
        }
    )
    assert report["second_request"] == p.describe(
        {
            "decision": p.sample_decision(),
            "ticket": p.sample_ticket().model_copy(update={"tags": ["urgent", "enriched"]}),
        }
    )
    assert report["restored_token"] is True
    assert report["final_token"] is None
    assert report["output"] == p.describe(expected_output(p))
    # The types really were checked by name in the other process.
    assert report["output"]["items"]["decision"]["type"] == "Decision"
    assert report["output"]["items"]["revised"]["type"] == "Ticket"
    assert report["output"]["items"]["state"]["items"]["at"]["type"] == "datetime"
    assert datetime.fromisoformat(report["output"]["items"]["state"]["items"]["at"]["value"]) == p.T0
