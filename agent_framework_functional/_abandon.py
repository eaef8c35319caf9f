"""Abandoning a pending continuation: the abandon methods of ``FunctionalWorkflow`` (a mixin).

Abandonment checks the token (or ``force``), holds the run guard across a store update, drops the
instance's replay state, and reports the outcome to telemetry.
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
        """Drop the pending continuation and all replay state, so fresh runs are allowed again.

        Replaces the wrapped core instance with a fresh one and deletes the pause's checkpoint (unless
        ``keep_checkpoints``). README "Durable continuations" says when to use which variant.

        Args:
            token: The current continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Clear without a token; owner-only recovery, never for untrusted callers.

        Raises:
            ContinuationAuthorityError: Without ``force``, a missing or wrong token, or nothing pending.
            WorkflowRunningError: A run is in progress (including an accepted resume).
            ContinuationStoreAsyncError: The instance has a continuation store: use
                :meth:`abandon_continuation_async`. Nothing changes.
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
        """Abandon a pending continuation, in this process and in the continuation store.

        Without a store this is :meth:`abandon_continuation`. With one it works from any process
        sharing the store, which marks the record ``abandoned`` atomically (a concurrent resume and
        this call cannot both succeed). A token held here must still be ``issued`` (else the local
        copy is dropped as stale and the authority error raised); one held elsewhere must belong to
        this workflow and conversation. ``force`` (owner-only) clears this instance's pause and
        abandons ``token``'s record even if expired, ignoring problems.

        Args:
            token: The continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Owner recovery without authority (for a lost or expired token).

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
        """The checks both abandon methods share: the local pending request ids (None: not held here).

        Raises:
            ContinuationAuthorityError: Without ``force``, a missing or wrong token.
            WorkflowRunningError: A run holds the local continuation.
        """
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
