"""The few places this package touches core's private API, kept together so they are easy to audit.

Each name is one core itself uses for the same job; the test named beside it imports it, so an upgrade
of core that moves one fails loudly (AGENTS.md's module table says why each is needed):

* ``is_instance_of`` and ``_coerce_request_info_response``: core's type rule for a ``request_info``
  response, run on every answer before a token is claimed (``tests/test_agent_protocol.py``).
* ``SessionContext._response``: set before the after-run providers, as core's ``WorkflowAgent`` does.
* ``RunContext._events``: core's events so far, sent ahead of a later live update (``test_live_streaming.py``).
* ``agent_framework._feature_stage.experimental``: core's experimental marker, with core's feature id.
* ``categorize_middleware`` and the agent layers' ``_get_agent_middleware_pipeline`` /
  ``_trace_agent_invocation``: core's two agent layers, run by ``_agent_layers.py`` because their
  ``run`` drops the resume arguments (``tests/test_agent_layers.py``).
* ``FunctionalWorkflow._run_core`` / ``_finalize_events`` / ``_run_cleanup`` / ``_ensure_not_running``:
  what core's ``run(stream=False)`` wraps, so a non-streaming run spends the token before user code
  and ``is_streaming()`` stays False (``tests/test_core_parity.py``).
* The step cache of the runs we drive: :func:`build_core`'s :class:`LinearFunctionalWorkflow` turns a
  long run's ``RunContext`` into :class:`LinearRunContext` (core's versioned-cache check over an index)
  and offers each checkpoint save the entries added since the last one (:class:`StepCacheLog`,
  :func:`step_cache_offer`); it skips core's save at a clean finish when the run's recorder deletes the
  chain at once (``drops_final_checkpoint``); core's own classes stay untouched (``tests/test_long_runs.py``).
* Core's ``_functional.dis`` and ``_get_step_wrapper_identity``: ``_signature_cache``'s, for our builds only.
"""

from __future__ import annotations

import dis
import functools
import itertools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from types import CoroutineType, ModuleType
from typing import Any, cast

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
from agent_framework._workflows._typing_utils import is_instance_of
from agent_framework._workflows._workflow import _coerce_request_info_response  # pyright: ignore[reportPrivateUsage]

from ._signature_cache import OUR_SIGNATURE, CachedClassification, CachedDis, CachedIdentity
from ._step_cache import CURRENT_OFFER, append_new_keys
from ._step_cache import ORIGINAL_MESSAGE as ORIGINAL_MESSAGE  # re-exported: the storages' step-cache deltas
from ._step_cache import STEP_CACHE as STEP_CACHE
from ._step_cache import STEP_COUNTS as STEP_COUNTS
from ._step_cache import StepCacheOffer as StepCacheOffer
from ._step_cache import step_cache_offer as step_cache_offer

# Core's marker for its functional workflow API; ours is the same feature (same warning, shown once).
functional_workflows_experimental = experimental(feature_id=ExperimentalFeature.FUNCTIONAL_WORKFLOWS)


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


def accepts(value: Any, target_type: Any) -> bool:
    """True when ``value`` is an instance of ``target_type`` by core's rules (generics and unions included)."""
    return is_instance_of(value, target_type)


def collected_events(ctx: RunContext) -> list[WorkflowEvent[Any]] | None:
    """Core's list of events collected so far in this run (``RunContext._events``), or None (renamed by core)."""
    events = getattr(ctx, "_events", None)
    return cast("list[WorkflowEvent[Any]]", events) if isinstance(events, list) else None


def core_event_stream(
    core: _CoreFunctionalWorkflow, *, include_status_events: bool, **run_kwargs: Any
) -> ResponseStream[WorkflowEvent[Any], WorkflowRunResult]:
    """Core's ``run(stream=False)`` as the event stream it wraps, so its first events can be pulled.

    Core's non-streaming ``run`` returns this stream's ``get_final_response()``, so user code sees
    ``ctx.is_streaming()`` False, as in core (``run(stream=True)`` would report True).
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


class StepCacheLog:
    """One run's step cache and request counts, with their keys in insertion order (internal).

    Core only adds entries in a run: what the last save did not store is a slice of the key lists
    (synced when a save asks, :meth:`sync`). ``parent``: the replayed pause's ``(log, cache_len, counts_len)``.
    """

    __slots__ = ("__weakref__", "base", "cache", "cache_keys", "count_keys", "counts", "live_storage", "parent")

    def __init__(self, ctx: RunContext, parent: tuple[StepCacheLog, int, int] | None) -> None:
        self.cache: dict[str, Any] = ctx._step_cache  # pyright: ignore[reportPrivateUsage]
        self.counts: dict[str, int] = ctx._step_cache_auto_request_info_counts  # pyright: ignore[reportPrivateUsage]
        self.cache_keys: list[str] = []
        self.count_keys: list[str] = []
        self.base = (len(self.cache), len(self.counts))
        self.parent = parent if parent is not None and parent[1:] == self.base else None
        # The storage that took this run's first offer: later saves hand it core's live dicts, uncopied.
        self.live_storage: CheckpointStorage | None = None

    def sync(self) -> None:
        """Append to ``cache_keys`` / ``count_keys`` the keys added to the dicts since the last sync."""
        append_new_keys(self.cache_keys, self.cache)
        append_new_keys(self.count_keys, self.counts)


LINEAR_FROM = 4
"""Cached step entries from which a run we drive checks its cache over an index (:class:`LinearRunContext`).

Below it the run keeps core's own ``RunContext`` (its scan of a few keys costs less than the switch,
and core's code keeps seeing one context class)."""


class LinearRunContext(RunContext):
    """Core's ``RunContext`` with its cache check over an index (internal).

    A run's context becomes one (:func:`make_linear`, a class swap) at :data:`LINEAR_FROM` cached steps;
    the index (``(kind, step name, occurrence)`` -> wrapper identities) decodes each new entry once.
    """

    af_index: dict[tuple[str, str, int | None], set[str]]
    af_indexed: int  # how many of the cache's entries (its first ones) the index holds
    af_live: bool = False
    af_last: tuple[str, Any] | None = None

    def _has_incompatible_versioned_cache_entry(self, key: str) -> bool:
        """Core's check (an entry for this call made by an unknown step definition), over the index."""
        current = _decode_versioned_step_cache_key(key)
        if current is None:
            return False
        cache = self._step_cache
        index = self.af_index
        indexed = self.af_indexed
        if len(cache) > indexed:
            last = self.af_last
            # Core only adds entries during a run: the unindexed ones are the newest, at the dict's end.
            for cached_key in itertools.islice(reversed(cache), len(cache) - indexed) if indexed else cache:
                if last is not None and last[0] == cached_key:
                    decoded = last[1]
                else:
                    decoded = _decode_versioned_step_cache_key(cached_key)
                if decoded is not None:
                    entry = (decoded[0], decoded[1], decoded[4])
                    wrappers = index.get(entry)
                    if wrappers is None:
                        index[entry] = {decoded[2]}
                    else:
                        wrappers.add(decoded[2])
            self.af_indexed = len(cache)
        self.af_last = (key, current)  # the miss is cached next: the next check reuses this decode
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


class LinearFunctionalWorkflow(_CoreFunctionalWorkflow):
    """Core's ``FunctionalWorkflow`` whose runs cost linear time in their ``@step`` calls (internal).

    A run becomes a :class:`LinearRunContext` at :data:`LINEAR_FROM` cached steps (checked in each save,
    else in core's per-step hook ``_on_step_completed``); with storage it keeps a :class:`StepCacheLog`
    each save offers. Overrides call core's methods by class, not ``super()`` (no object per call).
    """

    _af_log: StepCacheLog | None = None
    _af_replay: tuple[StepCacheLog, int, int] | None = None
    _af_next: tuple[RunContext, tuple[StepCacheLog, int, int] | None] | None = None

    # Core's check of the workflow function's parameters, cached per function (``_signature_cache``).
    _classify_signature = staticmethod(CachedClassification(_CoreFunctionalWorkflow._classify_signature))  # pyright: ignore[reportPrivateUsage]

    @classmethod
    def _discover_workflow_dependencies(cls, func: Callable[..., Any]) -> Any:
        token = OUR_SIGNATURE.set(True)  # core's signature from cached reads (``_signature_cache``)
        try:
            return super()._discover_workflow_dependencies(func)  # pyright: ignore[reportPrivateUsage]
        finally:
            OUR_SIGNATURE.reset(token)

    def _compute_signature_hash(self, dependencies: Any = None) -> str:
        token = OUR_SIGNATURE.set(True)
        try:
            return super()._compute_signature_hash(dependencies)  # pyright: ignore[reportPrivateUsage]
        finally:
            OUR_SIGNATURE.reset(token)

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

    def _execute(self, ctx: RunContext, message: Any) -> CoroutineType[Any, Any, Any]:
        # A plain method returning core's coroutine: no coroutine frame of its own around the run.
        pending, self._af_next = self._af_next, None
        grown = len(ctx._step_cache) >= LINEAR_FROM  # pyright: ignore[reportPrivateUsage]  # a restore or replay
        if grown:
            make_linear(ctx)
        hook = ctx._on_step_completed  # pyright: ignore[reportPrivateUsage]
        if hook is not None:  # core saves after each step
            self._af_log = StepCacheLog(ctx, pending[1] if pending is not None and pending[0] is ctx else None)
            ctx._on_step_completed = _marked_step_save(hook)  # pyright: ignore[reportPrivateUsage]
        else:
            self._af_log = None
            if not grown:
                ctx._on_step_completed = _linear_when_grown(ctx)  # pyright: ignore[reportPrivateUsage]
        return _CoreFunctionalWorkflow._execute(self, ctx, message)  # pyright: ignore[reportPrivateUsage]

    async def _save_checkpoint(
        self, ctx: RunContext, storage: CheckpointStorage, previous_checkpoint_id: str | None = None
    ) -> str:
        if not ctx._pending_requests and not _STEP_SAVE.get() and getattr(storage, "drops_final_checkpoint", False):  # pyright: ignore[reportPrivateUsage]
            return previous_checkpoint_id or ""  # a clean finish: the recorder would delete this checkpoint at once
        save = _CoreFunctionalWorkflow._save_checkpoint  # pyright: ignore[reportPrivateUsage]
        log = self._af_log
        if log is None or log.cache is not ctx._step_cache:  # pyright: ignore[reportPrivateUsage]
            return await save(self, ctx, storage, previous_checkpoint_id)
        if isinstance(ctx, LinearRunContext):
            linear: LinearRunContext | None = ctx
        else:
            linear = make_linear(ctx) if len(log.cache) >= LINEAR_FROM else None
        offer = StepCacheOffer(log)
        if linear is not None:
            linear.af_live = log.live_storage is storage
        token = CURRENT_OFFER.set(offer)
        try:
            checkpoint_id = await save(self, ctx, storage, previous_checkpoint_id)
        finally:
            CURRENT_OFFER.reset(token)
            if linear is not None:
                linear.af_live = False
        if offer.taken:
            log.live_storage = storage
        return checkpoint_id


_STEP_SAVE: ContextVar[bool] = ContextVar("af_step_save", default=False)


def _marked_step_save(hook: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """Core's per-step save hook, marked so that :meth:`LinearFunctionalWorkflow._save_checkpoint` tells it apart."""

    async def after_step() -> None:
        token = _STEP_SAVE.set(True)
        try:
            await hook()
        finally:
            _STEP_SAVE.reset(token)

    return after_step


if isinstance(getattr(_core_functional, "dis", None), ModuleType):
    _core_functional.dis = CachedDis(dis)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
if callable(getattr(_core_functional, "_get_step_wrapper_identity", None)):
    _core_functional._get_step_wrapper_identity = CachedIdentity(_core_functional._get_step_wrapper_identity)  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]


def _linear_when_grown(ctx: RunContext) -> Callable[[], Awaitable[None]]:
    """Core's per-step hook for a run without checkpoint storage: switch to the index once the cache grew."""

    async def after_step() -> None:
        if len(ctx._step_cache) >= LINEAR_FROM:  # pyright: ignore[reportPrivateUsage]
            make_linear(ctx)
            ctx._on_step_completed = None  # pyright: ignore[reportPrivateUsage]

    return after_step


def build_core(
    func: Callable[..., Awaitable[Any]],
    *,
    name: str,
    description: str | None,
    checkpoint_storage: CheckpointStorage | None,
) -> _CoreFunctionalWorkflow:
    """Build the core instance our ``FunctionalWorkflow`` drives, as core's definition's ``build`` does."""
    return LinearFunctionalWorkflow(func, name=name, description=description, checkpoint_storage=checkpoint_storage)


# ---- Checkpoint decoding's pre-check (_durable/checkpoint_pickles.py) ----------------------------------------------
def checkpoint_global_resolver(allowed_types: frozenset[str], protocol: int) -> Callable[[str, str], Any]:
    """Core's ``find_class`` of a restricted checkpoint decode under ``allowed_types``, at pickle ``protocol``."""
    from agent_framework._workflows._checkpoint_encoding import (
        _REGISTERED_CHECKPOINT_TYPE_KEYS,  # pyright: ignore[reportPrivateUsage]
        _RestrictedUnpickler,  # pyright: ignore[reportPrivateUsage]
    )

    unpickler = _RestrictedUnpickler(bytes((0x80, protocol)) + b"N.", allowed_types | _REGISTERED_CHECKPOINT_TYPE_KEYS)
    unpickler.load()  # only the protocol: dotted names from 4 on, Python 2's module names before 3, as the decoder
    return unpickler.find_class
