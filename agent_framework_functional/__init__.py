"""Safe resumption for Microsoft Agent Framework functional workflows.

Adds continuation authority (a single-use, rotating ``continuation_token`` on every pause), explicit abandonment,
checkpoint restore and :class:`FunctionalWorkflowAgent`; ``step``, ``RunContext`` and ``get_run_context`` are core's.
"""

from __future__ import annotations

import importlib.metadata

from agent_framework import RunContext, get_run_context, step

from ._agent import FunctionalWorkflowAgent
from ._answers import response_schema
from ._authority_protocol import VerifiedContinuation
from ._continuation import FunctionalWorkflowContinuationToken, continuation_token_hash
from ._durable.checkpoint_seal import CheckpointSealer
from ._durable.postgres_checkpoint import PostgresCheckpointStorage
from ._durable.postgres_migrate import migrate_postgres
from ._durable.postgres_session import PostgresSessionStore
from ._durable.postgres_store import PostgresContinuationStore
from ._durable.redis_checkpoint import RedisCheckpointStorage
from ._durable.redis_session import RedisSessionStore
from ._durable.redis_store import RedisContinuationStore
from ._durable.session_store import InMemorySessionStore
from ._durable.sqlite_checkpoint import SQLiteCheckpointStorage
from ._durable.sqlite_session import SQLiteSessionStore
from ._durable.sqlite_store import SQLiteContinuationStore
from ._errors import (
    CallRefusedError,
    CheckpointRestoreConflictError,
    ContinuationAuthorityError,
    ContinuationStoreAsyncError,
    ContinuationStoreDurabilityError,
    DurableStoreError,
    FunctionalWorkflowError,
    NotInWorkflowRunError,
    PauseNotSavedError,
    PendingContinuationError,
    ResponseMismatchError,
    StaleContinuationError,
    WorkflowRunningError,
)
from ._live import emit_update, stream_agent
from ._session import SESSION_STATE_KEY
from ._store import ContinuationRecord, ContinuationStore
from ._workflow import FunctionalWorkflow, FunctionalWorkflowDefinition, FunctionalWorkflowRunResult, workflow
from .hosting._responses_input import responses_approval_messages, responses_to_run_with_approvals

try:
    __version__ = importlib.metadata.version("agent-framework-functional")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [  # noqa: RUF022 - plain sorted(), as tests/test_public_api.py checks
    "CallRefusedError",
    "CheckpointRestoreConflictError",
    "CheckpointSealer",
    "ContinuationAuthorityError",
    "ContinuationRecord",
    "ContinuationStore",
    "ContinuationStoreAsyncError",
    "ContinuationStoreDurabilityError",
    "DurableStoreError",
    "FunctionalWorkflow",
    "FunctionalWorkflowAgent",
    "FunctionalWorkflowContinuationToken",
    "FunctionalWorkflowDefinition",
    "FunctionalWorkflowError",
    "FunctionalWorkflowRunResult",
    "InMemorySessionStore",
    "NotInWorkflowRunError",
    "PauseNotSavedError",
    "PendingContinuationError",
    "PostgresCheckpointStorage",
    "PostgresContinuationStore",
    "PostgresSessionStore",
    "RedisCheckpointStorage",
    "RedisContinuationStore",
    "RedisSessionStore",
    "ResponseMismatchError",
    "RunContext",
    "SESSION_STATE_KEY",
    "SQLiteCheckpointStorage",
    "SQLiteContinuationStore",
    "SQLiteSessionStore",
    "StaleContinuationError",
    "VerifiedContinuation",
    "WorkflowRunningError",
    "__version__",
    "continuation_token_hash",
    "emit_update",
    "get_run_context",
    "migrate_postgres",
    "response_schema",
    "responses_approval_messages",
    "responses_to_run_with_approvals",
    "step",
    "stream_agent",
    "workflow",
]
