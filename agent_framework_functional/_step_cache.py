"""The step-cache offer a checkpoint save of a run we drive makes to its storage (no core private API).

``_core_compat.LinearFunctionalWorkflow`` sets :data:`CURRENT_OFFER` around each save of a run it
drives; a storage that stores step results once (``_durable/checkpoint_delta.py``) reads it with
:func:`step_cache_offer`. The key names are those of core's checkpoint ``state``.
"""

from __future__ import annotations

import itertools
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from ._core_compat import StepCacheLog

STEP_CACHE = "_step_cache"
STEP_COUNTS = "_step_cache_auto_request_info_counts"
ORIGINAL_MESSAGE = "_original_message"
CURRENT_OFFER: ContextVar[StepCacheOffer | None] = ContextVar(
    "agent_framework_functional_step_cache_offer", default=None
)

HOLD_STEP_SAVES: ContextVar[bool] = ContextVar("agent_framework_functional_hold_step_saves", default=False)
"""Set by a run's checkpoint recorder around its saves unless it keeps every checkpoint (retention None).

A storage may then hold a step checkpoint back and write it with the run's next save
(``_durable/postgres_held.py``); a direct ``save()`` is written at once.
"""


def append_new_keys(keys: list[str], entries: dict[str, Any]) -> None:
    """Append to ``keys`` the keys added to ``entries`` since (core only adds entries during a run)."""
    new = len(entries) - len(keys)
    if new <= 0:
        return
    if keys:  # the newest keys, read from the dict's end: O(new), not O(len)
        keys.extend(reversed(list(itertools.islice(reversed(entries), new))))
    else:
        keys.extend(entries)


class StepCacheOffer:
    """What one checkpoint save offers a storage: the log and its length at this save (internal).

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


def step_cache_offer() -> StepCacheOffer | None:
    """The offer of the checkpoint save in progress in this task, if a run this package drives makes it."""
    return CURRENT_OFFER.get()
