"""DevUI's conversation store, bounded: conversations idle past the pause TTL, or past a count, are dropped.

DevUI's store keeps conversations for good and its checkpoint manager requires that class: this is it, bounded.
Private names pinned by ``test_devui_store.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, cast

from agent_framework import AgentSession

from .._core_compat import (
    devui_conversation_count,
    devui_conversation_store_class,
    devui_forget_conversation,
    devui_install_store,
    devui_server_class,
)
from .._expiry import BoundedMap

DEFAULT_MAX_CONVERSATIONS = 10_000
"""How many conversations ``devui_app`` keeps at most by default (the hosts' session stores keep as many)."""


class BoundedConversationStore(devui_conversation_store_class()):  # pyright: ignore[reportUntypedBaseClass]
    """DevUI's in-memory conversation store, dropping conversations idle past ``ttl`` or past a count.

    Checked on create, list, use and sweep; one with a turn running is never dropped for idleness; a dropped
    one's tracked approvals go too. ValueError: ``ttl`` or ``max_conversations`` not positive.
    """

    def __init__(
        self,
        *,
        ttl: float,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be a positive number of seconds, got {ttl!r}")
        if max_conversations < 1:
            raise ValueError(f"max_conversations must be at least 1, got {max_conversations!r}")
        super().__init__()
        self.ttl = float(ttl)
        self.max_conversations = max_conversations
        self._clock = clock
        self.running: Collection[str] = ()  # conversations with a turn running (never dropped for idleness)
        # conversation id -> last use, least recent first
        self.used: BoundedMap[str, float] = BoundedMap(self._idle_until, max_conversations)
        # DevUI's executor's tracked approvals (``_pending_approvals``), pruned with their conversations.
        self.approvals: dict[Any, Any] | None = None

    def __len__(self) -> int:
        """How many conversations are kept."""
        return devui_conversation_count(self)

    def _use(self, conversation_id: str) -> None:
        now = self._clock()
        self._sweep(now)
        if conversation_id in self._conversations:
            self.used.put(conversation_id, now)

    async def set(self, conversation_id: str, session: AgentSession) -> None:
        """A turn's write back of its session (DevUI's own object, already in place): a use."""
        self._use(conversation_id)

    async def purge_expired(self) -> int:
        """Drop the conversations past their bounds now (a host's sweep task; every use also does it)."""
        return self._sweep(self._clock())

    def _idle_until(self, conversation_id: str, used: float) -> float | None:
        return None if conversation_id in self.running else used + self.ttl

    def _sweep(self, now: float) -> int:
        idle = self.used.entries
        for conversation_id in [c for c in self.running if c in idle and idle[c] + self.ttl <= now]:
            self.used.put(conversation_id, now)  # a running turn keeps its conversation: it counts as used now
        dropped = {conversation_id for conversation_id, _ in self.used.expired(now) + self.used.trim()}
        for conversation_id in dropped:
            devui_forget_conversation(self, conversation_id)
        if dropped:
            self._forget_approvals(dropped)
        return len(dropped)

    def _forget_approvals(self, dropped: set[str]) -> None:  # DevUI keys them (conversation id, request id)
        approvals = self.approvals or {}
        for key in [k for k in approvals if isinstance(k, tuple) and cast("tuple[Any, ...]", k)[0] in dropped]:
            del approvals[key]

    def create_conversation(self, metadata: dict[str, str] | None = None, conversation_id: str | None = None) -> Any:
        """DevUI's ``create_conversation``, after dropping what is past its bounds (an expired one of this id too)."""
        self._sweep(self._clock())
        created = super().create_conversation(metadata=metadata, conversation_id=conversation_id)
        self._use(created.id)
        return created

    def get_conversation(self, conversation_id: str) -> Any:
        """DevUI's ``get_conversation`` (a use)."""
        self._use(conversation_id)
        return super().get_conversation(conversation_id)

    def update_conversation(self, conversation_id: str, metadata: dict[str, str]) -> Any:
        """DevUI's ``update_conversation`` (a use)."""
        self._use(conversation_id)
        return super().update_conversation(conversation_id, metadata)

    def delete_conversation(self, conversation_id: str) -> Any:
        """DevUI's ``delete_conversation``."""
        deleted = super().delete_conversation(conversation_id)
        self.used.pop(conversation_id)
        self._forget_approvals({conversation_id})
        return deleted

    async def add_items(self, conversation_id: str, items: list[dict[str, Any]]) -> Any:
        """DevUI's ``add_items`` (a use)."""
        self._use(conversation_id)
        return await super().add_items(conversation_id, items)

    async def list_items(
        self, conversation_id: str, limit: int = 100, after: str | None = None, order: str = "asc"
    ) -> Any:
        """DevUI's ``list_items`` (a use)."""
        self._use(conversation_id)
        return await super().list_items(conversation_id, limit=limit, after=after, order=order)

    async def get_item(self, conversation_id: str, item_id: str) -> Any:
        """DevUI's ``get_item`` (a use)."""
        self._use(conversation_id)
        return await super().get_item(conversation_id, item_id)

    def get_session(self, conversation_id: str) -> AgentSession | None:
        """DevUI's ``get_session`` (a use: DevUI reads it for every turn)."""
        self._use(conversation_id)
        return super().get_session(conversation_id)

    def add_trace(self, conversation_id: str, trace_event: dict[str, Any]) -> None:
        """DevUI's ``add_trace`` (a use)."""
        self._use(conversation_id)
        super().add_trace(conversation_id, trace_event)

    async def list_conversations_by_metadata(self, metadata_filter: dict[str, str]) -> Any:
        """DevUI's listing, without the conversations past their bounds."""
        self._sweep(self._clock())
        return await super().list_conversations_by_metadata(metadata_filter)


class BoundedDevServer(devui_server_class()):  # pyright: ignore[reportUntypedBaseClass]
    """DevUI's server with a :class:`BoundedConversationStore` in its executor."""

    def __init__(self, *args: Any, conversation_store: BoundedConversationStore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bounded_store = conversation_store
        self.store_installer = self._install

    def _install(self, executor: Any) -> None:
        if executor.conversation_store is self.bounded_store:
            return
        if devui_conversation_count(executor.conversation_store):
            raise RuntimeError("DevUI's executor already holds conversations; install the store before serving")
        self.bounded_store.approvals = devui_install_store(executor, self.bounded_store)
