"""Small helpers: IN-lists within SQLite's bound-parameter limit, and sequences read a page at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

IN_CHUNK = 900


def chunks(items: Sequence, size: int = IN_CHUNK) -> Iterator[list]:
    items = list(items)
    for start in range(0, len(items), size):
        yield items[start:start + size]


def ph(items: Sequence) -> str:
    return ",".join("?" * len(items))


class Paged(Sequence[T]):
    """A read-only sequence of *count* items loaded a page at a time by ``load(start, stop)``.

    Plans kept in temp tables are read through one, so a plan of any size costs one page of memory.
    """

    def __init__(self, count: int, load: Callable[[int, int], list[T]], page: int = 512):
        self.count, self.load, self.page = count, load, page
        self._start: int = -1
        self._items: list[T] = []

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(index)
        start = index - index % self.page
        if start != self._start:
            self._items, self._start = self.load(start, min(start + self.page, self.count)), start
        return self._items[index - start]
