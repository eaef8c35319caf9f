"""The few places this package touches core's private API, kept together so they are easy to audit.

Each name here is used by core itself for the same job; ``tests/test_agent_protocol.py`` imports
every one of them, so an upgrade of core that moves them fails loudly instead of silently.

* ``is_instance_of`` / ``try_coerce_to_type`` (``agent_framework._workflows._typing_utils``): the
  rules core applies to a ``request_info`` response (``_coerce_request_info_response``). Chat-native
  answers are converted with the same rules before a resume is accepted, so core cannot reject the
  value later, after the continuation token was spent.
* ``_coerce_request_info_response`` (``agent_framework._workflows._workflow``): core's exact check of
  a response against its request's ``response_type`` (also turning ``str`` into ``Content``). A
  response-only resume runs it on every answer to a pending request before the token is claimed.
* ``SessionContext._response``: core's graph ``WorkflowAgent`` sets it before the after-run
  providers; ``SessionContext`` has no public setter.
* ``RunContext._events``: the events core's functional engine collected so far in a run (it yields
  them only after the workflow function returns). Live streaming reads it so that those events go
  out ahead of a later live update, in production order (``tests/test_live_streaming.py`` pins it).
* ``agent_framework._feature_stage.experimental``: core's experimental marker (``__feature_stage__``,
  the docstring note, one ``ExperimentalWarning`` per feature), applied to our functional workflow
  API with core's ``FUNCTIONAL_WORKFLOWS`` feature id, so it is marked exactly as core's is.
* ``categorize_middleware`` (``agent_framework._middleware``) and the agent layers' helpers
  ``AgentMiddlewareLayer._get_agent_middleware_pipeline`` / ``AgentTelemetryLayer._trace_agent_invocation``:
  the agent inherits core's two layers but runs them itself (``_agent_layers.py``), because their
  ``run`` drops the agent's resume arguments (``tests/test_agent_layers.py`` pins them).
* ``FunctionalWorkflow._run_core`` / ``_finalize_events`` / ``_run_cleanup`` / ``_ensure_not_running``:
  what core's ``run(stream=False)`` wraps. A non-streaming run must pull core's first events (to
  spend the token right before user code) yet leave ``RunContext.is_streaming()`` False, and core's
  public ``run`` ties the two together (``tests/test_core_parity.py`` pins them).
* The step cache of runs this package drives (``tests/test_long_runs.py`` pins every name): core 1.23's
  ``RunContext._has_incompatible_versioned_cache_entry`` decodes every cached key on each cache miss,
  and each step's checkpoint copies the whole cache, so a run's cost grows with the square of its
  ``@step`` calls. :func:`build_core` builds a subclass of core's ``FunctionalWorkflow`` whose
  ``_execute`` turns the run's ``RunContext`` into :class:`LinearRunContext` (the same check over an
  index, and a :class:`StepCacheLog` of the cache in insertion order), whose ``_save_checkpoint``
  offers that log to the storage (:func:`step_cache_offer`), and whose ``_capture_replay_state`` /
  ``_restore_replay_state`` link a response-only replay to the log of the pause it continues. Core's
  own classes are untouched: code that uses core directly in the same process keeps core's behaviour.
* ``agent_framework._workflows._functional.dis``: core computes a workflow's signature on every
  build and every run, reading each reachable function's bytecode with ``dis.get_instructions``
  (most of a fresh worker's build). That module attribute is a :class:`_CachedDis` that hands back
  the instructions of a code object (immutable) from a cache, but only inside our
  ``LinearFunctionalWorkflow._discover_workflow_dependencies``; globals are still looked up on every
  call, so the signature is the one core computes. Everywhere else it is ``dis`` itself.
"""

from __future__ import annotations

import dis
import functools
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from types import CodeType, ModuleType
from typing import Any, cast
from weakref import WeakKeyDictionary

import agent_framework._workflows._functional as _core_functional
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
from agent_framework._workflows._functional import (
    _decode_versioned_step_cache_key,  # pyright: ignore[reportPrivateUsage]
)
from agent_framework._workflows._typing_utils import is_instance_of, try_coerce_to_type
from agent_framework._workflows._workflow import _coerce_request_info_response  # pyright: ignore[reportPrivateUsage]

# Core's marker for its functional workflow API; ours is the same feature (same warning, shown once).
functional_workflows_experimental = experimental(feature_id=ExperimentalFeature.FUNCTIONAL_WORKFLOWS)


def set_context_response(context: SessionContext, response: AgentResponse[Any]) -> None:
    """Give the after-run context providers the run's response, as core's ``WorkflowAgent`` does."""
    context._response = response  # pyright: ignore[reportPrivateUsage]


def coerce_to(value: Any, target_type: Any) -> tuple[bool, Any]:
    """Coerce ``value`` to ``target_type`` with core's response rules.

    Returns:
        ``(True, converted)`` when the converted value is an instance of the type, else ``(False, value)``.
    """
    converted = try_coerce_to_type(value, target_type)
    return (True, converted) if is_instance_of(converted, target_type) else (False, value)


def response_fits(value: Any, response_type: Any, request_id: str) -> bool:
    """True when core would accept ``value`` as the response to ``request_id`` (``None`` included, as core allows)."""
    if value is None or (isinstance(response_type, type) and type(value) is response_type):
        return True  # core accepts None, and a value of exactly the type needs no conversion
    try:
        _coerce_request_info_response(value, response_type, request_id)
    except Exception:
        return False
    return True


def accepts(value: Any, target_type: Any) -> bool:
    """True when ``value`` is an instance of ``target_type`` by core's rules (generics and unions included)."""
    return is_instance_of(value, target_type)


def collected_events(ctx: RunContext) -> list[WorkflowEvent[Any]] | None:
    """Core's list of events collected so far in this run (``RunContext._events``), or None.

    If core renames it, live updates still stream, but core's collected events are no longer moved
    ahead of later live updates; the pinning test fails first.
    """
    events = getattr(ctx, "_events", None)
    return cast("list[WorkflowEvent[Any]]", events) if isinstance(events, list) else None


def core_event_stream(
    core: _CoreFunctionalWorkflow, *, include_status_events: bool, **run_kwargs: Any
) -> ResponseStream[WorkflowEvent[Any], WorkflowRunResult]:
    """Core's ``run(stream=False)`` as the event stream it wraps, so its first events can be pulled.

    Core's non-streaming ``run`` returns ``stream.get_final_response()`` of exactly this stream
    (``_run_core(streaming=False)``, its finalizer and cleanup hook, its run guard), so user code
    sees ``ctx.is_streaming()`` False, as in core; ``run(stream=True)`` would report True.
    """
    core._ensure_not_running()  # pyright: ignore[reportPrivateUsage]
    return ResponseStream(
        core._run_core(streaming=False, **run_kwargs),  # pyright: ignore[reportPrivateUsage]
        finalizer=functools.partial(
            core._finalize_events,  # pyright: ignore[reportPrivateUsage]
            include_status_events=include_status_events,
        ),
        cleanup_hooks=[core._run_cleanup],  # pyright: ignore[reportPrivateUsage]
    )


def agent_middleware_of(*sources: Any) -> list[Any]:
    """The agent middleware among ``sources`` (sequences of core middleware, or None), in order."""
    found: list[Any] = []
    for source in sources:
        if source is not None:
            found.extend(categorize_middleware(list(source))["agent"])
    return found


def middleware_pipeline(agent: Any, chain: list[Any]) -> Any:
    """Core's cached ``AgentMiddlewarePipeline`` of ``agent`` (an ``AgentMiddlewareLayer``) for ``chain``."""
    return agent._get_agent_middleware_pipeline(chain)


def trace_agent_invocation(agent: Any, **arguments: Any) -> Any:
    """Core's ``invoke_agent`` span around ``arguments["execute"]()`` (``AgentTelemetryLayer``)."""
    return agent._trace_agent_invocation(**arguments)


# ---------------------------------------------------------------- the step cache of runs we drive

STEP_CACHE = "_step_cache"
STEP_COUNTS = "_step_cache_auto_request_info_counts"
ORIGINAL_MESSAGE = "_original_message"
_OFFER: ContextVar[StepCacheOffer | None] = ContextVar("agent_framework_functional_step_cache_offer", default=None)


class StepCacheLog:
    """One run's step cache and request counts, with their keys in insertion order (internal).

    Core only ever adds entries during a run, so "what the last save did not store" is a slice of
    ``cache_keys`` / ``count_keys``. ``parent`` is ``(log, cache_len, counts_len)`` of the pause a
    response-only replay continues (its cache starts as that log's first entries), else None.
    """

    __slots__ = ("__weakref__", "base", "cache", "cache_keys", "count_keys", "counts", "live_storage", "parent")

    def __init__(self, ctx: RunContext, parent: tuple[StepCacheLog, int, int] | None) -> None:
        self.cache: dict[str, Any] = ctx._step_cache  # pyright: ignore[reportPrivateUsage]
        self.counts: dict[str, int] = ctx._step_cache_auto_request_info_counts  # pyright: ignore[reportPrivateUsage]
        self.cache_keys = list(self.cache)
        self.count_keys = list(self.counts)
        self.base = (len(self.cache_keys), len(self.count_keys))
        self.parent = parent if parent is not None and parent[1:] == self.base else None
        # The storage that took this run's first offer: later saves hand it core's live dicts, uncopied.
        self.live_storage: CheckpointStorage | None = None


class StepCacheOffer:
    """What one checkpoint save offers a storage: the log and its length at this save (internal).

    A storage that stores step-cache entries once (:mod:`._checkpoint_delta`) calls :meth:`take`
    before its first ``await``; from then on this run hands it core's live dicts instead of copies
    (the checkpoint then holds the whole cache only until ``save`` returns; such a storage reads
    the entries by key, up to ``cache_len`` / ``counts_len``, so later steps cannot leak in).
    """

    __slots__ = ("cache_len", "counts_len", "log", "taken")

    def __init__(self, log: StepCacheLog) -> None:
        self.log = log
        self.cache_len = len(log.cache_keys)
        self.counts_len = len(log.count_keys)
        self.taken = False

    def take(self, state: dict[str, Any]) -> bool:
        """Accept the offer for a checkpoint whose ``state`` core built for it; False when it is not that one."""
        cache, counts = state.get(STEP_CACHE), state.get(STEP_COUNTS)
        log = self.log
        if (cache is log.cache and counts is log.counts) or (
            isinstance(cache, dict)
            and isinstance(counts, dict)
            and len(cast("dict[str, Any]", cache)) == len(log.cache)
            and len(cast("dict[str, Any]", counts)) == len(log.counts)
        ):
            self.taken = True
        return self.taken


def step_cache_offer() -> StepCacheOffer | None:
    """The offer of the checkpoint save in progress in this task, if a run this package drives makes it."""
    return _OFFER.get()


class LinearRunContext(RunContext):
    """Core's ``RunContext`` with its cache check over an index and its cache logged (internal).

    Set on core's context by :meth:`LinearFunctionalWorkflow._execute` (class swap; no new slots).
    """

    af_log: StepCacheLog
    af_index: dict[tuple[str, str, int | None], set[str]]
    af_live: bool
    af_last: tuple[str, Any] | None = None

    def af_adopt(self, parent: tuple[StepCacheLog, int, int] | None) -> None:
        self.af_log = StepCacheLog(self, parent)
        self.af_index = {}
        self.af_live = False
        for key in self.af_log.cache_keys:
            self.af_note(key)

    def af_note(self, key: str) -> None:
        last = self.af_last
        decoded = last[1] if last is not None and last[0] == key else _decode_versioned_step_cache_key(key)
        if decoded is not None:
            kind, step_name, wrapper, _identity, occurrence = decoded
            self.af_index.setdefault((kind, step_name, occurrence), set()).add(wrapper)

    def _has_incompatible_versioned_cache_entry(self, key: str) -> bool:
        """Core's check (an entry for this call made by an unknown step definition), over the index."""
        current = _decode_versioned_step_cache_key(key)
        self.af_last = (key, current)  # the miss is cached next: af_note reuses the decode
        if current is None:
            return False
        kind, step_name, wrapper, _identity, occurrence = current
        cached = self.af_index.get((kind, step_name, occurrence))
        if not cached:
            return False
        expected = self._expected_step_wrapper_identities.get(step_name, set())
        return any(other != wrapper and other not in expected for other in cached)

    def _set_cached_result(self, key: str, value: Any, *, replayable: bool = True) -> None:
        super()._set_cached_result(key, value, replayable=replayable)
        self.af_log.cache_keys.append(key)
        self.af_note(key)

    def _set_cached_step_auto_request_info_count(self, key: str, count: int) -> None:
        super()._set_cached_step_auto_request_info_count(key, count)
        self.af_log.count_keys.append(key)

    def _export_step_cache(self) -> dict[str, Any]:
        if not self.af_live:
            return super()._export_step_cache()
        if self._non_replayable_step_cache_keys:
            super()._export_step_cache()  # raises core's error
        return self._step_cache

    def _export_step_cache_auto_request_info_counts(self) -> dict[str, int]:
        if not self.af_live:
            return super()._export_step_cache_auto_request_info_counts()
        self.af_live = False
        return self._step_cache_auto_request_info_counts


class LinearFunctionalWorkflow(_CoreFunctionalWorkflow):
    """Core's ``FunctionalWorkflow`` whose runs cost linear time in their ``@step`` calls (internal)."""

    _af_replay: tuple[StepCacheLog, int, int] | None = None
    _af_next: tuple[RunContext, tuple[StepCacheLog, int, int] | None] | None = None

    @classmethod
    def _discover_workflow_dependencies(cls, func: Callable[..., Any]) -> Any:
        token = _CACHED_INSTRUCTIONS.set(True)  # core's signature, from cached bytecode (see the module docstring)
        try:
            return super()._discover_workflow_dependencies(func)  # pyright: ignore[reportPrivateUsage]
        finally:
            _CACHED_INSTRUCTIONS.reset(token)

    def _capture_replay_state(self, ctx: RunContext, message: Any | None = None) -> None:
        super()._capture_replay_state(ctx, message)
        log = ctx.__dict__.get("af_log")
        self._af_replay = None if log is None else (log, len(log.cache_keys), len(log.count_keys))

    def _restore_replay_state(self, ctx: RunContext) -> Any:
        message = super()._restore_replay_state(ctx)
        self._af_next = (ctx, self._af_replay)
        return message

    def _clear_replay_state(self) -> None:
        super()._clear_replay_state()
        self._af_replay = None

    async def _execute(self, ctx: RunContext, message: Any) -> Any:
        pending, self._af_next = self._af_next, None
        ctx.__class__ = LinearRunContext
        cast(LinearRunContext, ctx).af_adopt(pending[1] if pending is not None and pending[0] is ctx else None)
        return await super()._execute(ctx, message)

    async def _save_checkpoint(
        self, ctx: RunContext, storage: CheckpointStorage, previous_checkpoint_id: str | None = None
    ) -> str:
        if not isinstance(ctx, LinearRunContext):
            return await super()._save_checkpoint(ctx, storage, previous_checkpoint_id)
        log = ctx.af_log
        offer = StepCacheOffer(log)
        ctx.af_live = log.live_storage is storage
        token = _OFFER.set(offer)
        try:
            checkpoint_id = await super()._save_checkpoint(ctx, storage, previous_checkpoint_id)
        finally:
            _OFFER.reset(token)
            ctx.af_live = False
        if offer.taken:
            log.live_storage = storage
        return checkpoint_id


_CACHED_INSTRUCTIONS: ContextVar[bool] = ContextVar("af_cached_instructions", default=False)


class _CachedDis:
    """``dis`` as core's ``_functional`` module sees it: instructions cached per code object, for our builds only."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real
        self._cache: WeakKeyDictionary[CodeType, tuple[dis.Instruction, ...]] = WeakKeyDictionary()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get_instructions(self, x: Any, *args: Any, **kwargs: Any) -> Iterator[dis.Instruction]:
        """``dis.get_instructions``; from the cache for a code object inside our signature computation."""
        if not _CACHED_INSTRUCTIONS.get() or args or kwargs or not isinstance(x, CodeType):
            return self._real.get_instructions(x, *args, **kwargs)
        found = self._cache.get(x)
        if found is None:
            found = self._cache[x] = tuple(self._real.get_instructions(x))
        return iter(found)


if isinstance(getattr(_core_functional, "dis", None), ModuleType):
    _core_functional.dis = _CachedDis(dis)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]


def build_core(
    func: Callable[..., Awaitable[Any]],
    *,
    name: str,
    description: str | None,
    checkpoint_storage: CheckpointStorage | None,
) -> _CoreFunctionalWorkflow:
    """Build the core instance our ``FunctionalWorkflow`` drives, as core's definition's ``build`` does."""
    return LinearFunctionalWorkflow(func, name=name, description=description, checkpoint_storage=checkpoint_storage)
