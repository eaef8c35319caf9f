"""The ``@workflow`` decorator (bare or with options) and the stateless definition it makes."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, overload

from agent_framework import CheckpointStorage
from agent_framework import FunctionalWorkflowDefinition as _CoreFunctionalWorkflowDefinition

from ._core_compat import functional_workflows_experimental
from ._expiry import DEFAULT_CHECKPOINT_RETENTION, resolve_retention
from ._workflow import FunctionalWorkflow

if TYPE_CHECKING:
    from ._store import ContinuationStore

WorkflowFunc = Callable[..., Awaitable[Any]]


@functional_workflows_experimental
class FunctionalWorkflowDefinition:
    """Stateless workflow definition made by :func:`workflow`; :meth:`build` one instance per caller.

    Args:
        func: The async workflow function; its non-``RunContext`` parameter receives ``run()``'s ``message``.

    Keyword Args:
        name: Workflow name; defaults to ``func.__name__``.
        description: Optional human-readable description.
        checkpoint_retention: How long a finished run's checkpoints are kept (seconds or ``timedelta``,
            default 24 hours; 0 deletes them at the finish; None keeps every checkpoint for good).

    Raises:
        ValueError: More than one non-``RunContext`` parameter (core's rule); a negative
            ``checkpoint_retention`` or one over ten years.
        TypeError: ``func`` is not an async function; ``checkpoint_retention`` is not a duration.
    """

    def __init__(
        self,
        func: WorkflowFunc,
        *,
        name: str | None = None,
        description: str | None = None,
        checkpoint_retention: float | timedelta | None = DEFAULT_CHECKPOINT_RETENTION,
    ) -> None:
        if not inspect.iscoroutinefunction(func):
            shown = getattr(func, "__name__", type(func).__name__)
            raise TypeError(f"@workflow needs an async function (async def ...), got {shown!r}.")
        self._core_definition = _CoreFunctionalWorkflowDefinition(func, name=name, description=description)
        self.func: WorkflowFunc = func
        self.name: str = self._core_definition.name
        self.description: str | None = description
        self.checkpoint_retention: float | None = resolve_retention(checkpoint_retention)
        functools.update_wrapper(self, func)  # pyright: ignore[reportArgumentType]

    def build(
        self,
        *,
        checkpoint_storage: CheckpointStorage | None = None,
        continuation_store: ContinuationStore | None = None,
        continuation_ttl: float | timedelta | None = None,
    ) -> FunctionalWorkflow:
        """Build a workflow instance (no pending continuation) for one caller or session.

        Keyword Args:
            checkpoint_storage: Default core ``CheckpointStorage``; a run may override it (not with a store).
            continuation_store: Makes tokens durable and usable from any process sharing it and
                ``checkpoint_storage`` (required with it).
            continuation_ttl: How long a pause stays resumable (default 24 hours); its token, instance and
                checkpoint expire together. With a store, the store's ``ttl`` (omit this or pass the same).

        Raises:
            ValueError: A store without ``checkpoint_storage``; a bad ``continuation_ttl`` or one that
                differs from the store's.
            TypeError: A store or ``checkpoint_storage`` that does not implement its protocol.
        """
        return FunctionalWorkflow(
            self,
            checkpoint_storage=checkpoint_storage,
            continuation_store=continuation_store,
            continuation_ttl=continuation_ttl,
        )


@overload
def workflow(func: WorkflowFunc, /) -> FunctionalWorkflowDefinition: ...


@overload
def workflow(
    *,
    name: str | None = None,
    description: str | None = None,
    checkpoint_retention: float | timedelta | None = DEFAULT_CHECKPOINT_RETENTION,
) -> Callable[[WorkflowFunc], FunctionalWorkflowDefinition]: ...


@functional_workflows_experimental
def workflow(
    func: WorkflowFunc | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    checkpoint_retention: float | timedelta | None = DEFAULT_CHECKPOINT_RETENTION,
) -> FunctionalWorkflowDefinition | Callable[[WorkflowFunc], FunctionalWorkflowDefinition]:
    """Turn an async function (core's functional workflow) into a :class:`FunctionalWorkflowDefinition`.

    Replay hazard: on resume the function runs again from the top; a ``@step``'s body does not (its
    cached result is returned), code outside steps does. Keep side effects in steps.

    Args:
        func: The async function (bare ``@workflow``).

    Keyword Args:
        name: Workflow name; defaults to the function's name.
        description: Optional description (shown by the agent).
        checkpoint_retention: How long a finished run's checkpoints are kept (default 24 hours; 0: deleted
            at the finish; None: every checkpoint kept for good; README "Checkpoints are kept, then deleted").

    Returns:
        A definition (bare ``@workflow``) or a decorator that makes one.

    Raises:
        ValueError: More than one non-``RunContext`` parameter; a bad ``checkpoint_retention``.
        TypeError: ``checkpoint_retention`` is not a duration.

    Examples:
        .. code-block:: python

            @workflow(name="review")
            async def review(topic: str, ctx: RunContext) -> str:
                return await ctx.request_info({"topic": topic}, response_type=str)
    """
    options: dict[str, Any] = {"name": name, "description": description, "checkpoint_retention": checkpoint_retention}
    if func is not None:
        return FunctionalWorkflowDefinition(func, **options)

    def decorator(fn: WorkflowFunc) -> FunctionalWorkflowDefinition:
        return FunctionalWorkflowDefinition(fn, **options)

    return decorator
