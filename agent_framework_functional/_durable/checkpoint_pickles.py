"""Decoding a checkpoint value: each pickle checked opcode by opcode before core's ``decode_checkpoint_value`` runs.

Core's allow-list judges which globals a pickle names, not what it does with them (a ``BUILD`` on a named class
sets its attributes process-wide), so state applied to anything the pickle did not create is refused first.
"""

from __future__ import annotations

import base64
import functools
import pickle  # nosec: only pickletools reads the bytes here; core's restricted unpickler decodes them
import pickletools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import EnumMeta
from typing import Any

from agent_framework import WorkflowCheckpointException

from .._core_compat import checkpoint_global_resolver, core_decode_checkpoint_value

PICKLED, TYPE_KEY = "__pickled__", "__type__"  # the envelope core writes for a value JSON cannot hold

_MARK = object()
_RECONSTRUCTOR = "copyreg:_reconstructor"  # pickle's protocol-0/1 helper: object.__new__(cls), a new instance
_TARGETED = {"BUILD": 1, "SETITEM": 2, "APPEND": 1}  # opcodes that apply state: items popped above the target
_MARKED = {"SETITEMS", "APPENDS", "ADDITEMS"}  # the same, their items above a mark
_GETS = {"GET", "BINGET", "LONG_BINGET"}
_GETATTR = {"builtins:getattr", "__builtin__:getattr"}  # core's restricted getattr: a nested class or enum member
_TUPLES = {"EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"}
_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}


@dataclass(frozen=True, slots=True)
class _Item:
    """What the scan knows of one stack entry: made by this pickle, or an object that already existed."""

    made: bool
    key: str = ""  # a global's "module:name"
    value: Any = None  # a global's resolved object

    def call(self, args: Any) -> _Item:
        """What calling this entry with ``args`` returns (REDUCE, INST, OBJ); ``args`` None: NEWOBJ's ``__new__``."""
        if self.made:
            return _SHARED
        if args is not None and self.key in _GETATTR:
            return _attribute(self, args)
        if args is not None and self.key == _RECONSTRUCTOR:  # base.__new__(cls, state): an enum base returns a member
            return _MADE if len(args) == 3 and isinstance(args[1], _Item) and _makes(args[1].value) else _SHARED
        return _MADE if _makes(self.value) else _SHARED  # getattr / type / an enum's lookup: already existed


_MADE = _Item(made=True)
_SHARED = _Item(made=False)


def _makes(value: Any) -> bool:
    """Whether calling ``value`` makes a new instance: a class, not a metaclass, not an enum (its members exist)."""
    return isinstance(value, type) and not issubclass(value, type) and not isinstance(value, EnumMeta)


def _attribute(getter: _Item, args: tuple[Any, ...]) -> _Item:
    """What core's restricted getattr returns for ``args``, resolved now as the decoder would (refusals included)."""
    if len(args) != 2 or not isinstance(args[0], _Item) or args[0].value is None or not isinstance(args[1], str):
        return _SHARED
    owner, name = args
    return _Item(made=False, key=f"{owner.key}.{name}", value=getter.value(owner.value, name))


def _blocked(reason: str) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(f"Checkpoint deserialization blocked: {reason}")


class _Scan:
    """One pickle's opcodes run on a stack of :class:`_Item` (strings kept as themselves); nothing is built."""

    def __init__(self, data: bytes, resolver: Callable[[int], Callable[[str, str], Any]]) -> None:
        self.data = data
        self.resolver = resolver
        self.protocol = 0  # until a PROTO opcode says otherwise, as the unpickler reads it
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}

    def run(self) -> None:
        for opcode, arg, pos in pickletools.genops(self.data):
            name = opcode.name
            if name == "STOP":
                return
            if name == "PROTO":
                self.protocol = arg
            if name in _TARGETED or name in _MARKED:
                self._apply_state(name)
            elif name in _GETS or name in _PUTS or name in ("MEMOIZE", "DUP", "MARK"):
                self._memo_or_copy(name, arg)
            elif name in ("GLOBAL", "INST"):
                self._global_line(name, pos)
            elif name in ("STACK_GLOBAL", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ"):
                self._call(name)
            else:
                self._generic(opcode, arg)

    def _pop(self, count: int = 1) -> list[Any]:
        if len(self.stack) < count:
            raise _blocked("a malformed pickle (stack underflow).")
        popped = self.stack[len(self.stack) - count :]
        del self.stack[len(self.stack) - count :]
        return popped

    def _pop_mark(self) -> list[Any]:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index] is _MARK:
                items = self.stack[index + 1 :]
                del self.stack[index:]
                return items
        raise _blocked("a malformed pickle (no mark).")

    def _top(self) -> Any:
        if not self.stack:
            raise _blocked("a malformed pickle (stack underflow).")
        return self.stack[-1]

    def _apply_state(self, name: str) -> None:
        """BUILD, SETITEM(S), APPEND(S), ADDITEMS: only on an object this pickle made."""
        if name in _MARKED:
            self._pop_mark()
        else:
            self._pop(_TARGETED[name])
        target = self._top()
        if isinstance(target, _Item) and not target.made:
            what = f"'{target.key}'" if target.key else "an object it did not create"
            raise _blocked(f"the pickle applies state ({name}) to {what}, not to an instance it created.")

    def _memo_or_copy(self, name: str, arg: Any) -> None:
        if name == "MARK":
            self.stack.append(_MARK)
        elif name == "DUP":
            self.stack.append(self._top())
        elif name in _GETS:
            if arg not in self.memo:
                raise _blocked("a malformed pickle (memo value not found).")
            self.stack.append(self.memo[arg])
        else:
            self.memo[len(self.memo) if name == "MEMOIZE" else arg] = self._top()

    def _global_line(self, name: str, pos: int) -> None:
        """GLOBAL / INST: the module and name as the unpickler reads them (two lines of UTF-8)."""
        module, qualname = (part.decode("utf-8") for part in self.data[pos + 1 :].split(b"\n", 2)[:2])
        found = self._resolved(module, qualname)
        if name == "INST":
            found = found.call(tuple(self._pop_mark()))
        self.stack.append(found)

    def _resolved(self, module: Any, qualname: Any) -> _Item:
        if not isinstance(module, str) or not isinstance(qualname, str):
            raise _blocked("a global named by something other than two strings.")
        return _Item(made=False, key=f"{module}:{qualname}", value=self.resolver(self.protocol)(module, qualname))

    def _call(self, name: str) -> None:
        """STACK_GLOBAL, and the calls: REDUCE, NEWOBJ, NEWOBJ_EX, OBJ (the callable below its arguments)."""
        if name == "STACK_GLOBAL":
            module, qualname = self._pop(2)
            self.stack.append(self._resolved(module, qualname))
            return
        popped = self._pop_mark() if name == "OBJ" else self._pop(3 if name == "NEWOBJ_EX" else 2)
        callee = popped[0] if popped else _MADE
        if name == "REDUCE":  # the arguments: a tuple the scan kept, or not known
            args = popped[1] if isinstance(popped[1], tuple) else ()
        else:
            args = tuple(popped[1:]) if name == "OBJ" else None
        self.stack.append(callee.call(args) if isinstance(callee, _Item) else _SHARED)

    def _generic(self, opcode: pickletools.OpcodeInfo, arg: Any) -> None:
        """Every other opcode: its arguments popped, its results pushed (a string as itself, the rest made)."""
        before = opcode.stack_before
        if pickletools.markobject in before:
            popped = self._pop_mark()
            self._pop(len(before) - 2)
        else:
            popped = self._pop(len(before))
        if opcode.stack_after == [pickletools.pyunicode]:
            self.stack.append(arg)
        elif opcode.name in _TUPLES:
            self.stack.append(tuple(popped))  # kept: the arguments of a getattr
        elif opcode.name in ("EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"):
            self.stack.append(_SHARED)  # an object looked up elsewhere, not made here
        else:
            self.stack.extend(_MADE for _ in opcode.stack_after)


def _pickles(encoded: Any) -> Iterator[Any]:
    """Every envelope's pickle text in a value, as core's decoder finds them (without recursion)."""
    pending = [encoded]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            if PICKLED in value and TYPE_KEY in value:
                yield value[PICKLED]
            else:
                pending.extend(value.values())  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
        elif isinstance(value, list):
            pending.extend(value)  # pyright: ignore[reportUnknownArgumentType]


def check_pickles(encoded: Any, allowed_types: frozenset[str]) -> None:
    """Refuse, before anything is decoded, a value whose pickles name a type outside the allow-list or set state on one.

    Raises:
        WorkflowCheckpointException: A pickle is malformed, names a global core's allow-list refuses, or applies
            state to an object it did not create; the message as core's for a type outside the allow-list.
    """
    resolver = functools.cache(functools.partial(checkpoint_global_resolver, allowed_types))
    for text in _pickles(encoded):
        try:
            _Scan(base64.b64decode(text.encode("ascii"), validate=True), resolver).run()
        except Exception as exc:  # as core's decoder: whatever goes wrong is its exception
            raise WorkflowCheckpointException(f"Failed to decode pickled checkpoint data: {exc}") from exc


def decode_value(encoded: Any, allowed_types: frozenset[str]) -> Any:
    """Core's checkpoint decoding under its allow-list (``decode_checkpoint_value``), after :func:`check_pickles`."""
    check_pickles(encoded, allowed_types)
    return core_decode_checkpoint_value(encoded, allowed_types)


def unsavable(checkpoint_id: str) -> WorkflowCheckpointException:
    """The refusal of a save whose checkpoint cannot be encoded, or would not decode under the allowed types."""
    return WorkflowCheckpointException(
        f"Checkpoint {checkpoint_id} cannot be encoded or restored under this storage's allowed "
        "types; refusing to save. Add its types to allowed_checkpoint_types."
    )
