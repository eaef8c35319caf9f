"""Heads carried in chunks (``_durable/checkpoint_delta.py``): every id, previous id and timestamp reads back exactly.

Core's timestamps are ``datetime.now(timezone.utc).isoformat()``; a checkpoint may carry any text, so
the other shapes are covered too: whole seconds (no fraction), another offset, an offset that changes
mid-segment, a naive time, a clock that goes backwards, text that is no time at all, and previous ids
that are not the segment's previous checkpoint.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from agent_framework_functional._durable.checkpoint_delta import head_fields, read_heads

START = datetime(2026, 12, 3, 7, 15, 7, 376062, tzinfo=timezone.utc)


def _round_trip(heads: list[list[Any]]) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    last_id, last_time = None, None
    for index, head in enumerate(heads):
        fields, last_time = head_fields(head, index == 0, last_id, last_time)
        chunks.append(fields)
        last_id = head[0]
    assert read_heads(chunks) == heads
    return chunks


def test_cores_heads_are_stored_as_ids_and_small_deltas() -> None:
    times = [START + timedelta(microseconds=700 * index) for index in range(5)]
    heads = [[f"c{i}", f"c{i - 1}" if i else None, time.isoformat()] for i, time in enumerate(times)]
    chunks = _round_trip(heads)
    assert chunks[0] == {"i": "c0", "t": times[0].isoformat()}
    assert chunks[1:] == [{"i": f"c{i}", "t": 700} for i in range(1, 5)]  # previous id implied


@pytest.mark.parametrize(
    "stamps",
    [
        ["2026-12-03T07:15:07+00:00", "2026-12-03T07:15:08.000001+00:00", "2026-12-03T07:15:09+00:00"],
        ["2026-12-03T07:15:07.5+02:00", "2026-12-03T07:15:07.500100+02:00", "2026-12-03T05:15:08.1+00:00"],
        ["2026-12-03T07:15:07.376062", "2026-12-03T07:15:07.376063", "2026-12-03T07:15:07.376064+00:00"],
        ["2026-12-03T07:15:09+00:00", "2026-12-03T07:15:08+00:00", "2026-12-03T07:15:07.999999+00:00"],
        ["yesterday", "", "2026-12-03T07:15:07+00:00", "2026-12-03T07:15:07Z"],
    ],
)
def test_any_timestamp_text_reads_back_exactly(stamps: list[str]) -> None:
    _round_trip([[f"c{i}", f"c{i - 1}" if i else None, stamp] for i, stamp in enumerate(stamps)])


def test_previous_ids_that_are_not_implied_are_stored() -> None:
    heads = [["a", "pause", START.isoformat()], ["b", None, START.isoformat()], ["c", "a", START.isoformat()]]
    chunks = _round_trip(heads)
    assert [chunk.get("p", "-") for chunk in chunks] == ["pause", None, "a"]


@pytest.mark.parametrize("chunk", [{"i": 1, "t": "x"}, {"i": "a", "t": 5}, {"i": "a", "t": None}, {"t": "x"}])
def test_a_malformed_head_is_a_value_error(chunk: dict[str, Any]) -> None:
    with pytest.raises((ValueError, KeyError)):
        read_heads([chunk])
