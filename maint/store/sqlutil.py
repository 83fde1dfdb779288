"""Small helpers: IN-lists within SQLite's bound-parameter limit, sequences read a page at a time or
packed, JSON written in pieces, and the --cwd prefix rule the SQL functions call."""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

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


class IdList(Sequence[str]):
    """Session ids packed into one buffer, for reports that can name every session of a store.

    A Python list of ids costs a Python object per id; this holds the same ids in about a third of
    the memory (docs/benchmarks.md), and :func:`maint.commands.output.write_json` streams it without building one
    string of the whole list.
    """

    def __init__(self, ids: Iterable[str] = ()):
        self._buf = bytearray()
        self._ends = array("I")  # byte offsets: ids of a store stay far below 4 GB
        self.extend(ids)

    def append(self, sid: str) -> None:
        self._buf += str(sid).encode("utf-8", "surrogatepass")
        self._ends.append(len(self._buf))

    def extend(self, ids: Iterable[str]) -> None:
        for sid in ids:
            self.append(sid)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        start = self._ends[index - 1] if index else 0
        return self._buf[start:self._ends[index]].decode("utf-8", "surrogatepass")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (IdList, list, tuple)) and len(self) == len(other) and all(
            a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IdList({list(self[:5])}{'...' if len(self) > 5 else ''}, n={len(self)})"


def write_json(obj: Any, write: Callable[[str], Any]) -> None:
    """``json.dumps(obj, default=str, ensure_ascii=False)``, written in pieces.

    A report's top-level value that is a sequence but not a list (an :class:`~maint.store.sqlutil.IdList`,
    a plan read from temp tables) is streamed a thousand items at a time, so a report that names
    every session of a big store never exists as one string.
    """
    def dumps(value: Any) -> str:
        try:
            return json.dumps(value, default=str, ensure_ascii=False, allow_nan=False)
        except ValueError:  # a stored ±inf or NaN: JSON has neither, the report says null
            from maint.store.timestamps import finite_or_none

            return json.dumps(finite_or_none(value), default=str, ensure_ascii=False)

    if not isinstance(obj, dict) or not any(_streamed(v) for v in obj.values()):
        write(dumps(obj))
        return
    write("{")
    for n, (key, value) in enumerate(obj.items()):
        write((", " if n else "") + dumps(str(key)) + ": ")
        if not _streamed(value):
            write(dumps(value))
            continue
        write("[")
        batch: list[str] = []
        for i, item in enumerate(value):
            batch.append(dumps(item))
            if len(batch) == 1000:
                write((", " if i >= 1000 else "") + ", ".join(batch))
                batch = []
        if batch:
            write((", " if len(value) > len(batch) else "") + ", ".join(batch))
        write("]")
    write("}")


def _streamed(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray, list, tuple))


def cwd_under(cwd: str | None, prefix: str) -> bool:
    """``/a/b`` matches ``/a/b`` and ``/a/b/c`` but never ``/a/bc``."""
    if not cwd:
        return False
    cwd = cwd.rstrip("/\\") or cwd
    if cwd == prefix:
        return True
    return cwd.startswith(prefix + "/") or cwd.startswith(prefix + "\\") or (prefix == "/" and cwd.startswith("/"))
