"""The Postgres backends' versioned schema: ``<schema>.schema_version`` and each component's numbered migrations.

Each component (``continuations``, ``checkpoints``, ``sessions``) owns a list of SQL scripts numbered
from 1, never edited once released (a change is a new script at the end). :func:`migrate` first reads
the recorded version: tables at the package's version are only read (no DDL, so a role with only
``SELECT, INSERT, UPDATE, DELETE`` works). Otherwise one transaction takes a transaction-level advisory
lock (so eight workers starting together migrate once), creates the schema and ``schema_version`` if
missing, applies the scripts past the recorded version and records the new one. Tables newer than the
package are refused; a role that may not create what is missing gets an error naming ``migrate_postgres``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import AsyncConnection

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS {schema}.schema_version (
    component TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""
"""The table that records each component's version (created with the schema)."""


@dataclass(frozen=True)
class Component:
    """One component's tables in one schema: who asks (for messages), the schema, its name and migrations."""

    owner: str
    schema: str
    name: str
    migrations: Sequence[str]

    def cannot_create(self, version: int, error: Exception) -> str:
        """The message for a role that may not create what is missing: what to run, or what the role needs."""
        found = (
            f"the {self.name} tables in schema {self.schema!r} are at version {version}, this package needs "
            f"{len(self.migrations)}, and this role may not create them ({_first_line(error)})"
        )
        if self.owner == "migrate_postgres":
            advice = "Run it with a role that has CREATE on the database, or one that owns the schema."
        else:
            advice = "Run migrate_postgres(url, schema=...) once with a role that may, then start the workers."
        return f"{self.owner}: {found}. {advice}"

    def refuse_newer(self, version: int) -> None:
        """Raise ``RuntimeError`` when the tables are newer than this package's migrations."""
        if version > len(self.migrations):
            raise RuntimeError(
                f"{self.owner}: the {self.name} tables in schema {self.schema!r} are at version {version}, newer "
                f"than this package knows ({len(self.migrations)}); upgrade agent-framework-functional on every worker."
            )


async def migrate(conn: AsyncConnection[Any], component: Component) -> None:
    """Bring ``component``'s tables to this package's version (see the module), or check that they are.

    Raises:
        RuntimeError: The tables are newer than the package, or missing or older and the role may not create them.
        psycopg.OperationalError: PostgreSQL could not be reached.
    """
    from psycopg.errors import InsufficientPrivilege

    latest = len(component.migrations)
    try:
        recorded = await _recorded_version(conn, component)
    except InsufficientPrivilege as exc:
        raise RuntimeError(
            f"{component.owner}: this role may not read {component.schema}.schema_version ({_first_line(exc)}). Grant "
            "it USAGE on the schema and SELECT, INSERT, UPDATE, DELETE on its tables (README 'Schema and migrations')."
        ) from exc
    if recorded is not None and recorded >= latest:
        component.refuse_newer(recorded)
        return
    try:
        await _migrate_locked(conn, component)
    except InsufficientPrivilege as exc:
        raise RuntimeError(component.cannot_create(recorded or 0, exc)) from exc


async def _migrate_locked(conn: AsyncConnection[Any], component: Component) -> None:
    """Create the schema and tables or apply the missing migrations, in one transaction under the lock."""
    from psycopg import sql

    schema = sql.Identifier(component.schema)
    async with conn.transaction():
        # Each statement sees what committed before it (also where the default isolation is stricter), so the
        # version read after the lock includes a migration another worker finished while this one waited.
        await conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"aff:{component.schema}",))
        current = await _recorded_version(conn, component) or 0
        component.refuse_newer(current)
        if current >= len(component.migrations):  # migrated while this worker waited for the lock
            return
        exists = await (
            await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (component.schema,))
        ).fetchone()
        if exists is None:  # CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when it exists
            await conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
        await conn.execute(sql.SQL(VERSION_TABLE).format(schema=schema))  # pyright: ignore[reportArgumentType]
        for script in component.migrations[current:]:  # several commands each: never prepared
            await conn.execute(sql.SQL(script).format(schema=schema), prepare=False)  # pyright: ignore[reportArgumentType]
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.schema_version (component, version) VALUES (%s, %s) "
                "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version, applied_at = now()"
            ).format(schema),
            (component.name, len(component.migrations)),
        )


async def _recorded_version(conn: AsyncConnection[Any], component: Component) -> int | None:
    """The version ``schema_version`` records for ``component``; None when the table or row is missing."""
    from psycopg import sql
    from psycopg.errors import InvalidSchemaName, UndefinedTable

    query = sql.SQL("SELECT version FROM {}.schema_version WHERE component = %s").format(
        sql.Identifier(component.schema)
    )
    try:
        async with conn.transaction():  # a failed read leaves no caller's connection in a failed transaction
            row = await (await conn.execute(query, (component.name,), prepare=False)).fetchone()
    except (UndefinedTable, InvalidSchemaName):
        return None
    return None if row is None else int(row[0])


def _first_line(error: Exception) -> str:
    """The error's message without the statement and caret lines it appends."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__
