"""Drive continuations under the OpenTelemetry SDK (in-memory exporter and reader) and print what was recorded.

Run by ``tests/test_telemetry.py`` in a subprocess: OpenTelemetry's tracer and meter providers are
process-global and can be set only once, and other tests in the suite set their own. Prints one JSON
object: ``spans`` (name, attributes, events), ``metrics`` (name -> list of data points), and the
secrets and answers used (which must appear nowhere in the telemetry).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
warnings.simplefilter("ignore")

from agent_framework import InMemoryCheckpointStorage, Message, RunContext  # noqa: E402

from agent_framework_functional import (  # noqa: E402
    ContinuationAuthorityError,
    PendingContinuationError,
    ResponseMismatchError,
    SQLiteContinuationStore,
    workflow,
)

SECRET_ANSWER = "answer-that-must-not-leak"


@workflow(name="probe", checkpoint_retention=None)  # the probe restores an abandoned pause from its checkpoint
async def probe(topic: str, ctx: RunContext) -> str:
    answer = await ctx.request_info({"topic": topic}, response_type=str)
    return f"{topic}: {answer}"


@workflow(name="probe_store")
async def probe_store(topic: str, ctx: RunContext) -> str:
    answer = await ctx.request_info({"topic": topic}, response_type=str)
    return f"{topic}: {answer}"


@workflow(name="probe_bool")
async def probe_bool(topic: str, ctx: RunContext) -> str:
    approved = await ctx.request_info({"topic": topic}, response_type=bool)
    return f"{topic}: {approved}"


async def _refused(call: Any, expected: type[BaseException]) -> None:
    try:
        result = call()
        if hasattr(result, "__await__"):
            await result
    except expected:
        return
    raise AssertionError(f"expected {expected.__name__}")


async def scenarios() -> dict[str, Any]:
    tracer = trace.get_tracer("probe")
    tokens: list[str] = []
    with tracer.start_as_current_span("workflow_calls"):
        storage = InMemoryCheckpointStorage()
        wf = probe.build(checkpoint_storage=storage)
        paused = await wf.run("tea")
        tokens.append(paused.continuation_token["token"])
        await _refused(lambda: wf.run("coffee"), PendingContinuationError)
        await _refused(
            lambda: wf.run(responses={"auto::0": 42}, continuation_token=paused.continuation_token),
            ResponseMismatchError,
        )
        bad = {**paused.continuation_token, "token": "x" * len(paused.continuation_token["token"])}
        await _refused(
            lambda: wf.run(responses={"auto::0": SECRET_ANSWER}, continuation_token=bad), ContinuationAuthorityError
        )
        accepted = wf.run(
            responses={"auto::0": SECRET_ANSWER}, continuation_token=paused.continuation_token, stream=True
        )
        # Accepted, not yet run: the same token again is refused as "running".
        await _refused(
            lambda: wf.run(responses={"auto::0": SECRET_ANSWER}, continuation_token=paused.continuation_token),
            ContinuationAuthorityError,
        )
        await accepted.get_final_response()
        await _refused(
            lambda: wf.run(responses={"auto::0": SECRET_ANSWER}, continuation_token=paused.continuation_token),
            ContinuationAuthorityError,
        )
        second = await wf.run("milk")
        tokens.append(second.continuation_token["token"])
        wf.abandon_continuation(second.continuation_token)
        checkpoint_id = (await storage.get_latest(workflow_name="probe")).checkpoint_id
        restored = await wf.run(checkpoint_id=checkpoint_id)
        tokens.append(restored.continuation_token["token"])
    with tempfile.TemporaryDirectory() as folder:
        store, shared = SQLiteContinuationStore(Path(folder) / "store.db"), InMemoryCheckpointStorage()
        pausing = probe_store.build(checkpoint_storage=shared, continuation_store=store)
        stored = await pausing.run("tea")
        tokens.append(stored.continuation_token["token"])
        other_worker = probe_store.build(checkpoint_storage=shared, continuation_store=store)
        wrong = {**stored.continuation_token, "token": "y" * len(stored.continuation_token["token"])}
        # Well-shaped but unknown: only the store can refuse it, inside the run.
        await _refused(
            lambda: other_worker.run(responses={"auto::0": SECRET_ANSWER}, continuation_token=wrong),
            ContinuationAuthorityError,
        )
        await other_worker.run(responses={"auto::0": SECRET_ANSWER}, continuation_token=stored.continuation_token)
    agent = probe_bool.build().as_agent(name="prober")
    session = agent.create_session()
    paused_agent = await agent.run("deploy", session=session)
    tokens.append(paused_agent.continuation_token["token"])
    approval = Message("user", [paused_agent.user_input_requests[0].to_function_approval_response(approved=True)])
    done = await agent.run(approval, session=session)
    stream_paused = await agent.run("ship", stream=True, session=session).get_final_response()
    tokens.append(stream_paused.continuation_token["token"])
    stream_approval = Message(
        "user", [stream_paused.user_input_requests[0].to_function_approval_response(approved=True)]
    )
    await agent.run(stream_approval, stream=True, session=session).get_final_response()
    return {
        "tokens": tokens,
        "answers": [SECRET_ANSWER],
        "paused_token": paused.continuation_token,
        "agent_text": done.text,
    }


def main() -> None:
    outcome = asyncio.run(scenarios())
    from agent_framework_functional import continuation_token_hash

    outcome["paused_hash"] = continuation_token_hash(outcome.pop("paused_token"))
    spans = [
        {
            "name": span.name,
            "parent": span.parent.span_id if span.parent else None,
            "id": span.context.span_id,
            "attributes": dict(span.attributes or {}),
            "events": [{"name": event.name, "attributes": dict(event.attributes or {})} for event in span.events],
        }
        for span in EXPORTER.get_finished_spans()
    ]
    points: dict[str, list[dict[str, Any]]] = {}
    data = READER.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else []:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    entry: dict[str, Any] = {"attributes": dict(point.attributes or {})}
                    for field in ("value", "count", "sum"):
                        if hasattr(point, field):
                            entry[field] = getattr(point, field)
                    entry["unit"] = metric.unit
                    points.setdefault(metric.name, []).append(entry)
    json.dump({**outcome, "spans": spans, "metrics": points}, sys.stdout, default=list)


if __name__ == "__main__":
    main()
