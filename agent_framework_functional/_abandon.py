"""Abandoning a pending continuation: the abandon methods of ``FunctionalWorkflow`` (a mixin).

Kept apart from the run path of ``_workflow.py``: abandonment checks the token (or ``force``), holds
the run guard across a store update, drops the instance's replay state, and reports the outcome to
telemetry (``_telemetry``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from ._authority_protocol import NEW_INPUT, Authority, ResumeTicket
from ._errors import WorkflowRunningError
from ._telemetry import continuation_abandoned, continuation_rejected, reason_for

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

        Clears the retained message, step cache, state and pending request ids by replacing the
        wrapped core instance with a fresh one (no core internals are touched), and deletes the
        pause's checkpoint (unless ``keep_checkpoints``; other saved checkpoints are left).

        Args:
            token: The current continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Clear without a token. Owner-only recovery for a lost token: hosts must never
                expose this to untrusted callers, since it lets anyone discard a pending review.

        Raises:
            ContinuationAuthorityError: Without ``force``, when the token is missing or wrong, or
                nothing is pending. Nothing changes.
            WorkflowRunningError: A run is in progress (including an accepted resume).
            ContinuationStoreAsyncError: The instance has a continuation store: abandoning must also
                update the store, so use :meth:`abandon_continuation_async` (also a ``RuntimeError``).
                Nothing changes.
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

        Without a continuation store this is :meth:`abandon_continuation`. With one, it works from
        any process that shares the store: the store marks the record ``abandoned`` atomically, so
        a concurrent resume (here or in another process) and this call cannot both succeed.

        * ``token`` held by this instance: the store must still accept it (``issued``, not
          expired); then the local continuation and replay state are cleared. If the store says it
          is gone (resumed elsewhere, abandoned, expired), the local copy is dropped as stale and
          the authority error is raised.
        * ``token`` of a pause this process does not hold: the record must belong to this
          workflow (name and signature) and conversation and be ``issued`` and unexpired; it is
          marked abandoned.
          This instance is not changed.
        * ``force=True`` (owner-only, never expose it to untrusted callers): clears this instance's
          continuation and marks it abandoned in the store, and also abandons the record of
          ``token`` if one is given, even if it has expired. Problems are ignored, not raised.

        Args:
            token: The continuation token. Required unless ``force`` is True.

        Keyword Args:
            force: Owner recovery without authority (for a lost or expired token).

        Raises:
            ContinuationAuthorityError: Without ``force``: the token is missing, malformed, unknown,
                of another workflow, already claimed or abandoned, or expired.
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
            self._note_rejected(exc, token)
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
            self._note_rejected(exc, token)
            raise
        return frozenset(self._authority.pending_requests()) if local else None

    def _note_rejected(self, exc: BaseException, token: object) -> None:
        """Count a refused call by its reason (telemetry only; the caller still gets ``exc``)."""
        reason = reason_for(exc, self._authority, token)
        if reason is not None:
            continuation_rejected(self.name, reason, token)
