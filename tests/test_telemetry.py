"""Continuations are observable: span events and metrics, recorded by the OpenTelemetry SDK's in-memory exporter.

``tests/telemetry_probe.py`` drives a workflow and an agent in a subprocess with the SDK's
``InMemorySpanExporter`` and ``InMemoryMetricReader`` as the process's providers (set once per
process, so not here) and prints what was recorded.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from script_runner import ROOT, run_command

from agent_framework_functional import _telemetry as telemetry


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    completed = run_command([sys.executable, str(ROOT / "tests" / "telemetry_probe.py")], timeout=120)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def _events(recorded: dict[str, Any], span_name: str) -> list[list[dict[str, Any]]]:
    return [span["events"] for span in recorded["spans"] if span["name"] == span_name]


def test_every_point_of_a_continuations_life_is_a_span_event_with_the_token_hash(recorded: dict[str, Any]) -> None:
    (events,) = _events(recorded, "workflow_calls")
    names = [event["name"].rsplit(".", 1)[1] for event in events]
    reasons = [event["attributes"].get("error.type") for event in events if event["name"] == telemetry.EVENT_REJECTED]
    assert names == [
        "issued",
        "rejected",
        "rejected",
        "rejected",
        "rejected",
        "accepted",
        "spent",
        "rejected",
        "issued",
        "abandoned",
        "restored",
        "issued",
    ]
    assert reasons == [
        telemetry.PENDING_CONFLICT,
        telemetry.TYPE_MISMATCH,
        telemetry.BAD_TOKEN,
        telemetry.RUNNING,
        telemetry.SPENT,
    ]
    first = recorded["paused_hash"]
    for event in events[:8]:
        if event["attributes"].get("error.type") in (telemetry.PENDING_CONFLICT, telemetry.BAD_TOKEN):
            continue  # no token, or another token
        assert event["attributes"][telemetry.ATTR_TOKEN_HASH] == first, event
    assert events[0]["attributes"][telemetry.ATTR_REQUEST_IDS] == ["auto::0"]
    assert events[6]["attributes"][telemetry.ATTR_REQUEST_IDS] == ["auto::0"]
    assert all(event["attributes"]["workflow.name"] == "probe" for event in events)


def test_no_secret_or_answer_appears_anywhere_in_the_telemetry(recorded: dict[str, Any]) -> None:
    dumped = json.dumps({"spans": recorded["spans"], "metrics": recorded["metrics"]})
    assert len(recorded["tokens"]) == 6
    for secret in recorded["tokens"] + recorded["answers"]:
        assert secret not in dumped


def test_the_agent_makes_invoke_agent_spans_with_cores_attributes_and_the_continuation_events(
    recorded: dict[str, Any],
) -> None:
    spans = [span for span in recorded["spans"] if span["name"] == "invoke_agent prober"]
    assert len(spans) == 4  # pause and resume, non-streaming then streaming
    for span in spans:
        attributes = span["attributes"]
        assert attributes["gen_ai.operation.name"] == "invoke_agent"
        assert attributes["gen_ai.agent.name"] == "prober"
        assert attributes["gen_ai.agent.id"] == "FunctionalWorkflowAgent_prober"
        assert attributes["gen_ai.provider.name"] == "microsoft.agent_framework"
    names = [[event["name"].rsplit(".", 1)[1] for event in span["events"]] for span in spans]
    assert names == [["issued"], ["accepted", "spent"], ["issued"], ["accepted", "spent"]]
    assert recorded["agent_text"] == "deploy: True"


def test_metrics_follow_the_opentelemetry_naming_and_count_what_happened(recorded: dict[str, Any]) -> None:
    metrics = recorded["metrics"]
    pending = {point["attributes"]["workflow.name"]: point["value"] for point in metrics[telemetry.METRIC_PENDING]}
    # The restored run's pause is still pending; a pause resumed by another worker: +1 there, -1 here.
    assert pending == {"probe": 1, "probe_bool": 0, "probe_store": 0}
    assert {point["unit"] for point in metrics[telemetry.METRIC_PENDING]} == {"{continuation}"}
    waits = {point["attributes"]["workflow.name"]: point for point in metrics[telemetry.METRIC_WAIT]}
    assert waits["probe"]["count"] == 1 and waits["probe_bool"]["count"] == 2
    assert waits["probe"]["unit"] == "s" and waits["probe"]["sum"] >= 0
    refused = {
        point["attributes"]["error.type"]: point["value"]
        for point in metrics[telemetry.METRIC_REJECTED]
        if point["attributes"]["workflow.name"] == "probe"
    }
    assert refused == {
        telemetry.PENDING_CONFLICT: 1,
        telemetry.TYPE_MISMATCH: 1,
        telemetry.BAD_TOKEN: 1,
        telemetry.RUNNING: 1,
        telemetry.SPENT: 1,
    }
    # A token only a continuation store can refuse (inside the run, on another worker) is counted too.
    assert [
        (point["attributes"]["error.type"], point["value"])
        for point in metrics[telemetry.METRIC_REJECTED]
        if point["attributes"]["workflow.name"] == "probe_store"
    ] == [(telemetry.BAD_TOKEN, 1)]


def test_each_continuation_point_is_also_a_child_span_for_viewers_that_do_not_draw_events(
    recorded: dict[str, Any],
) -> None:
    # DevUI's Traces panel draws span names and leaf attributes, never span events (test_devui_traces.py).
    for span in [span for span in recorded["spans"] if span["name"] == "invoke_agent prober"]:
        children = [child for child in recorded["spans"] if child["parent"] == span["id"]]
        points = [(child["name"], child["attributes"]) for child in children if child["name"].startswith("functional")]
        assert points == [(event["name"], event["attributes"]) for event in span["events"]]
