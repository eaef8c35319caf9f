"""Reading back the request ids the agent publishes: core's id, ``~``, the pause's tag (docs: "Use it as an agent")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def core_id(published: str) -> str:
    """Core's id of a published request id (``auto::0~<tag>`` -> ``auto::0``)."""
    return published.split("~")[0]


def core_ids(published: Iterable[str]) -> set[str]:
    """Core's ids of published request ids (for example the keys of ``agent.pending_requests``)."""
    return {core_id(request_id) for request_id in published}


def naming(value: Any, published: Iterable[str]) -> Any:
    """JSON ``value`` with each string that is core's id of one of ``published`` replaced by that published id."""
    ids = {core_id(request_id): request_id for request_id in published}
    if isinstance(value, dict):
        return {key: naming(item, ids.values()) for key, item in value.items()}
    if isinstance(value, list):
        return [naming(item, ids.values()) for item in value]
    return ids.get(value, value) if isinstance(value, str) else value
