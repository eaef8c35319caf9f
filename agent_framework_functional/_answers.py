"""Typed answers: a ``response_type`` as JSON Schema, and an answer converted to it before the token is spent."""

from __future__ import annotations

import ast
import copy
import functools
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, cast

from agent_framework import Content, WorkflowEvent
from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from ._core_compat import accepts, response_fits
from ._errors import ResponseMismatchError

_MAX_ERRORS = 3  # field errors named in a message (a 10 MB answer must not make a 10 MB message)
_MAX_LOC_PART = 40  # characters of one field name in a path
_MAX_LITERAL = 16_384  # characters of a Python-literal answer worth parsing (ast runs on the event loop)
_SCALAR_ERRORS = frozenset({"bool_type", "int_type", "float_type"})  # pydantic's strict errors of a JSON scalar


STRING_ANSWER = "functional_string_answer"
"""True in a ``function_result``'s ``additional_properties`` when its ``result`` is a JSON string, not JSON text
(core stores every result as text, and ``"3"`` must not answer an ``int``)."""


def value_result(call_id: str, value: Any) -> Content:
    """A ``function_result`` answering ``call_id`` with the JSON ``value`` (a string marked :data:`STRING_ANSWER`)."""
    marked = {STRING_ANSWER: True} if isinstance(value, str) else None
    return Content.from_function_result(call_id=call_id, result=value, additional_properties=marked)


def _cached(function: Callable[[Any], Any], response_type: Any) -> Any:
    """``function(response_type)`` through its cache; an unhashable type is computed anew."""
    try:
        return function(response_type)
    except TypeError:
        return function.__wrapped__(response_type)  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=512)
def _adapter(response_type: Any) -> TypeAdapter[Any] | None:
    try:
        return TypeAdapter(response_type)
    except Exception:  # pydantic cannot build a validator for this type (arbitrary classes, Content)
        return None


@functools.lru_cache(maxsize=512)
def _schema(response_type: Any) -> dict[str, Any] | None:
    adapter = _cached(_adapter, response_type)
    try:
        return adapter.json_schema() if adapter is not None else None
    except Exception:  # a type pydantic validates but cannot describe (callables, for example)
        return None


def response_schema(response_type: Any) -> dict[str, Any] | None:
    """Return the JSON Schema of an answer of type ``response_type`` (on every surfaced request), or None.

    Args:
        response_type: A request's ``response_type``.

    Returns:
        A fresh JSON Schema dict (pydantic's), or None for a type pydantic cannot describe (``Content``).

    Examples:
        .. code-block:: python

            response_schema(bool)  # {"type": "boolean"}
    """
    schema = _cached(_schema, response_type)
    return copy.deepcopy(schema) if schema is not None else None


def parse_json_text(value: Any, response_type: Any) -> Any:
    """``value`` parsed as JSON (or a Python literal: core stores a list as its ``repr``) when the type needs it."""
    if not isinstance(value, str) or _accepts(value, response_type):
        return value
    if not value.strip():
        return None  # core's Content.from_function_result(result=None) stores "": no value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        pass
    if value[:1] in ("[", "{") and len(value) <= _MAX_LITERAL:
        try:
            return ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            pass
    return value


def convert_answer(value: Any, response_type: Any, request_id: str) -> Any:
    """Convert an answer to its request's ``response_type``; what core accepts is returned unchanged.

    Args:
        value: The answer (a Python value or a JSON value; ``None`` passes, as core allows).
        response_type: The request's ``response_type``.
        request_id: The request's id (named in the error).

    Returns:
        ``value`` if core's rule accepts it, else pydantic's validated value (strict on a bool or number).

    Raises:
        ResponseMismatchError: The value fits neither (the message names field paths, never the value).
    """
    if _non_finite(value):
        details = ": NaN and Infinity are not JSON numbers"
    elif value is None or (isinstance(response_type, type) and type(value) is response_type):
        return value
    else:
        converted, details = _converted(value, response_type, request_id)
        if details is None:
            return converted
    name = type_name(response_type)
    raise ResponseMismatchError(
        f"The answer to request {request_id!r} is not a {name} and cannot be converted to {name}{details}. "
        "Resume again with a value of that type (its JSON Schema is the request's response_schema); the "
        "continuation is still pending.",
        request_id=request_id,
    )


def _non_finite(value: Any, depth: int = 0) -> bool:
    """Whether the JSON ``value`` holds NaN or an infinity, which no JSON Schema number admits."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if depth > 64:
        return False  # pydantic refuses what nests this deep anyway
    if isinstance(value, dict):
        return any(_non_finite(item, depth + 1) for item in cast("dict[Any, Any]", value).values())
    if isinstance(value, (list, tuple)):
        return any(_non_finite(item, depth + 1) for item in cast("list[Any]", value))
    return False


def _converted(value: Any, response_type: Any, request_id: str) -> tuple[Any, str | None]:
    """``value`` (or pydantic's validated value) and None when core's rule accepts it; else None and why not."""
    # Never infer a bool or a number: pydantic takes "yes" or 1 for a bool and "3" for an int, core true for an int.
    if response_type is bool:
        fits = response_fits(value, bool, request_id)
        return (value, None) if fits else (None, ": only true or false answers a bool request")
    adapter = _cached(_adapter, response_type)
    inferred = _lax_scalars(adapter, value) if adapter is not None else []
    if inferred:
        return None, ": " + _describe_errors(inferred)
    if response_fits(value, response_type, request_id):
        return value, None
    if adapter is None:
        return None, ""
    try:
        converted = adapter.validate_python(value)
    except ValidationError as exc:
        return None, ": " + _describe_errors(exc.errors(include_url=False, include_input=False, include_context=False))
    except (RecursionError, ValueError, TypeError):
        return None, ": the value nests too deeply or cannot be read"
    return (converted, None) if response_fits(converted, response_type, request_id) else (None, "")


def _lax_scalars(adapter: TypeAdapter[Any], value: Any) -> list[ErrorDetails]:
    """The bool and number fields of ``value`` only lax rules read as one (``"yes"``, ``"3"``; not a whole float)."""
    try:
        adapter.validate_json(json.dumps(value), strict=True)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False)
        return [error for error in errors if error["type"] in _SCALAR_ERRORS and not _whole_float(error)]
    except (RecursionError, ValueError, TypeError):  # not JSON (a Python caller's value): the lax rules decide
        pass
    return []


def _whole_float(error: ErrorDetails) -> bool:
    value = error.get("input")
    return error["type"] == "int_type" and isinstance(value, float) and value.is_integer()


def _describe_errors(errors: list[ErrorDetails]) -> str:
    parts = [f"{_path(error['loc'])}{error['msg']}" for error in errors[:_MAX_ERRORS]]
    if len(errors) > _MAX_ERRORS:
        parts.append(f"and {len(errors) - _MAX_ERRORS} more")
    return "; ".join(parts)


def _path(loc: tuple[int | str, ...]) -> str:
    """A field path (``items[0].title: ``), empty for the value itself."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = part if len(part) <= _MAX_LOC_PART else part[:_MAX_LOC_PART] + "..."
            path += f".{name}" if path else name
    return f"{path}: " if path else ""


def _accepts(value: Any, response_type: Any) -> bool:
    try:
        return accepts(value, response_type)
    except Exception:  # a type core cannot check at run time (a TypedDict, for example)
        return False


def accepts_none(response_type: Any) -> bool:
    """True when ``None`` is a value of ``response_type`` (``X | None``, ``Any``)."""
    return _accepts(None, response_type)


def type_name(response_type: Any) -> str:
    """A readable name of a type (``bool``, ``Review``, ``list[Review]``, ``Optional[Review]``)."""
    if isinstance(response_type, type) and not getattr(response_type, "__args__", None):
        return response_type.__name__
    return repr(response_type).replace("typing.", "")


def check_answers(
    responses: Mapping[str, Any],
    pending_ids: Any,
    requests: Mapping[str, WorkflowEvent[Any]],
    *,
    unchanged: str = "The continuation is still pending.",
) -> dict[str, Any]:
    """Correlate answers with the pause, then convert each answer to its ``response_type`` (earlier rounds' too).

    Raises:
        ResponseMismatchError: No answer names a pending request, or an answer does not fit its type.
    """
    if not any(request_id in pending_ids for request_id in responses):
        raise ResponseMismatchError(
            "None of the responses answers a pending request. Key each answer by a request id of the "
            f"pause: {sorted(pending_ids)!r}. {unchanged}",
            unknown_id=True,
        )
    converted = dict(responses)
    for request_id, event in requests.items():
        if request_id in converted:
            converted[request_id] = convert_answer(converted[request_id], event.response_type, request_id)
    return converted
