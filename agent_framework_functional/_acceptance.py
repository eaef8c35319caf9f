"""Acceptance of one ``run()`` call: the checks, in contract order, that turn its arguments into a ticket.

Everything here is synchronous and changes nothing, so a refused call raises at the call site (also
with ``stream=True``): the argument shape as core checks it, then the authority's verdict (a
response-only resume needs its token first: AGENTS.md invariant 2), then the run guard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from agent_framework import CheckpointStorage

from ._authority_protocol import Authority, ResumeTicket
from ._errors import WorkflowRunningError

_STR_ONLY = frozenset({str})
_RESPONSES_SHAPE = "'responses' must be a mapping from request id (str) to the answer for that request."


def accept_run(
    authority: Authority,
    message: Any | None,
    responses: Mapping[str, Any] | None,
    continuation_token: Mapping[str, Any] | None,
    checkpoint_id: str | None,
    checkpoint_storage: CheckpointStorage | None,
    *,
    default_storage: CheckpointStorage | None,
    running: bool,
) -> ResumeTicket:
    """Apply the acceptance checks of ``FunctionalWorkflow.run`` in contract order; return the run's ticket.

    ``default_storage`` is the instance's checkpoint storage; ``running``: a run holds the instance.

    Raises:
        ValueError: A wrong argument shape, a token without ``responses``, a restore without storage.
        TypeError: An argument of the wrong type.
        Exception: Whatever the authority's ``accept_resume`` / ``accept_new_input`` raises.
        WorkflowRunningError: A run holds the instance (checked last).
    """
    check_run_arguments(message, responses, checkpoint_id)
    if checkpoint_storage is not None:
        check_checkpoint_storage(checkpoint_storage, "checkpoint_storage")
    if responses is not None and checkpoint_id is None:
        ticket = authority.accept_resume(continuation_token, responses, checkpoint_storage)
    elif continuation_token is not None:
        raise ValueError(
            "'continuation_token' is only used with 'responses' (a response-only resume); a fresh run "
            "or a checkpoint restore needs none. Drop the token from this call."
        )
    else:
        ticket = authority.accept_new_input(checkpoint_storage)
    if checkpoint_id is not None and checkpoint_storage is None and default_storage is None:
        raise ValueError(
            "Cannot restore a checkpoint without checkpoint storage. Pass checkpoint_storage=... to build() "
            "or to this run (the storage that saved the checkpoint)."
        )
    if running:
        raise WorkflowRunningError()
    return ticket


def check_run_arguments(message: Any, responses: Any, checkpoint_id: Any) -> None:
    """Reject a ``run(...)`` argument shape core would reject, before any authority check.

    Raises:
        ValueError: ``message`` with ``responses`` or ``checkpoint_id``, or none of the three.
        TypeError: ``responses`` is not a mapping with ``str`` keys, or ``checkpoint_id`` not a ``str``.
    """
    if message is not None and responses is not None:
        raise ValueError("Cannot provide both 'message' and 'responses'. Use one or the other.")
    if message is not None and checkpoint_id is not None:
        raise ValueError("Cannot provide both 'message' and 'checkpoint_id'. Use one or the other.")
    if message is None and responses is None and checkpoint_id is None:
        raise ValueError(
            "Must provide at least one of: 'message' (new run), 'responses' with 'continuation_token' "
            "(resume a pause), or 'checkpoint_id' (restore a checkpoint)."
        )
    if responses is not None:
        if not isinstance(responses, Mapping):
            raise TypeError(_RESPONSES_SHAPE)
        keys = cast("Mapping[Any, Any]", responses)
        # Key types collected in C; only keys that are not exactly str are checked one by one.
        if not set(map(type, keys)) <= _STR_ONLY and not all(isinstance(key, str) for key in keys):
            raise TypeError(_RESPONSES_SHAPE)
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise TypeError("'checkpoint_id' must be the string id returned by the checkpoint storage.")


def check_checkpoint_storage(storage: object, name: str) -> None:
    """Reject an argument that is not a core ``CheckpointStorage`` (None is allowed).

    Raises:
        TypeError: ``storage`` lacks the protocol's ``save``/``load`` methods.
    """
    if storage is not None and not all(callable(getattr(storage, method, None)) for method in ("save", "load")):
        raise TypeError(
            f"'{name}' must be a core CheckpointStorage (for example InMemoryCheckpointStorage() or "
            f"FileCheckpointStorage(path)), got {type(storage).__name__}."
        )
