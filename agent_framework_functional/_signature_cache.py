"""What core's signature computation reads, cached for our builds only (core's own classes untouched).

Core computes a workflow's signature on every build and every run: it reads each reachable code
object's instructions and hashes each reachable function's identity (code, defaults, closure).
``_core_compat`` puts :class:`CachedDis` and :class:`CachedIdentity` in place of core's ``dis`` and
``_get_step_wrapper_identity``; both answer from their cache only while :data:`OUR_SIGNATURE` is set
(our ``LinearFunctionalWorkflow``'s signature), and otherwise call core's own.
"""

from __future__ import annotations

import dis
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from types import CodeType, ModuleType
from typing import Any, cast
from weakref import WeakKeyDictionary

OUR_SIGNATURE: ContextVar[bool] = ContextVar("af_our_signature", default=False)
"""Set while one of our builds or runs computes core's signature."""


class CachedDis:
    """``dis`` as core's ``_functional`` module sees it: instructions cached per code object (immutable)."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real
        self._cache: WeakKeyDictionary[CodeType, tuple[dis.Instruction, ...]] = WeakKeyDictionary()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get_instructions(self, x: Any, *args: Any, **kwargs: Any) -> Iterator[dis.Instruction]:
        """``dis.get_instructions``; from the cache for a code object inside our signature computation."""
        if not OUR_SIGNATURE.get() or args or kwargs or not isinstance(x, CodeType):
            return self._real.get_instructions(x, *args, **kwargs)
        found = self._cache.get(x)
        if found is None:
            found = self._cache[x] = tuple(self._real.get_instructions(x))
        return iter(found)


class _PerFunction:
    """A cache of one function's result per function object, kept while ``inputs`` of it stay the ``same``."""

    def __init__(
        self, inputs: Callable[[Any], tuple[Any, ...]], same: Callable[[tuple[Any, ...], tuple[Any, ...]], bool]
    ) -> None:
        self._inputs, self._same = inputs, same
        self._cache: WeakKeyDictionary[Any, tuple[tuple[Any, ...], Any]] = WeakKeyDictionary()

    def get(self, func: Any, real: Callable[[Any], Any], keep: Callable[[Any], bool]) -> Any:
        """``real(func)``, or its cached result while ``func``'s inputs are the same; a result is cached if ``keep``."""
        inputs = self._inputs(func)
        try:
            found = self._cache.get(func)
        except TypeError:  # not weakly referable: nothing cached
            return real(func)
        if found is not None and self._same(found[0], inputs):
            return found[1]
        result = real(func)
        if keep(result):
            self._cache[func] = (inputs, result)
        return result


class CachedIdentity:
    """Core's ``_get_step_wrapper_identity``, its durable results cached per function.

    Core calls a result durable when the function has no closure and only immutable defaults; the
    cached one is reused while the function still has the same code object, name and default objects
    (compared by identity), so a reassigned ``__code__`` or default is hashed again, as core would.
    """

    def __init__(self, real: Callable[[Any], tuple[str, bool]]) -> None:
        self._real = real
        self._cache = _PerFunction(_identity_inputs, _same_inputs)

    def __call__(self, func: Any) -> tuple[str, bool]:
        if not OUR_SIGNATURE.get():
            return self._real(func)
        return self._cache.get(func, self._real, _durable)


def _durable(result: tuple[str, bool]) -> bool:
    return result[1]


def _identity_inputs(func: Any) -> tuple[Any, ...]:
    kwdefaults: dict[str, Any] = getattr(func, "__kwdefaults__", None) or {}
    return (
        getattr(func, "__code__", None),
        getattr(func, "__module__", None),
        getattr(func, "__qualname__", None),
        getattr(func, "__defaults__", None),
        tuple(kwdefaults.items()),
    )


def _same_inputs(cached: tuple[Any, ...], current: tuple[Any, ...]) -> bool:
    code, module, qualname, defaults, kwdefaults = cached
    now_code, now_module, now_qualname, now_defaults, now_kwdefaults = current
    return (
        code is now_code
        and module == now_module
        and qualname == now_qualname
        and defaults is now_defaults
        and len(kwdefaults) == len(now_kwdefaults)
        and all(a[0] == b[0] and a[1] is b[1] for a, b in zip(kwdefaults, now_kwdefaults, strict=True))
    )


class CachedClassification:
    """Core's ``_classify_signature`` (the workflow function's non-``ctx`` parameter names), cached per function.

    Core resolves the function's type hints and signature on every build (about 200 µs); a host builds an
    instance per conversation. A cached result is reused while the function keeps its code object, its
    annotations (the same dict, equal items), ``__signature__`` and ``__wrapped__``; a refusal (more than one
    parameter) is never cached, so it is raised again as core would.
    """

    def __init__(self, real: Callable[[Callable[..., Any]], list[str]]) -> None:
        self._real = real
        self._cache = _PerFunction(_classification_inputs, _same_classification_inputs)

    def __call__(self, func: Callable[..., Any]) -> list[str]:
        return list(self._cache.get(func, self._copied, _always))  # a copy: the caller may change its list

    def _copied(self, func: Callable[..., Any]) -> list[str]:
        return list(self._real(func))


def _always(result: object) -> bool:
    return True


def _classification_inputs(func: Any) -> tuple[Any, ...]:
    found: object = getattr(func, "__annotations__", None)
    annotations = cast("dict[Any, Any]", found) if isinstance(found, dict) else None
    items = tuple(annotations.items()) if annotations is not None else None
    inputs: tuple[Any, ...] = (
        getattr(func, "__code__", None),
        annotations,
        items,
        getattr(func, "__signature__", None),
        getattr(func, "__wrapped__", None),
    )
    return inputs


def _same_classification_inputs(cached: tuple[Any, ...], current: tuple[Any, ...]) -> bool:
    code, annotations, items, signature, wrapped = cached
    now_code, now_annotations, now_items, now_signature, now_wrapped = current
    return (
        code is now_code
        and annotations is now_annotations
        and len(items or ()) == len(now_items or ())
        and all(a[0] == b[0] and a[1] is b[1] for a, b in zip(items or (), now_items or (), strict=True))
        and signature is now_signature
        and wrapped is now_wrapped
    )
