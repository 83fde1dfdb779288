"""Small helpers for building IN-lists within SQLite's bound-parameter limit."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

IN_CHUNK = 900


def chunks(items: Sequence, size: int = IN_CHUNK) -> Iterator[list]:
    items = list(items)
    for start in range(0, len(items), size):
        yield items[start:start + size]


def ph(items: Sequence) -> str:
    return ",".join("?" * len(items))
