"""Create every Postgres table the package uses, from a deploy step with a role that may create them."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from . import postgres_rows_sql, postgres_session, postgres_store
from .postgres_schema import DEFAULT_POOL_TIMEOUT_SECONDS, DEFAULT_SCHEMA, PostgresPool

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

COMPONENTS = {
    "continuations": postgres_store.TABLES,
    "checkpoints": postgres_rows_sql.TABLES,
    "sessions": postgres_session.TABLES,
}
"""Each component's tables: the continuation store's, the checkpoint storage's, the session store's."""


async def migrate_postgres(
    conninfo: str | AsyncConnectionPool,
    *,
    schema: str = DEFAULT_SCHEMA,
    pool_timeout: float | timedelta = DEFAULT_POOL_TIMEOUT_SECONDS,
) -> dict[str, int]:
    """Create ``schema``'s tables if missing: the continuation store's, checkpoint storage's and session store's.

    What each component's ``setup()`` does, in one transaction under the same advisory lock, so it is
    safe while workers run; the workers' role then needs only ``SELECT, INSERT, UPDATE, DELETE``.

    Args:
        conninfo: A connection string (a pool is opened and closed here) or your ``AsyncConnectionPool``.
        schema: The schema the workers use (their ``schema=``).
        pool_timeout: How long to wait for a connection.

    Returns:
        Each component's schema version (1: the layout of the first release).

    Raises:
        PostgresUnavailableError: PostgreSQL could not be reached (a ``psycopg.OperationalError``).
        psycopg.errors.InsufficientPrivilege: This role may not create the schema or its tables.
    """
    db = PostgresPool(
        conninfo,
        owner="migrate_postgres",
        schema=schema,
        tables="".join(COMPONENTS.values()),
        max_size=1,
        pool_timeout=pool_timeout,
    )
    try:
        await db.setup()
    finally:
        await db.aclose()
    return dict.fromkeys(COMPONENTS, 1)
