"""The Postgres backends' outage error, imported only where psycopg is (on the first failure)."""

from __future__ import annotations

from psycopg import OperationalError

from .._errors import DurableStoreError


class PostgresUnavailableError(DurableStoreError, OperationalError):
    """PostgreSQL could not be reached, or the connection broke (also a ``psycopg.OperationalError``).

    The message says whether the operation may have happened.
    """

    def __init__(self, message: str = "PostgreSQL could not be reached; the operation did not happen.") -> None:
        super().__init__(message)
