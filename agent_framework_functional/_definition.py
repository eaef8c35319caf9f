"""The workflow definition and the ``@workflow`` decorator (bare or with options).

A :class:`FunctionalWorkflowDefinition` is stateless: it wraps core's definition (which validates
the function's signature) and builds one :class:`~agent_framework_functional.FunctionalWorkflow`
instance per caller or session.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, overload

from agent_framework import CheckpointStorage
from agent_framework import FunctionalWorkflowDefinition as _CoreFunctionalWorkflowDefinition

from ._core_compat import functional_workflows_experimental
from ._workflow import FunctionalWorkflow

if TYPE_CHECKING:
    from ._store import ContinuationStore

WorkflowFunc = Callable[..., Awaitable[Any]]


@functional_workflows_experimental
class FunctionalWorkflowDefinition:
    """Stateless workflow definition produced by :func:`workflow`; call :meth:`build` per caller.

    Wraps core's ``FunctionalWorkflowDefinition`` (which validates the function's signature: at
    most one parameter besides the ``RunContext``).

    Args:
        func: The async workflow function. Its first non-``RunContext`` parameter receives the
            ``message`` of :meth:`FunctionalWorkflow.run`.

    Keyword Args:
        name: Workflow name; defaults to ``func.__name__``.
        description: Optional human-readable description.
        keep_checkpoints: Keep every checkpoint runs save (history). By default a run that pauses
            again or finishes deletes its chain's checkpoints that back no pending token (a failed
            run deletes nothing, so its pause stays restorable).

    Raises:
        ValueError: If the function declares more than one non-``RunContext`` parameter (core's rule).
        TypeError: If ``func`` is not an async function.
    """

    def __init__(
        self,
        func: WorkflowFunc,
        *,
        name: str | None = None,
        description: str | None = None,
        keep_checkpoints: bool = False,
    ) -> None:
        if not inspect.iscoroutinefunction(func):
            shown = getattr(func, "__name__", type(func).__name__)
            raise TypeError(f"@workflow needs an async function (async def ...), got {shown!r}.")
        self._core_definition = _CoreFunctionalWorkflowDefinition(func, name=name, description=description)
        self.func: WorkflowFunc = func
        self.name: str = self._core_definition.name
        self.description: str | None = description
        self.keep_checkpoints: bool = bool(keep_checkpoints)
        functools.update_wrapper(self, func)  # pyright: ignore[reportArgumentType]

    def build(
        self,
        *,
        checkpoint_storage: CheckpointStorage | None = None,
        continuation_store: ContinuationStore | None = None,
        continuation_ttl: float | timedelta | None = None,
    ) -> FunctionalWorkflow:
        """Build a stateful workflow instance for one logical caller or session.

        Keyword Args:
            checkpoint_storage: Default core ``CheckpointStorage`` (for example
                ``InMemoryCheckpointStorage`` or ``FileCheckpointStorage``); a run may override it
                (not with a ``continuation_store``).
            continuation_store: Makes continuation tokens durable and usable from any process that
                shares this store and ``checkpoint_storage`` (see :class:`ContinuationStore`).
                Requires ``checkpoint_storage``.
            continuation_ttl: How long a pause stays resumable (seconds or ``timedelta``; default 24
                hours): its token, an agent's live instance of the conversation and the pause's
                checkpoint expire together. With a store the store's ``ttl`` is the one TTL: leave
                this out or pass the same value.

        Returns:
            A new :class:`FunctionalWorkflow` with no pending continuation.

        Raises:
            ValueError: ``continuation_store`` without ``checkpoint_storage``; ``continuation_ttl``
                is not positive or differs from the store's ``ttl``.
            TypeError: ``continuation_store`` does not implement :class:`ContinuationStore`, or
                ``checkpoint_storage`` is not a core ``CheckpointStorage``.
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
    *, name: str | None = None, description: str | None = None, keep_checkpoints: bool = False
) -> Callable[[WorkflowFunc], FunctionalWorkflowDefinition]: ...


@functional_workflows_experimental
def workflow(
    func: WorkflowFunc | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    keep_checkpoints: bool = False,
) -> FunctionalWorkflowDefinition | Callable[[WorkflowFunc], FunctionalWorkflowDefinition]:
    """Turn an async function into a :class:`FunctionalWorkflowDefinition`, bare or with options.

    The function is core's functional workflow: plain Python control flow, ``@step`` for cached
    and checkpointed work, ``ctx.request_info(...)`` to pause for a human.

    Replay hazard: on resume the function runs again from the top. A ``@step``'s body does not run
    again (its cached result is returned), but code outside steps does, so keep side effects in
    steps, and pass all answers so far when a workflow pauses more than once.

    Args:
        func: The async function (bare ``@workflow`` form).

    Keyword Args:
        name: Workflow name; defaults to the function's name.
        description: Optional description (shown by the agent adapter).
        keep_checkpoints: Keep every checkpoint (history) instead of deleting a finished or
            re-paused run chain's spent checkpoints (README "Checkpoints").

    Returns:
        A definition (bare form) or a decorator that makes one.

    Raises:
        ValueError: If the function declares more than one non-``RunContext`` parameter.

    Examples:
        .. code-block:: python

            from agent_framework_functional import RunContext, step, workflow


            @step
            async def draft(topic: str) -> str:
                return f"A short post about {topic}."


            @workflow(name="review")
            async def review(topic: str, ctx: RunContext) -> str:
                text = await draft(topic)
                feedback = await ctx.request_info({"draft": text}, response_type=str)
                return f"{text} ({feedback})"


            wf = review.build()
            paused = await wf.run("tea")
            done = await wf.run(
                responses={"auto::0": "ship it"}, continuation_token=paused.continuation_token
            )
    """
    if func is not None:
        return FunctionalWorkflowDefinition(func, name=name, description=description, keep_checkpoints=keep_checkpoints)

    def decorator(fn: WorkflowFunc) -> FunctionalWorkflowDefinition:
        return FunctionalWorkflowDefinition(fn, name=name, description=description, keep_checkpoints=keep_checkpoints)

    return decorator
