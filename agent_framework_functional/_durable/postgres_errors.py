"""The Postgres backends' outage error: ``psycopg.OperationalError`` that is also a :class:`DurableStoreError`.

Imported only where psycopg is (on the first failure), so the package never needs psycopg.
"""

from __future__ import annotations

from psycopg import OperationalError

from .._errors import DurableStoreError


class PostgresUnavailableError(DurableStoreError, OperationalError):
    """PostgreSQL could not be reached, or the connection broke during an operation.

    The message names the backend and the operation and says whether it may have happened. Also a
    ``psycopg.OperationalError``, so existing handlers keep working.

    Args:
        message: What failed, and whether the operation may have happened.
    """

    def __init__(self, message: str = "PostgreSQL could not be reached; the operation did not happen.") -> None:
        super().__init__(message)
