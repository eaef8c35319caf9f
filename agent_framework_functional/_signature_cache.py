"""What core's signature computation reads on every build and run, cached for our builds only.

``_core_compat.over_cached_reads`` runs core's signature functions with :class:`CachedDis` and
:class:`CachedIdentity` for ``dis`` and ``_get_step_wrapper_identity``; core's own classes stay untouched.
"""

from __future__ import annotations

import dis
import operator
from collections.abc import Callable, Iterator
from types import CodeType, ModuleType
from typing import Any
from weakref import WeakKeyDictionary


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
