"""What core's signature computation reads on every build and run, cached for our builds only.

``_core_compat.over_cached_reads`` runs core's signature functions with :class:`CachedDis` and
:class:`CachedIdentity` for ``dis`` and ``_get_step_wrapper_identity``; core's own classes stay untouched.
"""

from __future__ import annotations

import dis
import functools
import operator
from collections.abc import Callable, Iterator
from types import CodeType, FunctionType, GenericAlias, ModuleType, UnionType
from typing import Any, ForwardRef, cast
from weakref import WeakKeyDictionary

_FAILED = object()
"""What a string annotation evaluated to when its evaluation raised (core's type hints are then empty)."""

_ALIAS_TYPES = (GenericAlias, UnionType)


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


class _PerFunction:
    """Core's ``real`` cached per function object while the objects its result depends on stay the same."""

    def __init__(self, real: Callable[[Any], Any]) -> None:
        self._real = real
        self._cache: WeakKeyDictionary[Any, tuple[tuple[Any, ...], Any]] = WeakKeyDictionary()

    def _get(self, func: Any, inputs: tuple[Any, ...] | None, *, durable_only: bool = False) -> Any:
        """``real(func)``, or its result cached with the same ``inputs``; ``durable_only``: cache a durable one only."""
        if inputs is None:
            return self._real(func)
        try:
            found = self._cache.get(func)
        except TypeError:  # not weakly referable: nothing cached
            return self._real(func)
        if found is not None and _same(found[0], inputs):
            return found[1]
        result = self._real(func)
        if not durable_only or result[1]:
            self._cache[func] = (inputs, result)
        return result


class CachedIdentity(_PerFunction):
    """Core's ``_get_step_wrapper_identity``, its durable results reused while code, name and defaults stay."""

    def __call__(self, func: Any) -> tuple[str, bool]:
        kwdefaults: dict[str, Any] = getattr(func, "__kwdefaults__", None) or {}
        code, defaults = getattr(func, "__code__", None), getattr(func, "__defaults__", None)
        names = (getattr(func, "__module__", None), getattr(func, "__qualname__", None))
        inputs = (code, *names, defaults, len(kwdefaults), *kwdefaults, *kwdefaults.values())
        return self._get(func, ((), inputs), durable_only=True)


class CachedClassification(_PerFunction):
    """Core's ``_classify_signature`` (the non-``ctx`` parameter names), cached per function (a host builds often).

    Reused only for a plain function (or ``__wrapped__`` chain) whose every link keeps its code, annotations,
    ``__signature__``, defaults, type parameters and string annotations' values; a refusal is never cached.
    """

    def __call__(self, func: Callable[..., Any]) -> list[str]:
        return list(self._get(func, _classification_inputs(func)))  # a copy: the cache keeps core's own list


def _classification_inputs(func: Any) -> tuple[Any, ...] | None:
    """What core's answer depends on: (string annotations' values, objects compared by identity); None: no cache."""
    links: list[FunctionType] = []  # ``func`` and the plain functions its ``__wrapped__`` attributes lead to
    current: Any = func
    while current is not _FAILED:
        if type(current) is not FunctionType or len(links) == 64 or any(current is link for link in links):
            return None
        links.append(current)
        current = vars(current).get("__wrapped__", _FAILED)
    resolved = _resolved_annotations(func.__annotations__, links[-1].__globals__)
    if resolved is None:
        return None
    inputs: list[Any] = []
    for link in links:
        annotations: dict[str, Any] = link.__annotations__
        kwdefaults: dict[str, Any] = link.__kwdefaults__ or {}
        inputs += (vars(link).get("__wrapped__"), link.__code__, annotations, link.__defaults__, link.__kwdefaults__)
        inputs += (vars(link).get("__signature__"), getattr(link, "__type_params__", None))
        inputs += (len(annotations), *annotations, *annotations.values(), len(kwdefaults), *kwdefaults.values())
    return tuple(resolved), tuple(inputs)


def _same(cached: tuple[Any, ...], current: tuple[Any, ...]) -> bool:
    """Objects the same (by identity), resolved annotations the same or equal generic aliases."""
    (values, objects), (now_values, now_objects) = cached, current
    return (
        len(objects) == len(now_objects)
        and all(map(operator.is_, objects, now_objects))
        and len(values) == len(now_values)
        and all(map(_same_annotation, values, now_values))
    )


def _resolved_annotations(annotations: dict[str, Any], namespace: dict[str, Any]) -> list[Any] | None:
    """Each string annotation evaluated as core's type hints evaluate it; None when one may resolve later."""
    resolved: list[Any] = []
    for value in annotations.values():
        if isinstance(value, str):
            code = _compiled(value)
            try:
                value = _FAILED if code is None else eval(code, namespace, namespace)  # core evaluates it too
            except Exception:  # core's type hints fail as a whole, the same way every time
                value = _FAILED
            resolved.append(value)
        if value is not _FAILED and _holds_forward_reference(value):
            return None
    return resolved


@functools.lru_cache(maxsize=1024)
def _compiled(annotation: str) -> CodeType | None:
    try:
        return compile(annotation, "<annotation>", "eval")
    except (SyntaxError, ValueError):
        return None


def _holds_forward_reference(value: Any, depth: int = 0) -> bool:
    """Whether resolving ``value`` would evaluate text again (a string or ``ForwardRef`` inside it)."""
    if isinstance(value, (str, ForwardRef)) or depth > 16:
        return True
    args: object = getattr(value, "__args__", None)
    return isinstance(args, tuple) and any(
        _holds_forward_reference(arg, depth + 1) for arg in cast("tuple[Any, ...]", args)
    )


def _same_annotation(cached: Any, current: Any) -> bool:
    """The same object, or an equal generic alias (``list[str]`` is a new object on every evaluation)."""
    if cached is current:
        return True
    kind: type = type(current)  # pyright: ignore[reportUnknownVariableType]
    return type(cached) is kind and (kind in _ALIAS_TYPES or kind.__module__ == "typing") and bool(cached == current)
