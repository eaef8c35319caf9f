"""Our functional workflow API against core's: same public names and signatures, same markers, same run facts.

Each intended difference is listed here with its reason. A core release that adds a public name or a
parameter fails these tests until ours has it too (or the difference is listed).
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import agent_framework
import pytest
from agent_framework import InMemoryCheckpointStorage
from agent_framework._feature_stage import (  # pyright: ignore[reportPrivateUsage]
    _WARNED_FEATURES,  # pyright: ignore[reportPrivateUsage]
    ExperimentalWarning,
)

import agent_framework_functional as aff
from agent_framework_functional import RunContext, _core_compat, step, workflow

# Names ours adds to core's classes, each with why.
EXTRA_NAMES: dict[str, dict[str, str]] = {
    "definition": {
        "func": "the decorated function, public (core keeps it as _func)",
        "checkpoint_retention": "how long a finished run's checkpoints are kept (core keeps them for good)",
    },
    "workflow": {
        "abandon_continuation": "one pending continuation per instance: explicit abandonment (docs)",
        "abandon_continuation_async": "abandonment that also updates a continuation store",
        "checkpoint_storage": "the storage given to build(), read by the agent for per-session instances",
        "continuation_store": "the continuation store given to build()",
        "continuation_ttl": "the one pause TTL: token, live instance and checkpoint expire together",
        "definition": "the definition an instance was built from (the agent builds one per session)",
        "has_pending_continuation": "read-only view of the continuation state",
        "is_running": "read-only view of the run guard",
        "pending_request_ids": "read-only view of the pending requests",
        "pending_requests": "read-only view of the pending requests, with their events",
        "verify_continuation_token": "read-only token check before mapping answers",
        "verify_continuation_token_async": "read-only token check against a continuation store",
        # Package-internal questions the agent asks (not public API; README's API table omits them).
        "pause_expires_at": "package-internal: the agent's conversation sweep",
        "lapse_pause": "package-internal: the agent's conversation sweep",
        "evict_pause": "package-internal: the agent's conversation bound",
        "bind_conversation": "package-internal: a session's instance is bound to its conversation",
        "verify_token_now": "package-internal: the agent's synchronous token check",
        "pending_tag": "package-internal: the tag of the request ids the agent publishes",
        "token_known_stale": "package-internal: a session token known spent, without I/O",
        "token_is_stale": "package-internal: a session token known spent, with the store",
        "token_is_resumable": "package-internal: the settled session keeps only a resumable token",
        "check_pause_conflict": "package-internal: a deferred resume conflicts with a pause kept here",
    },
    "agent": {
        "abandon_continuation": "delegates to the conversation's workflow",
        "abandon_continuation_async": "delegates to the conversation's workflow",
        "continuation_token_on_response": "hosts that read the token as a background run turn it off",
        "continuation_ttl": "the workflow's pause TTL (hosts size their session entries by it)",
        "input_mapper": "chat input to workflow input",
        "pending_requests_for": "one agent, many conversations: each session's pending requests",
        "run_stream": "alias of run(stream=True), as older agents offer",
        "workflow": "the session-less conversation's workflow",
        "workflow_for": "one agent, many conversations: each session's workflow",
        # Core's AgentMiddlewareLayer and AgentTelemetryLayer, which core's Agent carries and core's
        # functional agent does not.
        "AGENT_PROVIDER_NAME": "gen_ai.provider.name of the invoke_agent span, as core's Agent",
        "agent_middleware": "AgentMiddlewareLayer: the agent middleware",
        "otel_provider_name": "AgentTelemetryLayer",
        "token_usage_histogram": "AgentTelemetryLayer",
        "duration_histogram": "AgentTelemetryLayer",
    },
}

# Parameters ours adds to core's methods (keyword-only, defaulted), each with why.
EXTRA_PARAMETERS: dict[str, dict[str, str]] = {
    "definition.build": {
        "continuation_store": "durable tokens shared by workers",
        "continuation_ttl": "one pause TTL for the token, the live instance and the checkpoint",
    },
    "definition.__init__": {"checkpoint_retention": "how long a finished run's checkpoints are kept (default 24 h)"},
    "workflow.__init__": {
        "definition": "an instance is built by FunctionalWorkflowDefinition.build() from its definition",
        "continuation_store": "durable tokens shared by workers",
        "continuation_ttl": "one pause TTL for the token, the live instance and the checkpoint",
    },
    "workflow.run": {"continuation_token": "a response-only resume must present the paused run's token"},
    "agent.__init__": {
        "id": "BaseAgent's id (core derives it from the name only)",
        "middleware": "core's agent middleware (core's functional agent has none)",
        "additional_properties": "BaseAgent's additional properties",
        "input_mapper": "chat input to workflow input",
        "text_answers": "a typed reply answers the one pending str request",
        "continuation_token_on_response": "Responses hosting reads a response token as a background run",
        "max_conversations": "bounds the live conversation instances one agent keeps",
    },
    "agent.run": {
        "session": "the conversation: one agent serves many (core's functional agent ignores it)",
        "continuation_token": "the token of the paused response",
        "options": "core's run options (continuation_token read from them)",
        "tools": "BaseAgent's run signature (orchestrations pass it)",
        "function_invocation_kwargs": "BaseAgent's run signature (orchestrations pass it)",
        "client_kwargs": "BaseAgent's run signature (orchestrations pass it)",
        "middleware": "run-level agent middleware, as core's Agent",
    },
}

# Parameters of core's that ours lacks on purpose.
MISSING_PARAMETERS: dict[str, dict[str, str]] = {
    # Core's functional agent takes **kwargs and drops them; ours rejects unknown names (TypeError).
    "agent.__init__": {"kwargs": "unknown keyword arguments raise TypeError instead of being ignored"},
    # Built from a definition (build()), which carries the function, name and description.
    "workflow.__init__": {"func": "from the definition", "name": "from the definition", "description": "ditto"},
}
# Where ours takes a positional parameter that core's lacks.
POSITIONAL_EXTRAS = {("workflow.__init__", "definition")}


async def _echo(text: str) -> str:
    return text


def _pairs() -> dict[str, tuple[Any, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        core_definition = agent_framework.FunctionalWorkflowDefinition(_echo)
        core_workflow = core_definition.build()
        ours_workflow = aff.workflow(_echo).build()
        return {
            "definition": (core_definition, aff.workflow(_echo)),
            "workflow": (core_workflow, ours_workflow),
            "agent": (core_workflow.as_agent(), ours_workflow.as_agent()),
        }


def _public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


@pytest.mark.parametrize("kind", ["definition", "workflow", "agent"])
def test_every_public_name_of_core_exists_on_ours_and_ours_adds_only_listed_ones(kind: str) -> None:
    core_obj, ours_obj = _pairs()[kind]
    assert _public(core_obj) - _public(ours_obj) == set(), f"core's {kind} has names ours lacks"
    assert _public(ours_obj) - _public(core_obj) == set(EXTRA_NAMES[kind]), f"unlisted extra names on our {kind}"


def _methods() -> list[tuple[str, Any, Any]]:
    found: list[tuple[str, Any, Any]] = []
    for kind, (core_obj, ours_obj) in _pairs().items():
        for name in sorted(_public(core_obj) | {"__init__"}):
            core_attr = getattr(type(core_obj), name, None)
            if inspect.isfunction(core_attr) and not isinstance(inspect.getattr_static(type(core_obj), name), property):
                found.append((f"{kind}.{name}", core_attr, getattr(type(ours_obj), name)))
    return found


@pytest.mark.parametrize(
    ("where", "core_method", "ours_method"), _methods(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_parameter_of_core_exists_on_ours_with_the_same_kind_and_default(
    where: str, core_method: Any, ours_method: Any
) -> None:
    core_params = inspect.signature(core_method).parameters
    ours_params = inspect.signature(ours_method).parameters
    missing = {name for name in core_params if name not in ours_params}
    assert missing == set(MISSING_PARAMETERS.get(where, {})), f"{where}: core parameters ours lacks"
    for name, core_param in core_params.items():
        if name in missing:
            continue
        ours_param = ours_params[name]
        assert ours_param.kind == core_param.kind, f"{where}({name}): kind differs"
        assert ours_param.default == core_param.default, f"{where}({name}): default differs"
    extra = {name for name in ours_params if name not in core_params}
    assert extra == set(EXTRA_PARAMETERS.get(where, {})), f"{where}: unlisted extra parameters"
    for name in extra:
        param = ours_params[name]
        if (where, name) not in POSITIONAL_EXTRAS:
            assert param.kind in (param.KEYWORD_ONLY, param.VAR_KEYWORD), f"{where}({name}) must be keyword-only"


def test_graph_signature_hash_is_cores() -> None:
    ours = review.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        core = agent_framework.FunctionalWorkflow(review.func, name=review.name)
    assert ours.graph_signature_hash == core.graph_signature_hash
    assert isinstance(ours.graph_signature_hash, str) and len(ours.graph_signature_hash) == 64


async def test_a_checkpoint_carries_the_same_graph_signature_hash() -> None:
    storage = InMemoryCheckpointStorage()
    wf = review.build(checkpoint_storage=storage)
    await wf.run("tea")
    checkpoints = await storage.list_checkpoints(workflow_name="review")
    assert checkpoints
    assert {checkpoint.graph_signature_hash for checkpoint in checkpoints} == {wf.graph_signature_hash}


def test_instances_carry_the_function_name_and_docstring_as_cores() -> None:
    wf = review.build()
    assert wf.__name__ == "review"  # pyright: ignore[reportAttributeAccessIssue]
    assert wf.__wrapped__ is review.func  # pyright: ignore[reportAttributeAccessIssue]
    assert wf.__doc__ == review.func.__doc__


@pytest.mark.parametrize(
    "name", ["workflow", "FunctionalWorkflowDefinition", "FunctionalWorkflow", "FunctionalWorkflowAgent"]
)
def test_experimental_markers_mirror_cores(name: str) -> None:
    ours, core = getattr(aff, name), getattr(agent_framework, name)
    assert ours.__feature_stage__ == core.__feature_stage__ == "experimental"
    assert ours.__feature_id__ == core.__feature_id__ == "FUNCTIONAL_WORKFLOWS"
    assert ".. warning:: Experimental" in (ours.__doc__ or "")


def test_using_the_api_warns_once_as_core_does_at_the_callers_line() -> None:
    key = (ExperimentalWarning, "FUNCTIONAL_WORKFLOWS")
    was_warned = key in _WARNED_FEATURES
    _WARNED_FEATURES.discard(key)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            workflow(_echo)
            workflow(_echo)
    finally:
        if was_warned:
            _WARNED_FEATURES.add(key)
    experimental = [w for w in caught if issubclass(w.category, ExperimentalWarning)]
    assert len(experimental) == 1
    assert "[FUNCTIONAL_WORKFLOWS]" in str(experimental[0].message)
    assert experimental[0].filename == __file__


@step
async def polish(text: str) -> str:
    return text.strip()


@workflow(name="review")
async def review(topic: str, ctx: RunContext) -> str:
    """Polish (a step), then ask a person."""
    text = await polish(topic)
    return str(await ctx.request_info({"draft": text}, response_type=str))


@workflow
async def reports_mode(topic: str, ctx: RunContext) -> str:
    """Records ``ctx.is_streaming()`` before and after a pause."""
    modes = ctx.get_state("modes", [])
    modes.append(ctx.is_streaming())
    ctx.set_state("modes", modes)
    answer = await ctx.request_info({"topic": topic}, response_type=str)
    return f"{answer}:{ctx.is_streaming()}"


@pytest.mark.parametrize("stream", [False, True])
async def test_is_streaming_reports_the_callers_mode_on_a_fresh_run_and_a_resume(stream: bool) -> None:
    wf = reports_mode.build()
    if stream:
        paused = await wf.run("tea", stream=True).get_final_response()
        done = await wf.run(
            responses={"auto::0": "ok"}, continuation_token=paused.continuation_token, stream=True
        ).get_final_response()
    else:
        paused = await wf.run("tea")
        done = await wf.run(responses={"auto::0": "ok"}, continuation_token=paused.continuation_token)
    assert done.get_outputs() == [f"ok:{stream}"]


def test_core_internals_used_for_the_non_streaming_stream_are_where_we_expect_them() -> None:
    core = agent_framework.FunctionalWorkflow
    assert "streaming" in inspect.signature(core._run_core).parameters  # pyright: ignore[reportPrivateUsage]
    for name in ("_finalize_events", "_run_cleanup", "_ensure_not_running"):
        assert callable(getattr(core, name)), name
    assert callable(_core_compat.core_event_stream)


def test_run_says_at_least_one_of_message_responses_or_checkpoint_id_as_core_does() -> None:
    doc = aff.FunctionalWorkflow.run.__doc__ or ""
    assert "At least one of ``message``, ``responses`` or ``checkpoint_id``" in doc  # core's own tests read this
