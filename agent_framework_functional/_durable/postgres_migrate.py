"""Create or upgrade every Postgres table the package uses, from a deploy step with a role that may create them.

Workers create their tables on first use when their role may; where it may not (a role with only
``SELECT, INSERT, UPDATE, DELETE``), a migration role runs :func:`migrate_postgres` before the workers
start, and the workers then only read ``schema_version``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from . import postgres_checkpoint, postgres_session, postgres_store
from .postgres_schema import DEFAULT_POOL_TIMEOUT_SECONDS, DEFAULT_SCHEMA, PostgresPool

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

COMPONENTS = {
    "continuations": postgres_store.MIGRATIONS,
    "checkpoints": postgres_checkpoint.MIGRATIONS,
    "sessions": postgres_session.MIGRATIONS,
}
"""Each component's migrations: the continuation store's, the checkpoint storage's, the session store's."""


async def migrate_postgres(
    conninfo: str | AsyncConnectionPool,
    *,
    schema: str = DEFAULT_SCHEMA,
    pool_timeout: float | timedelta = DEFAULT_POOL_TIMEOUT_SECONDS,
) -> dict[str, int]:
    """Create or upgrade ``schema``'s tables: the continuation store's, checkpoint storage's and session store's.

    The same migrations a worker applies on first use, under the same advisory lock, so it is safe while
    workers run (a worker at an older package version then refuses the newer tables: upgrade them together).

    Args:
        conninfo: A connection string (a pool is opened and closed here) or your ``AsyncConnectionPool``.
        schema: The schema the workers use (their ``schema=``).
        pool_timeout: How long to wait for a connection.

    Returns:
        The version of each component now recorded in ``<schema>.schema_version``.

    Raises:
        PostgresUnavailableError: PostgreSQL could not be reached (a ``psycopg.OperationalError``).
        RuntimeError: The tables are newer than this package knows, or this role may not create them.
    """
    for component, migrations in COMPONENTS.items():
        db = PostgresPool(
            conninfo,
            owner="migrate_postgres",
            schema=schema,
            component=component,
            migrations=migrations,
            max_size=1,
            pool_timeout=pool_timeout,
        )
        try:
            await db.prepare()
        finally:
            await db.aclose()
    return {component: len(migrations) for component, migrations in COMPONENTS.items()}
