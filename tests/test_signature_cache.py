"""Our builds read core's signature inputs from caches and still get core's signature.

Core recomputes a workflow's signature on every build and every run; ours caches each code object's
instructions and each durable function identity (``_core_compat.CachedDis``, ``CachedIdentity``).
Whatever a definition's functions become (a reassigned default or code object, a mutated mutable
default), our signature stays the one core computes for the same function at that moment, and core's
own instances never use the caches.
"""

from __future__ import annotations

import dis
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FunctionalWorkflow as CoreFunctionalWorkflow
from agent_framework import InMemoryCheckpointStorage
from agent_framework._workflows import _functional as core_functional

from agent_framework_functional import ContinuationStore, SQLiteContinuationStore, step, workflow
from agent_framework_functional._core_compat import CachedDis, CachedIdentity, LinearFunctionalWorkflow, build_core
from agent_framework_functional._step_cache import _IMPLEMENTS  # pyright: ignore[reportPrivateUsage]
from agent_framework_functional._store import is_continuation_store


def _helper(text: str, suffix: str = "!") -> str:
    return text + suffix


def _other_helper(text: str, suffix: str = "!") -> str:
    return text.upper() + suffix


def _listed(text: str, seen: list[str] = []) -> str:  # noqa: B006  # a mutable default on purpose
    return text + str(len(seen))


@step
async def _shout(text: str) -> str:
    return _helper(text) + _listed(text)


async def _flow(topic: str, ctx: Any) -> str:
    return await _shout(topic)


@workflow
async def _step_free(topic: str) -> str:
    return topic


def _both() -> tuple[str, str]:
    ours = build_core(_flow, name="flow", description=None, checkpoint_storage=None).graph_signature_hash
    return ours, CoreFunctionalWorkflow(_flow, name="flow").graph_signature_hash


def test_a_cached_signature_follows_every_change_core_sees() -> None:
    first = _both()
    assert first[0] == first[1] and _both() == first  # a second build: from the caches, the same
    defaults = _helper.__defaults__
    _helper.__defaults__ = ("?",)
    try:
        changed = _both()
        assert changed[0] == changed[1] != first[0]
    finally:
        _helper.__defaults__ = defaults
    code = _helper.__code__
    _helper.__code__ = _other_helper.__code__
    try:
        recoded = _both()
        assert recoded[0] == recoded[1] != first[0]
    finally:
        _helper.__code__ = code
    assert _both() == first
    seen = _listed.__defaults__[0]  # pyright: ignore[reportOptionalSubscript]
    seen.append("x")  # a mutable default is never cached: its contents count
    try:
        grown = _both()
        assert grown[0] == grown[1] != first[0]
    finally:
        seen.clear()
    assert _both() == first


def test_the_identity_cache_keeps_only_durable_results() -> None:
    calls: list[Any] = []

    def real(func: Any) -> tuple[str, bool]:
        calls.append(func)
        return (f"id of {func.__name__}", func.__defaults__ is None or isinstance(func.__defaults__[0], str))

    cached = CachedIdentity(real)
    assert cached(_helper) == ("id of _helper", True)
    assert cached(_helper) == ("id of _helper", True) and len(calls) == 1  # a hit
    cached(_listed)
    cached(_listed)
    assert len(calls) == 3  # not durable: asked again


def test_our_signature_reads_through_the_caches_and_core_reads_its_own() -> None:
    # The caches are the globals of our copies of core's signature functions only: a build of ours must
    # call them (else the copies no longer run on our path), and core's module keeps core's ``dis``.
    discover = LinearFunctionalWorkflow._discover_workflow_dependencies.__func__  # pyright: ignore[reportPrivateUsage, reportFunctionMemberAccess]
    names = discover.__globals__
    assert isinstance(names["dis"], CachedDis) and isinstance(names["_get_step_wrapper_identity"], CachedIdentity)
    assert names is LinearFunctionalWorkflow._compute_signature_hash.__globals__  # pyright: ignore[reportPrivateUsage]
    before = len(names["dis"]._cache)  # pyright: ignore[reportPrivateUsage]
    build_core(_flow, name="flow", description=None, checkpoint_storage=None)
    assert len(names["dis"]._cache) > before or before > 0  # pyright: ignore[reportPrivateUsage]
    assert core_functional.dis is dis
    assert core_functional._get_step_wrapper_identity.__module__ == core_functional.__name__  # pyright: ignore[reportPrivateUsage]
    assert CoreFunctionalWorkflow._discover_workflow_dependencies.__func__.__globals__ is vars(core_functional)  # pyright: ignore[reportPrivateUsage, reportFunctionMemberAccess]


def test_a_store_class_is_checked_once_and_a_non_store_is_refused_every_time(tmp_path: Path) -> None:
    store = SQLiteContinuationStore(tmp_path / "store.db")
    try:
        assert is_continuation_store(store)
    finally:
        store.close()
    assert _IMPLEMENTS[SQLiteContinuationStore][ContinuationStore]
    assert not is_continuation_store(object()) and not _IMPLEMENTS[object][ContinuationStore]
    with pytest.raises(TypeError, match="continuation_store must implement ContinuationStore"):
        _step_free.build(checkpoint_storage=InMemoryCheckpointStorage(), continuation_store=object())  # pyright: ignore[reportArgumentType]


class _StoreProxy:
    """Forwards every attribute to what it wraps (an instrumenting wrapper, say)."""

    def __init__(self, target: object) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def test_a_proxy_class_is_checked_each_time_so_a_proxy_of_nothing_is_refused(tmp_path: Path) -> None:
    store = SQLiteContinuationStore(tmp_path / "store.db")
    try:
        proxy = _StoreProxy(store)
        # Python's own answer: members found through __getattr__ count up to 3.11; 3.12 looks them up statically.
        assert is_continuation_store(proxy) is isinstance(proxy, ContinuationStore)
        assert is_continuation_store(proxy) is (sys.version_info < (3, 12))
    finally:
        store.close()
    assert ContinuationStore not in _IMPLEMENTS.get(_StoreProxy, {})
    assert not is_continuation_store(_StoreProxy(object()))
    with pytest.raises(TypeError, match="continuation_store must implement ContinuationStore"):
        _step_free.build(checkpoint_storage=InMemoryCheckpointStorage(), continuation_store=_StoreProxy(object()))  # pyright: ignore[reportArgumentType]


def test_a_store_made_of_instance_attributes_is_one_after_a_no_for_its_class() -> None:
    """A class's remembered no does not hide members an instance has of its own (a store bound in ``__init__``)."""
    real = SQLiteContinuationStore(":memory:")
    try:
        members = {name: getattr(real, name) for name in dir(real) if not name.startswith("_")}
        assert not is_continuation_store(types.SimpleNamespace(x=1))
        assert is_continuation_store(types.SimpleNamespace(**members))
        assert not is_continuation_store(types.SimpleNamespace(x=2))
    finally:
        real.close()
