"""Decoding checkpoints without a sealer: a pickle that applies state to a global is refused before it runs.

Core's allow-list judges the globals a pickle names, not what it does with them: a pickle may name an
allowed class (``WorkflowCheckpoint`` itself) and ``BUILD`` a state onto it, which patches the class for
the whole process. ``_durable/checkpoint_pickles.py`` walks every pickle first and refuses that (and
``SETITEM(S)``, ``APPEND(S)``, ``ADDITEMS`` on anything the pickle did not create) with the error of a type
outside the allow-list, so nothing is changed. Every value core encodes still decodes as core decodes it, in
every pickle protocol. The storages' tests of the same attack: ``tests/stores/test_checkpoint_storage_contract.py``
(whole bodies) and ``test_checkpoint_pickles_stored.py`` (step-cache chunks on Redis and PostgreSQL).
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import datetime
import decimal
import enum
import pickle
import re
import struct
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pydantic
import pytest
from agent_framework import Message, WorkflowCheckpoint, WorkflowCheckpointException, WorkflowRunState
from agent_framework._workflows._checkpoint_encoding import decode_checkpoint_value, encode_checkpoint_value

from agent_framework_functional._durable.checkpoint_pickles import PICKLED, TYPE_KEY, check_pickles, decode_value

CHECKPOINT = "agent_framework._workflows._checkpoint"
EVENTS = WorkflowRunState.__module__
BLOCKED = r"^Failed to decode pickled checkpoint data: Checkpoint deserialization blocked"


@dataclasses.dataclass
class Point:
    x: int
    label: str = ""
    tags: tuple[str, ...] = ()


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node] = dataclasses.field(default_factory=list)
    parent: Node | None = None


class Outer:
    @dataclasses.dataclass
    class Inner:
        value: int


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Slotted) and (self.a, self.b) == (other.a, other.b)

    __hash__ = None  # type: ignore[assignment]


class Reduced:
    """Rebuilt by ``REDUCE`` of its class, then ``BUILD`` of the state its ``__reduce__`` returns."""

    def __init__(self, seed: int) -> None:
        self.seed, self.extra = seed, None

    def __reduce__(self) -> tuple[Any, ...]:
        return (Reduced, (self.seed,), {"extra": self.extra})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reduced) and (self.seed, self.extra) == (other.seed, other.extra)

    __hash__ = None  # type: ignore[assignment]


class Verdict(pydantic.BaseModel):
    approved: bool
    notes: list[str] = []


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Perm(enum.Flag):
    READ = 1
    WRITE = 2


class Tagged(collections.OrderedDict[str, int]):
    pass


ALLOWED = frozenset(
    f"{__name__}:{name}"
    for name in ("Point", "Node", "Outer", "Outer.Inner", "Slotted", "Reduced", "Verdict", "Colour", "Level", "Perm")
) | {f"{__name__}:Tagged"}


def _looped() -> Node:
    root = Node("root")
    root.children.append(Node("leaf", parent=root))
    return root


def _tagged() -> Tagged:
    value = Tagged(a=1)
    value.note = "x"  # type: ignore[attr-defined]  # an instance __dict__: OrderedDict's reduce carries a BUILD
    return value


def _deque() -> collections.deque[int]:
    return collections.deque([1, 2, 3], maxlen=5)


LEGITIMATE: dict[str, Callable[[], Any]] = {
    "dataclass": lambda: Point(1, "a", ("t",)),
    "recursive dataclass": _looped,
    "nested class": lambda: Outer.Inner(7),
    "slots": lambda: Slotted(1, 2),
    "reduce then build": lambda: Reduced(4),
    "pydantic model": lambda: Verdict(approved=True, notes=["ok"]),
    "enum members": lambda: (Colour.RED, Level.HIGH, Perm.READ | Perm.WRITE, WorkflowRunState.IDLE),
    "core types": lambda: (
        Message(role="user", contents=["hi"]),
        WorkflowCheckpoint(workflow_name="w", graph_signature_hash=""),
    ),
    "collections": lambda: (collections.defaultdict(list, a=[1]), collections.Counter("aab"), _deque(), _tagged()),
    "values": lambda: (
        datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc),
        datetime.timedelta(seconds=3),
        uuid.UUID(int=5),
        decimal.Decimal("1.5"),
        {1, 2},
        frozenset({3}),
        b"x",
        bytearray(b"y"),
        complex(1, 2),
        range(3),
        slice(1, 2),
        type(None),
    ),
}


def _envelope(data: bytes, type_key: str = "x:y") -> dict[str, str]:
    return {PICKLED: base64.b64encode(data).decode("ascii"), TYPE_KEY: type_key}


class _Decoded:
    """A decoded value, equal to another when both pickle to the same bytes or have the same ``repr``.

    Values may be recursive, so they are compared as bytes; two decodes of one pickle may still share equal
    strings differently (Python 3.10, protocol 2: the same memo layout is not guaranteed), so an equal ``repr``
    (object addresses left out) counts too.
    """

    def __init__(self, value: Any) -> None:
        self.pickled, self.text = pickle.dumps(value), re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Decoded) and (self.pickled == other.pickled or self.text == other.text)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return self.text[:200]


def _outcome(decode: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", the decoded value)`` or ``("refused", why)``."""
    try:
        return "ok", _Decoded(decode())
    except WorkflowCheckpointException as exc:
        return "refused", str(exc)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_every_value_core_encodes_decodes_as_core_decodes_it(name: str, protocol: int) -> None:
    value = LEGITIMATE[name]()
    try:
        data = pickle.dumps(value, protocol=protocol)
    except TypeError:
        pytest.skip(f"pickle cannot write it in protocol {protocol}")
    encoded = {"v": _envelope(data, f"{type(value).__module__}:{type(value).__qualname__}")}
    core = _outcome(lambda: decode_checkpoint_value(encoded, allowed_types=ALLOWED))
    assert _outcome(lambda: decode_value(encoded, ALLOWED)) == core
    assert core[0] == "ok" or protocol < pickle.HIGHEST_PROTOCOL, core  # what core writes always decodes
    if protocol == pickle.HIGHEST_PROTOCOL:  # also through core's own encoder
        written = encode_checkpoint_value({"v": value})
        core = _outcome(lambda: decode_checkpoint_value(written, allowed_types=ALLOWED))
        assert core[0] == "ok" and _outcome(lambda: decode_value(written, ALLOWED)) == core


def _unicode(text: str) -> bytes:
    raw = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _slots(**attributes: bytes) -> bytes:
    """A ``(None, {name: value})`` BUILD state: pickle sets each with ``setattr``."""
    items = b"".join(_unicode(name) + value for name, value in attributes.items())
    return b"N}(" + items + b"u\x86"


_INT = _global("builtins", "int")
_CLASS = _global(CHECKPOINT, "WorkflowCheckpoint")
HOSTILE: dict[str, bytes] = {
    "build on a class": b"\x80\x02" + _CLASS + _slots(from_dict=_INT) + b"b.",
    "build on a class memoised, fetched again": b"\x80\x04"
    + _unicode(CHECKPOINT)
    + _unicode("WorkflowCheckpoint")
    + b"\x93\x940h\x00"
    + _slots(from_dict=_INT)
    + b"b.",
    "build on a class duplicated": b"\x80\x02" + _CLASS + b"2" + _slots(x=_INT) + b"b.",
    "build on type(an enum member)": b"\x80\x02"
    + _global("builtins", "type")
    + _global(EVENTS, "WorkflowRunState")
    + _unicode("IDLE")
    + b"\x85R\x85R"
    + _slots(from_dict=_INT)
    + b"b.",
    "build on an enum member looked up by value": b"\x80\x02"
    + _global(EVENTS, "WorkflowRunState")
    + _unicode("IDLE")
    + b"\x85R}"
    + _unicode("_name_")
    + _unicode("BUSY")
    + b"sb.",
    "build on an enum member made by NEWOBJ": b"\x80\x02"
    + _global(EVENTS, "WorkflowRunState")
    + _unicode("IDLE")
    + b"\x85\x81}"
    + _unicode("_name_")
    + _unicode("BUSY")
    + b"sb.",
    "build on an enum member made by copyreg's reconstructor": b"\x80\x02"
    + _global("copyreg", "_reconstructor")
    + _global(EVENTS, "WorkflowRunState")
    + b"2"
    + _unicode("IDLE")
    + b"\x87R}"
    + _unicode("_name_")
    + _unicode("BUSY")
    + b"sb.",
    "build on an enum member through getattr": b"\x80\x02"
    + _global("builtins", "getattr")
    + _global(EVENTS, "WorkflowRunState")
    + _unicode("IDLE")
    + b"\x86R}"
    + _unicode("_name_")
    + _unicode("BUSY")
    + b"sb.",
    "setitem on a class": b"\x80\x02" + _CLASS + _unicode("k") + _INT + b"s.",
    "setitems on a class": b"\x80\x02" + _CLASS + b"(" + _unicode("k") + _INT + b"u.",
    "append on a class": b"\x80\x02" + _CLASS + _INT + b"a.",
    "appends on a class": b"\x80\x02" + _CLASS + b"(" + _INT + b"e.",
    "additems on a class": b"\x80\x04" + _CLASS + b"(" + _INT + b"\x90.",
}


@pytest.fixture
def untouched() -> Iterator[Callable[[], bool]]:
    """Whether the classes and members the hostile pickles aim at are unchanged (put back afterwards if not)."""
    watched: list[Any] = [WorkflowCheckpoint, WorkflowRunState, *WorkflowRunState]
    before = [dict(vars(item)) for item in watched]
    yield lambda: [dict(vars(item)) for item in watched] == before
    for item, saved in zip(watched, before, strict=True):
        kind: Any = type if isinstance(item, type) else object  # past EnumMeta's guard, as the attack was
        for name in set(vars(item)) - set(saved):
            kind.__delattr__(item, name)
        for name, value in saved.items():
            if vars(item).get(name, saved) is not value:
                kind.__setattr__(item, name, value)


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_state_applied_to_a_global_is_refused_before_anything_runs(attack: str, untouched: Callable[[], bool]) -> None:
    encoded = {"state": {"planted": _envelope(HOSTILE[attack])}}
    with pytest.raises(WorkflowCheckpointException, match=BLOCKED) as refused:
        decode_value(encoded, frozenset())
    assert untouched()  # nothing was patched
    outside = {"state": {"planted": _envelope(b"\x80\x02" + _global("pathlib", "PurePosixPath") + b")R.")}}
    with pytest.raises(WorkflowCheckpointException, match=BLOCKED) as disallowed:
        decode_value(outside, frozenset())
    assert type(refused.value) is type(disallowed.value)  # the refusal of a type outside the allow-list
    assert isinstance(refused.value.__cause__, pickle.UnpicklingError)
    assert isinstance(disallowed.value.__cause__, pickle.UnpicklingError)


def test_a_type_outside_the_allow_list_gets_cores_own_message() -> None:
    encoded = {"v": _envelope(pickle.dumps(Point(1), protocol=5), f"{__name__}:Point")}
    with pytest.raises(WorkflowCheckpointException) as core:
        decode_checkpoint_value(encoded, allowed_types=frozenset())
    with pytest.raises(WorkflowCheckpointException) as ours:
        check_pickles(encoded, frozenset())
    assert str(ours.value) == str(core.value)


@pytest.mark.parametrize(
    "broken",
    [b"\x80\x02b.", b"\x80\x02(\x85R.", b"\x80\x02h\x05.", b"\x80\x02\x93.", b"\x80\x02K\x01K\x02\x93."],
    ids=["underflow", "no callable", "unknown memo", "stack global underflow", "stack global of ints"],
)
def test_a_malformed_pickle_is_core_exception(broken: bytes) -> None:
    with pytest.raises(WorkflowCheckpointException, match=r"^Failed to decode pickled checkpoint data"):
        check_pickles([{"deep": [_envelope(broken)]}], frozenset())


def test_envelopes_are_found_where_core_finds_them() -> None:
    assert set(encode_checkpoint_value({"v": Point(1)})["v"]) == {PICKLED, TYPE_KEY}  # core's envelope
    hostile = _envelope(HOSTILE["build on a class"])
    for where in ([[hostile]], {"a": {"b": [1, hostile]}}, hostile):
        with pytest.raises(WorkflowCheckpointException, match=BLOCKED):
            check_pickles(where, frozenset())
    check_pickles({PICKLED: 1, "other": hostile["__pickled__"]}, frozenset())  # no envelope: plain JSON to core
