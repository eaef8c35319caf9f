"""The step-cache offer a checkpoint save of a run we drive hands its storage (no core private API).

``_core_compat`` gives each save's recorder a :class:`StepCacheOffer` for a :class:`DeltaCheckpointStorage`.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Protocol, cast, runtime_checkable
from weakref import WeakKeyDictionary

from agent_framework import WorkflowCheckpoint

STEP_CACHE = "_step_cache"
STEP_COUNTS = "_step_cache_auto_request_info_counts"
ORIGINAL_MESSAGE = "_original_message"


def append_new_keys(keys: list[str], entries: dict[str, Any]) -> None:
    """Append to ``keys`` the keys added to ``entries`` since (core only adds entries during a run): O(new)."""
    new = len(entries) - len(keys)
    if new <= 0:
        return
    if keys:  # the newest keys, read from the dict's end
        keys.extend(reversed(list(itertools.islice(reversed(entries), new))))
    else:
        keys.extend(entries)


class StepCacheLog:
    """One run's step cache and request counts (core's dicts) with keys in order; ``parent``: the replayed one's."""

    __slots__ = ("__weakref__", "base", "cache", "cache_keys", "count_keys", "counts", "live", "parent")

    def __init__(
        self, cache: dict[str, Any], counts: dict[str, int], parent: tuple[StepCacheLog, int, int] | None
    ) -> None:
        self.cache = cache
        self.counts = counts
        self.cache_keys: list[str] = []
        self.count_keys: list[str] = []
        self.base = (len(self.cache), len(self.counts))
        self.parent = parent if parent is not None and parent[1:] == self.base else None
        # A save of this run took an offer: later saves hand the run's storage core's live dicts, uncopied.
        self.live = False

    def sync(self) -> None:
        append_new_keys(self.cache_keys, self.cache)
        append_new_keys(self.count_keys, self.counts)


class StepCacheOffer:
    """What one checkpoint save offers a storage: the log and its length at this save.

    A storage that takes it (:meth:`take`, before its first ``await``) gets core's live dicts, not copies,
    and reads entries by key up to ``cache_len`` / ``counts_len``, so later steps cannot leak in.
    """

    __slots__ = ("cache_len", "counts_len", "log", "taken")

    def __init__(self, log: StepCacheLog) -> None:
        log.sync()
        self.log = log
        self.cache_len = len(log.cache_keys)
        self.counts_len = len(log.count_keys)
        self.taken = False

    def take(self, state: dict[str, Any]) -> bool:
        """Accept the offer for a checkpoint whose ``state`` core built for it; False when it is not that one."""
        cache, counts = state.get(STEP_CACHE), state.get(STEP_COUNTS)
        log = self.log
        if (cache is log.cache and counts is log.counts) or (
            isinstance(cache, dict)
            and isinstance(counts, dict)
            and len(cast("dict[str, Any]", cache)) == len(log.cache)
            and len(cast("dict[str, Any]", counts)) == len(log.counts)
        ):
            self.taken = True
        return self.taken


@runtime_checkable
class DeltaCheckpointStorage(Protocol):
    """The optional capability of a checkpoint storage that stores each step result once (checked once per run)."""

    async def save_with_offer(self, checkpoint: WorkflowCheckpoint, offer: StepCacheOffer | None) -> str:
        """Save ``checkpoint`` as ``save`` does, its new step results taken from ``offer`` when it fits."""
        ...


_IMPLEMENTS: WeakKeyDictionary[type, dict[type, bool]] = WeakKeyDictionary()


@functools.cache
def _members(protocol: type) -> tuple[str, ...]:
    """A protocol's public members."""
    return tuple(name for name in vars(protocol) if not name.startswith("_"))


def implements(obj: object, protocol: type) -> bool:
    """``isinstance(obj, protocol)``, remembered per class where the class decides (a check costs about 10 µs).

    Remembered: a yes when the class defines every member, a no when none of its classes defines
    ``__getattr__``. A proxy, or an instance with its own member where the class said no, is checked each time.
    """
    kind = type(obj)
    known = _IMPLEMENTS.get(kind)
    members = _members(protocol)
    if known is not None and protocol in known:
        own = getattr(obj, "__dict__", None)
        if known[protocol] or not own or not any(name in own for name in members):
            return known[protocol]
    found = isinstance(obj, protocol)
    if found:
        remember = all(any(name in vars(base) for base in kind.__mro__) for name in members)
    else:
        remember = not any("__getattr__" in vars(base) for base in kind.__mro__)
    if remember:
        _IMPLEMENTS.setdefault(kind, {})[protocol] = found
    return found


def owns(obj: object, method: str, *, beside: str) -> bool:
    """Whether ``obj``'s class defines ``method`` itself, no higher in its classes than ``beside``.

    A capability replaces ``save``: a subclass that overrides ``save``, or a proxy, keeps its ``save`` called.
    """
    classes = type(obj).__mro__
    owner = next((kind for kind in classes if method in vars(kind)), None)
    base = next((kind for kind in classes if beside in vars(kind)), None)
    return owner is not None and base is not None and issubclass(owner, base)


def takes_offers(storage: object) -> bool:
    """Whether ``storage`` stores each step result once (a :class:`DeltaCheckpointStorage` whose own ``save`` it is)."""
    return implements(storage, DeltaCheckpointStorage) and owns(storage, "save_with_offer", beside="save")


@runtime_checkable
class SaveRecorder(Protocol):
    """The run's recorder as ``_core_compat`` sees it: ``offer`` is set just before core calls ``save``."""

    offer: StepCacheOffer | None

    @property
    def drops_final_checkpoint(self) -> bool:
        """True when a clean finish's checkpoint would be deleted at once (core need not save it)."""
        ...
