"""Our builds read core's signature inputs from caches (``_signature_cache``) and still get core's signature.

Core recomputes a workflow's signature on every build and every run; ours caches each code object's
instructions and each durable function identity. Whatever a definition's functions become (a
reassigned default or code object, a mutated mutable default), our signature stays the one core
computes for the same function at that moment, and core's own instances never use the caches.
"""

from __future__ import annotations

from typing import Any

from agent_framework import FunctionalWorkflow as CoreFunctionalWorkflow

from agent_framework_functional import step
from agent_framework_functional._core_compat import build_core
from agent_framework_functional._signature_cache import OUR_SIGNATURE, CachedIdentity


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


def test_the_identity_cache_answers_only_inside_our_signature() -> None:
    calls: list[Any] = []

    def real(func: Any) -> tuple[str, bool]:
        calls.append(func)
        return (f"id of {func.__name__}", func.__defaults__ is None or isinstance(func.__defaults__[0], str))

    cached = CachedIdentity(real)
    assert cached(_helper) == cached(_helper) and len(calls) == 2  # outside: core's own, every time
    token = OUR_SIGNATURE.set(True)
    try:
        assert cached(_helper) == ("id of _helper", True)
        assert cached(_helper) == ("id of _helper", True) and len(calls) == 3  # a hit
        cached(_listed)
        cached(_listed)
        assert len(calls) == 5  # not durable: asked again
    finally:
        OUR_SIGNATURE.reset(token)
