"""Every touch of core's (and the host packages') private API, kept together so it is easy to audit.

Each function's docstring names the private name it touches; a test fails when an upgrade moves it or core
stops calling it on our path (``tests/test_core_compat.py`` for :class:`LinearFunctionalWorkflow`'s overrides).
Core's own classes and module globals stay untouched.
"""

from __future__ import annotations

import dis
import functools
import itertools
import operator
from collections.abc import Awaitable, Callable, Iterator
from types import CodeType, CoroutineType, FunctionType, ModuleType
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from agent_framework import (
    AgentResponse,
    CheckpointStorage,
    ExperimentalFeature,
    ResponseStream,
    RunContext,
    SessionContext,
    WorkflowEvent,
    WorkflowRunResult,
)
from agent_framework import FunctionalWorkflow as _CoreFunctionalWorkflow
from agent_framework._feature_stage import experimental
from agent_framework._middleware import categorize_middleware
from agent_framework._workflows._checkpoint_encoding import (
    _REGISTERED_CHECKPOINT_TYPE_KEYS,  # pyright: ignore[reportPrivateUsage]  # a set core adds to in place
    _RestrictedUnpickler,  # pyright: ignore[reportPrivateUsage]
    decode_checkpoint_value,
    encode_checkpoint_value,
)
from agent_framework._workflows._functional import (
    _decode_versioned_step_cache_key,  # pyright: ignore[reportPrivateUsage]
)
from agent_framework._workflows._typing_utils import is_instance_of
from agent_framework._workflows._workflow import _coerce_request_info_response  # pyright: ignore[reportPrivateUsage]

from ._step_cache import SaveRecorder, StepCacheLog, StepCacheOffer, implements

# Core's marker for its functional workflow API; ours is the same feature (same warning, shown once).
functional_workflows_experimental = experimental(feature_id=ExperimentalFeature.FUNCTIONAL_WORKFLOWS)
_T = TypeVar("_T")


def set_context_response(context: SessionContext, response: AgentResponse[Any]) -> None:
    """Give the after-run context providers the run's response, as core's ``WorkflowAgent`` does."""
    context._response = response  # pyright: ignore[reportPrivateUsage]


def response_fits(value: Any, response_type: Any, request_id: str) -> bool:
    """True when core would accept ``value`` as the response to ``request_id`` (``None`` included, as core allows)."""
    if value is None or (isinstance(response_type, type) and type(value) is response_type):
        return True  # core accepts None, and a value of exactly the type needs no conversion
    try:
        _coerce_request_info_response(value, response_type, request_id)
    except Exception:
        return False
    return True


accepts = is_instance_of  # ``value`` is an instance of ``target_type`` by core's rules (generics, unions)
core_encode_checkpoint_value = encode_checkpoint_value


def collected_events(ctx: RunContext) -> list[WorkflowEvent[Any]] | None:
    """Core's list of events collected so far in this run (``RunContext._events``)."""
    return ctx._events  # pyright: ignore[reportPrivateUsage]


def core_event_stream(
    core: _CoreFunctionalWorkflow, *, include_status_events: bool, **run_kwargs: Any
) -> ResponseStream[WorkflowEvent[Any], WorkflowRunResult]:
    """Core's ``run(stream=False)`` as its event stream (``_run_core``); ``ctx.is_streaming()`` stays False."""
    core._ensure_not_running()  # pyright: ignore[reportPrivateUsage]
    return ResponseStream(
        core._run_core(streaming=False, **run_kwargs),  # pyright: ignore[reportPrivateUsage]
        finalizer=functools.partial(core._finalize_events, include_status_events=include_status_events),  # pyright: ignore[reportPrivateUsage]
        cleanup_hooks=[core._run_cleanup],  # pyright: ignore[reportPrivateUsage]
    )


def agent_middleware_of(*sources: Any) -> list[Any]:
    """The agent middleware among ``sources`` (sequences of core middleware, or None), in order."""
    return [found for source in sources if source is not None for found in categorize_middleware(list(source))["agent"]]


def middleware_pipeline(agent: Any, chain: list[Any]) -> Any:
    """Core's cached ``AgentMiddlewarePipeline`` of ``agent`` (an ``AgentMiddlewareLayer``) for ``chain``."""
    return agent._get_agent_middleware_pipeline(chain)


def trace_agent_invocation(agent: Any, **arguments: Any) -> Any:
    """Core's ``invoke_agent`` span around ``arguments["execute"]()`` (``AgentTelemetryLayer``)."""
    return agent._trace_agent_invocation(**arguments)


class LinearRunContext(RunContext):
    """Core's ``RunContext`` with its cache check over an index (``(kind, step, occurrence)`` -> wrappers)."""

    af_index: dict[tuple[str, str, int | None], set[str]]
    af_indexed: int  # how many of the cache's entries (its first ones) the index holds
    af_live: bool = False  # the save under way hands its storage core's live dicts

    def _has_incompatible_versioned_cache_entry(self, key: str) -> bool:
        """Core's check (an entry for this call made by an unknown step definition), over the index."""
        current = _decode_versioned_step_cache_key(key)
        if current is None:
            return False
        cache, index, indexed = self._step_cache, self.af_index, self.af_indexed
        if len(cache) > indexed:
            # Core only adds entries during a run: the unindexed ones are the newest, at the dict's end.
            for cached_key in itertools.islice(reversed(cache), len(cache) - indexed) if indexed else cache:
                decoded = _decode_versioned_step_cache_key(cached_key)
                if decoded is not None:
                    index.setdefault((decoded[0], decoded[1], decoded[4]), set()).add(decoded[2])
            self.af_indexed = len(cache)
        kind, step_name, wrapper, _identity, occurrence = current
        cached = index.get((kind, step_name, occurrence))
        if not cached:
            return False
        expected = self._expected_step_wrapper_identities.get(step_name, set())
        return any(other != wrapper and other not in expected for other in cached)

    def _export_step_cache(self) -> dict[str, Any]:
        if not self.af_live:
            return RunContext._export_step_cache(self)  # pyright: ignore[reportPrivateUsage]
        if self._non_replayable_step_cache_keys:
            RunContext._export_step_cache(self)  # pyright: ignore[reportPrivateUsage]  # raises core's error
        return self._step_cache

    def _export_step_cache_auto_request_info_counts(self) -> dict[str, int]:
        if not self.af_live:
            return RunContext._export_step_cache_auto_request_info_counts(self)  # pyright: ignore[reportPrivateUsage]
        self.af_live = False
        return self._step_cache_auto_request_info_counts


def make_linear(ctx: RunContext) -> LinearRunContext:
    """Turn core's context of a run we drive into a :class:`LinearRunContext` (its index built at the next check)."""
    ctx.__class__ = LinearRunContext
    linear: LinearRunContext = ctx  # pyright: ignore[reportAssignmentType]  # the class swap above
    linear.af_index = {}
    linear.af_indexed = 0
    return linear


class CachedDis:
    """``dis`` as core's ``_functional`` module sees it: instructions cached per code object (immutable)."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real
        self._cache: WeakKeyDictionary[CodeType, tuple[dis.Instruction, ...]] = WeakKeyDictionary()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get_instructions(self, x: Any, *args: Any, **kwargs: Any) -> Iterator[dis.Instruction]:
        """``dis.get_instructions``; from the cache for a code object."""
        if args or kwargs or not isinstance(x, CodeType):
            return self._real.get_instructions(x, *args, **kwargs)
        found = self._cache.get(x)
        if found is None:
            found = self._cache[x] = tuple(self._real.get_instructions(x))
        return iter(found)


class CachedIdentity:
    """Core's ``_get_step_wrapper_identity``, its durable results reused while code, name and defaults stay."""

    def __init__(self, real: Callable[[Any], tuple[str, bool]]) -> None:
        self._real = real
        self._cache: WeakKeyDictionary[Any, tuple[tuple[Any, ...], tuple[str, bool]]] = WeakKeyDictionary()

    def __call__(self, func: Any) -> tuple[str, bool]:
        kwdefaults: dict[str, Any] = getattr(func, "__kwdefaults__", None) or {}
        code, defaults = getattr(func, "__code__", None), getattr(func, "__defaults__", None)
        names = (getattr(func, "__module__", None), getattr(func, "__qualname__", None))
        inputs = (code, *names, defaults, len(kwdefaults), *kwdefaults, *kwdefaults.values())
        try:
            found = self._cache.get(func)
        except TypeError:  # not weakly referable: nothing cached
            return self._real(func)
        if found is not None and len(found[0]) == len(inputs) and all(map(operator.is_, found[0], inputs)):
            return found[1]
        result = self._real(func)
        if result[1]:  # durable: no closure or default whose contents may change
            self._cache[func] = (inputs, result)
        return result


def over_cached_reads(*functions: Callable[..., Any]) -> list[Callable[..., Any]]:
    """Copies of core's ``functions`` with ``dis`` and ``_get_step_wrapper_identity`` cached (core's globals stay)."""
    names = dict(functions[0].__globals__)
    names["dis"] = CachedDis(dis)
    names["_get_step_wrapper_identity"] = CachedIdentity(names["_get_step_wrapper_identity"])
    copies: list[Callable[..., Any]] = []
    for function in functions:
        copy = FunctionType(function.__code__, names, function.__name__, function.__defaults__, function.__closure__)
        copy.__kwdefaults__, copy.__qualname__ = function.__kwdefaults__, function.__qualname__
        copies.append(copy)
    return copies


_DISCOVER, _SIGNATURE_HASH = over_cached_reads(
    _CoreFunctionalWorkflow._discover_workflow_dependencies.__func__,  # pyright: ignore[reportPrivateUsage, reportFunctionMemberAccess]
    _CoreFunctionalWorkflow._compute_signature_hash,  # pyright: ignore[reportPrivateUsage]
)


class LinearFunctionalWorkflow(_CoreFunctionalWorkflow):
    """Core's ``FunctionalWorkflow`` whose runs cost linear time in their ``@step`` calls (internal).

    Each save is offered the step-cache entries added since the last (:func:`offering`); core's save at a clean
    finish is skipped when the recorder deletes the chain at once. Overrides call core by class: no ``super()``
    object per call.
    """

    _af_log: StepCacheLog | None = None
    _af_recorder: SaveRecorder | None = None
    _af_replay: tuple[StepCacheLog, int, int] | None = None
    _af_next: tuple[RunContext, tuple[StepCacheLog, int, int] | None] | None = None

    _discover_workflow_dependencies = classmethod(_DISCOVER)  # pyright: ignore[reportAssignmentType]
    _compute_signature_hash = _SIGNATURE_HASH  # pyright: ignore[reportAssignmentType]

    def _capture_replay_state(self, ctx: RunContext, message: Any | None = None) -> None:
        _CoreFunctionalWorkflow._capture_replay_state(self, ctx, message)  # pyright: ignore[reportPrivateUsage]
        log = self._af_log
        if log is not None and log.cache is ctx._step_cache:  # pyright: ignore[reportPrivateUsage]
            self._af_replay = (log, len(log.cache), len(log.counts))
        else:
            self._af_replay = None

    def _restore_replay_state(self, ctx: RunContext) -> Any:
        message = _CoreFunctionalWorkflow._restore_replay_state(self, ctx)  # pyright: ignore[reportPrivateUsage]
        self._af_next = (ctx, self._af_replay)
        return message

    def _clear_replay_state(self) -> None:
        _CoreFunctionalWorkflow._clear_replay_state(self)  # pyright: ignore[reportPrivateUsage]
        self._af_replay = self._af_log = None

    def _run_core(self, *args: Any, **kwargs: Any) -> Any:
        # The run's storage, once per run: a recorder (``_step_cache.SaveRecorder``) takes each save's offer.
        storage = kwargs.get("checkpoint_storage") or self._checkpoint_storage
        self._af_recorder = storage if implements(storage, SaveRecorder) else None
        return _CoreFunctionalWorkflow._run_core(self, *args, **kwargs)  # pyright: ignore[reportPrivateUsage]

    def _execute(self, ctx: RunContext, message: Any) -> CoroutineType[Any, Any, Any]:
        # A plain method returning core's coroutine: no coroutine frame of its own around the run.
        pending, self._af_next = self._af_next, None
        make_linear(ctx)
        hook = ctx._on_step_completed  # pyright: ignore[reportPrivateUsage]
        recorder = self._af_recorder
        self._af_log = None
        if hook is not None and recorder is not None:  # core saves after each step, through our recorder
            parent = pending[1] if pending is not None and pending[0] is ctx else None
            log = self._af_log = StepCacheLog(ctx._step_cache, ctx._step_cache_auto_request_info_counts, parent)  # pyright: ignore[reportPrivateUsage]
            ctx._on_step_completed = _offered_step_save(ctx, log, recorder, hook)  # pyright: ignore[reportPrivateUsage]
        return _CoreFunctionalWorkflow._execute(self, ctx, message)  # pyright: ignore[reportPrivateUsage]

    async def _save_checkpoint(
        self, ctx: RunContext, storage: CheckpointStorage, previous_checkpoint_id: str | None = None
    ) -> str:
        # Core calls this for the pause's and the final save (and, before 1.26, for each step's save).
        save = _CoreFunctionalWorkflow._save_checkpoint  # pyright: ignore[reportPrivateUsage]
        recorder, log = self._af_recorder, self._af_log
        if recorder is not None and storage is recorder and recorder.offer is None:  # ours, not a step's (offered)
            if not ctx._pending_requests and recorder.drops_final_checkpoint:  # pyright: ignore[reportPrivateUsage]
                return previous_checkpoint_id or ""  # a clean finish: the recorder would delete this checkpoint at once
            if log is not None and log.cache is ctx._step_cache:  # pyright: ignore[reportPrivateUsage]
                return await offering(ctx, log, recorder, save(self, ctx, storage, previous_checkpoint_id))
        return await save(self, ctx, storage, previous_checkpoint_id)


async def offering(ctx: RunContext, log: StepCacheLog, recorder: SaveRecorder, save: Awaitable[_T]) -> _T:
    """Await core's ``save`` with the new step-cache entries offered (taken before its first ``await``)."""
    offer = recorder.offer = StepCacheOffer(log)
    linear = ctx if isinstance(ctx, LinearRunContext) else make_linear(ctx)
    linear.af_live = log.live  # a storage that took an earlier offer gets core's live dicts
    try:
        return await save
    finally:
        recorder.offer = None  # not taken (core did not save): no later save may take it
        linear.af_live = False
        if offer.taken:
            log.live = True


def _offered_step_save(
    ctx: RunContext, log: StepCacheLog, recorder: SaveRecorder, hook: Callable[[], Awaitable[None]]
) -> Callable[[], Awaitable[None]]:
    """Core's per-step save hook with the offer made around it (core 1.26 saves there, not in ``_save_checkpoint``)."""

    async def after_step() -> None:
        if log.cache is not ctx._step_cache:  # pyright: ignore[reportPrivateUsage]
            await hook()
        else:
            await offering(ctx, log, recorder, hook())

    return after_step


build_core = LinearFunctionalWorkflow  # the core instance our ``FunctionalWorkflow`` drives


# The host packages' private names, each imported when its host first needs it (the hosts are optional
# extras), pinned by ``tests/hosting/test_host_private_names.py``.


def agui_session_id_for_thread(*, scope: str, thread_id: str) -> str:
    """AG-UI's session id of a thread (``_snapshots._session_id_for_thread``), so our sessions are AG-UI's."""
    from agent_framework_ag_ui._snapshots import _session_id_for_thread  # pyright: ignore[reportPrivateUsage]

    return _session_id_for_thread(scope=scope, thread_id=thread_id)


def agui_approval_state(runner: Any) -> Any:
    """AG-UI's approval state of ``runner`` (``AgentFrameworkAgent._approval_state_store``)."""
    return runner._approval_state_store


def set_agui_approval_state(
    runner: Any, *, pending_retention_seconds: float, terminal_retention_seconds: float
) -> None:
    """Give ``runner`` AG-UI's in-memory approval state with these retentions (AG-UI offers no option for them)."""
    from agent_framework_ag_ui._approval_state import (  # pyright: ignore[reportPrivateUsage]
        InMemoryAGUIApprovalStateStore,
    )

    runner._approval_state_store = InMemoryAGUIApprovalStateStore(
        pending_retention_seconds=pending_retention_seconds,
        terminal_retention_seconds=terminal_retention_seconds,
    )


def register_agui_hosted_approval(runner: Any, *, scope: str, thread_id: str, interrupt_id: str, call: Any) -> None:
    """Register an open interrupt (``call``: its ``function_call``) in AG-UI's approval state, as ``HOSTED``."""
    from agent_framework_ag_ui._approval_lifecycle import ApprovalExecutionOwner  # pyright: ignore[reportPrivateUsage]
    from agent_framework_ag_ui._approval_state import approval_state_thread_id  # pyright: ignore[reportPrivateUsage]
    from agent_framework_ag_ui._utils import canonical_function_arguments  # pyright: ignore[reportPrivateUsage]

    store = agui_approval_state(runner)
    approval_thread = approval_state_thread_id(scope=scope, thread_id=thread_id)
    if store.lifecycle.occurrence_for_alias(thread_id=approval_thread, interrupt_id=interrupt_id) is not None:
        return
    store.register(
        owner=ApprovalExecutionOwner.HOSTED,
        scope=scope,
        thread_ids=[approval_thread],
        name=call.name,
        arguments=canonical_function_arguments(call) or "{}",
        request_id=interrupt_id,
        interrupt_id=interrupt_id,
        call_id=call.call_id,
        function_call_id=call.call_id,
    )


def expire_agui_open_approvals(runner: Any, *, scope: str, thread_id: str) -> None:
    """Expire the thread's pending approvals in ``runner``'s AG-UI state (its pause was orphaned)."""
    from agent_framework_ag_ui._approval_state import approval_state_thread_id  # pyright: ignore[reportPrivateUsage]

    lifecycle = agui_approval_state(runner).lifecycle
    approval_thread = approval_state_thread_id(scope=scope, thread_id=thread_id)
    pending = lifecycle.pending_interrupt_ids(thread_id=approval_thread)
    if pending:
        lifecycle.expire_batch(thread_id=approval_thread, interrupt_ids=sorted(pending))


def devui_conversation_store_class() -> type[Any]:
    """DevUI's ``InMemoryConversationStore`` (its checkpoint manager requires that class)."""
    from agent_framework_devui._conversations import InMemoryConversationStore  # pyright: ignore[reportPrivateUsage]

    return InMemoryConversationStore


def devui_conversation_count(store: Any) -> int:
    """How many conversations DevUI's in-memory ``store`` holds (its ``_conversations``)."""
    return len(getattr(store, "_conversations", {}))


def devui_forget_conversation(store: Any, conversation_id: str) -> None:
    """Drop a conversation and its item index from DevUI's in-memory ``store``."""
    store._conversations.pop(conversation_id, None)
    store._item_index.pop(conversation_id, None)


def devui_install_store(executor: Any, store: Any) -> dict[Any, Any]:
    """Make ``store`` DevUI's ``executor``'s conversation store; returns its ``_pending_approvals`` to prune."""
    from agent_framework_devui._conversations import CheckpointConversationManager  # pyright: ignore[reportPrivateUsage]

    executor.conversation_store = store
    executor.checkpoint_manager = CheckpointConversationManager(store)
    return executor._pending_approvals


@functools.cache
def devui_server_class() -> type[Any]:
    """DevUI's ``DevServer`` that installs ``store_installer(executor)`` in ``_ensure_executor``."""
    from agent_framework_devui import DevServer

    class InstallingDevServer(DevServer):
        store_installer: Callable[[Any], None] | None = None

        async def _ensure_executor(self) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
            executor = await super()._ensure_executor()  # pyright: ignore[reportPrivateUsage]
            if self.store_installer is not None:
                self.store_installer(executor)
            return executor

    return InstallingDevServer


def core_decode_checkpoint_value(encoded: Any, allowed_types: frozenset[str]) -> Any:
    """Core's checkpoint decoding of ``encoded`` under its allow-list (``decode_checkpoint_value``)."""
    return decode_checkpoint_value(encoded, allowed_types=allowed_types)


def checkpoint_global_resolver(allowed_types: frozenset[str], protocol: int) -> Callable[[str, str], Any]:
    """Core's ``find_class`` of a restricted checkpoint decode under ``allowed_types``, at pickle ``protocol``."""
    unpickler = _RestrictedUnpickler(bytes((0x80, protocol)) + b"N.", allowed_types | _REGISTERED_CHECKPOINT_TYPE_KEYS)
    unpickler.load()  # only the protocol: dotted names from 4 on, Python 2's module names before 3, as the decoder
    return unpickler.find_class
