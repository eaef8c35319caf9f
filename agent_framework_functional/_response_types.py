"""Response types as text: what a continuation record keeps so any worker can check every answer so far.

The text is ``module:QualName`` (``builtins:list[builtins:int]``), ``typing:Union[...]``,
``typing:Literal[<JSON values>]``, ``typing:Any`` or ``None``; a type that would not read back equal is not
recorded (core checks it). Reading never imports a module, so a record cannot make a worker import code.
"""

from __future__ import annotations

import json
import sys
import typing
from collections.abc import Callable, Mapping
from types import UnionType
from typing import Any

from agent_framework import WorkflowEvent

_NONE = "None"
_ANY = "typing:Any"
_UNION = "typing:Union"
_LITERAL = "typing:Literal"
_JSON = json.JSONDecoder()


def describe_type(response_type: Any) -> str | None:
    """Return ``response_type`` as text that :func:`resolve_type` reads back equal, or None."""
    try:
        text = _describe(response_type)
    except (TypeError, ValueError, AttributeError):
        return None
    return text if text is not None and resolve_type(text) == response_type else None


def describe_requests(requests: Mapping[str, WorkflowEvent[Any]]) -> dict[str, str]:
    """Request id -> response type text for every request whose type can be written."""
    described = ((request_id, describe_type(event.response_type)) for request_id, event in requests.items())
    return {request_id: text for request_id, text in described if text is not None}


def resolve_type(text: str) -> Any | None:
    """Read a type written by :func:`describe_type`; None when its module is not loaded here or it is malformed."""
    try:
        resolved, rest = _parse(text)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
        return None
    return resolved if rest == "" else None


def _describe(value: Any) -> str | None:
    if value is None or value is type(None):
        return _NONE
    if value is typing.Any:
        return _ANY
    origin, args = typing.get_origin(value), typing.get_args(value)
    if origin is None:
        return f"{value.__module__}:{value.__qualname__}" if isinstance(value, type) else None
    if not args:
        return None
    if origin is typing.Literal:
        if not all(arg is None or type(arg) in (str, int, bool) for arg in args):
            return None
        return f"{_LITERAL}[{', '.join(json.dumps(arg) for arg in args)}]"
    head = _UNION if origin in (typing.Union, UnionType) else _describe(origin)
    parts = [_describe(arg) for arg in args]
    if head is None or any(part is None for part in parts):
        return None
    return f"{head}[{', '.join(typing.cast('list[str]', parts))}]"


def _parse(text: str) -> tuple[Any, str]:
    end = next((index for index, char in enumerate(text) if char in "[],"), len(text))
    name, rest = text[:end].strip(), text[end:]
    if name == _LITERAL and rest.startswith("["):
        values, rest = _parse_list(rest[1:], _literal_value)
        return typing.Literal[tuple(values)], rest  # pyright: ignore[reportInvalidTypeForm]
    if rest.startswith("["):
        args, rest = _parse_list(rest[1:], _parse)
        if name == _UNION:
            return typing.Union[tuple(args)], rest  # noqa: UP007 - built from recorded arguments
        origin = _lookup(name)
        return origin[tuple(args) if len(args) > 1 else args[0]], rest
    return _lookup(name), rest


def _literal_value(rest: str) -> tuple[Any, str]:
    value, end = _JSON.raw_decode(rest, len(rest) - len(rest.lstrip()))
    if value is not None and type(value) not in (str, int, bool):
        raise ValueError("a Literal value must be a string, an integer, a boolean or null")
    return value, rest[end:]


def _parse_list(rest: str, parse: Callable[[str], tuple[Any, str]]) -> tuple[list[Any], str]:
    """Parse comma-separated items up to the closing bracket; return them and the text after it."""
    items: list[Any] = []
    while True:
        item, rest = parse(rest)
        items.append(item)
        rest = rest.lstrip()
        if not rest.startswith(","):
            break
        rest = rest[1:]
    if not rest.startswith("]"):
        raise ValueError("unclosed brackets")
    return items, rest[1:]


def _lookup(name: str) -> Any:
    if name == _NONE:
        return type(None)
    if name == _ANY:
        return typing.Any
    module_name, _, qualname = name.partition(":")
    if not qualname:
        raise ValueError("not module:QualName")
    value: Any = sys.modules[module_name]  # never import: only modules this process already loaded
    for part in qualname.split("."):
        value = getattr(value, part)
    return value
