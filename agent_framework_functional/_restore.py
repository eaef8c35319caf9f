"""A checkpoint restore's checks: the checkpoint and the answers, before anything changes.

A restore loads its checkpoint once, before core's run: the checkpoint must be this workflow's (name
and signature, as core checks the signature only inside its run), and the answers must fit the
checkpoint's pending requests, as for a token resume (README "The rules", rule 4). Only then may a
store supersede the pause's token (AGENTS.md invariant 29); core's restore reuses the loaded checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._answers import check_answers
from ._checkpoint_chain import RecordingCheckpointStorage


async def check_restore(
    recorder: RecordingCheckpointStorage, identity: tuple[str, str], core_kwargs: dict[str, Any]
) -> bool:
    """Load the restore's checkpoint through the run's recorder, check it, and convert the answers in ``core_kwargs``.

    ``identity`` is the workflow's ``(name, signature hash)``. A load that fails is left to core's restore,
    which raises the same error with core's failure surface (the failed event and status).

    Returns:
        True when the checkpoint was loaded and passed; False when its load failed (nothing may change).

    Raises:
        ValueError: The checkpoint belongs to another workflow or another version of this one.
        ResponseMismatchError: The checkpoint has pending requests and no answer names one, or an answer
            does not fit its request's ``response_type``.
    """
    checkpoint_id: str = core_kwargs["checkpoint_id"]
    try:
        checkpoint = await recorder.load(checkpoint_id)
    except Exception as exc:
        recorder.failed_load = (checkpoint_id, exc)
        return False
    name, signature_hash = identity
    if checkpoint.workflow_name != name:
        raise ValueError(
            f"Checkpoint '{checkpoint_id}' was saved by workflow '{checkpoint.workflow_name}', not '{name}'. "
            "Restore it with the workflow that saved it; nothing was restored."
        )
    if checkpoint.graph_signature_hash != signature_hash:  # core's own check and message, made before anything changes
        raise ValueError(
            f"Checkpoint '{checkpoint_id}' was created by a different version of workflow '{name}' and is not "
            "compatible with the current version. The workflow's step structure may have changed since this "
            "checkpoint was saved; nothing was restored."
        )
    recorder.preloaded = checkpoint
    responses: Mapping[str, Any] | None = core_kwargs.get("responses")
    events = checkpoint.pending_request_info_events
    if responses and events:  # no answers (core ignores an empty mapping) or nothing pending: core decides
        core_kwargs["responses"] = check_answers(responses, events, events, unchanged="Nothing was restored.")
    return True
