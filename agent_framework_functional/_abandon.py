"""Abandoning a pending continuation: the abandon methods of ``FunctionalWorkflow`` (a mixin).

The token (or ``force``) is checked, the run guard held across a store update, and the outcome counted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from ._authority_protocol import NEW_INPUT, Authority, ResumeTicket
from ._errors import WorkflowRunningError
from ._telemetry import continuation_abandoned, note_refusal

if TYPE_CHECKING:
    from ._run import WorkflowRun


class ContinuationAbandonment:
    """``abandon_continuation`` and ``abandon_continuation_async`` of :class:`FunctionalWorkflow` (internal)."""

    __slots__ = ()

    _authority: Authority
    _active: WorkflowRun | None

    @property
    def name(self) -> str:  # pragma: no cover - FunctionalWorkflow defines it
        """The workflow name."""
        raise NotImplementedError

    def _new_run(self, ticket: ResumeTicket) -> WorkflowRun:  # pragma: no cover - FunctionalWorkflow defines it
        raise NotImplementedError

    def abandon_continuation(
        self,
        token: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
    ) -> None:
        """Discard the pending continuation, its replay state and checkpoint, so fresh runs are allowed again.

        Args:
            token: The current continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Clear without a token; owner-only recovery, never for untrusted callers.

        Raises:
            ContinuationAuthorityError: Without ``force``, a missing or wrong token, or nothing pending.
            WorkflowRunningError: A run is in progress (including an accepted resume).
            ContinuationStoreAsyncError: The instance has a continuation store (use the async method).
        """
        self._authority.require_sync()
        request_ids = self._checked_abandon(token, force)
        self._authority.abandon(token, force=force)
        continuation_abandoned(self.name, token, forced=force, request_ids=request_ids or (), counted=bool(request_ids))

    async def abandon_continuation_async(
        self,
        token: Mapping[str, Any] | None = None,
        *,
        force: bool = False,
    ) -> None:
        """Abandon a pending continuation, here and in the continuation store (from any process sharing it).

        The store marks the record ``abandoned`` atomically, so a concurrent resume and this call cannot
        both succeed; without a store this is :meth:`abandon_continuation`.

        Args:
            token: The continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Owner-only recovery without authority (a lost or expired token); problems are ignored.

        Raises:
            ContinuationAuthorityError: Without ``force``: the token does not authorise the abandonment.
            WorkflowRunningError: A run of this instance holds the continuation being abandoned.
        """
        local = self._checked_abandon(token, force)
        if local is not None:
            guard = self._new_run(NEW_INPUT)  # hold the run guard across the store call: no run starts
            self._active = guard
            try:
                await self._abandoned_or_rejected(self._authority.abandon_async(token, force=force), token)
            finally:
                if self._active is guard:
                    self._active = None
        else:
            await self._abandoned_or_rejected(self._authority.abandon_async(token, force=force), token)
        # Counted as pending here when it was held here, or (a pause held elsewhere) issued elsewhere.
        counted = bool(local) or (local is None and not force)
        continuation_abandoned(self.name, token, forced=force, request_ids=local or (), counted=counted)

    async def _abandoned_or_rejected(self, abandoning: Awaitable[None], token: object) -> None:
        try:
            await abandoning
        except Exception as exc:
            note_refusal(self.name, exc, self._authority, token)
            raise

    def _checked_abandon(self, token: object, force: bool) -> frozenset[str] | None:
        """The checks both abandon methods share; the pending request ids held here (None: held elsewhere)."""
        try:
            local = self._authority.check_abandon(token, force=force)
            if local and self._active is not None:
                raise WorkflowRunningError(
                    "Cannot abandon while a run is in progress. Wait for it to finish or close its stream, then retry."
                )
        except Exception as exc:
            note_refusal(self.name, exc, self._authority, token)
            raise
        return frozenset(self._authority.pending_requests()) if local else None
