"""Small helpers: IN-lists within SQLite's bound-parameter limit, sequences read a page at a time or
packed, JSON written in pieces, and the --cwd prefix rule the SQL functions call."""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

IN_CHUNK = 900

# An FTS5 index's statement: the module named exactly (``fts5vocab`` and the like are other modules).
_VIRTUAL = re.compile(r"\s*CREATE\s+VIRTUAL\s+TABLE\b", re.IGNORECASE)
_FTS5_MODULE = re.compile(r"\bUSING\s+(?:fts5|\"fts5\"|'fts5'|`fts5`|\[fts5\])\s*\(", re.IGNORECASE)


def fts5_indexes(conn) -> list[str]:
    """The store's FTS5 indexes, by name: virtual tables made with ``USING fts5(`` that have FTS5's
    ``_config`` shadow table. Any other virtual table (an ``fts5vocab`` table over an index, sqlite-vec's
    ``vec0``) is not one, and is left alone (hostile try 12, P14: an fts5vocab table stopped prune and sweep
    at "zz_vocab_config")."""
    rows = conn.execute("SELECT name, sql, type, rootpage FROM sqlite_master").fetchall()
    shadow = {name for name, _, kind, root in rows if kind == "table" and root}
    return sorted(name for name, sql, kind, root in rows
                  if kind == "table" and not root and is_fts5_sql(sql) and f"{name}_config" in shadow)


def is_virtual_sql(sql: object) -> bool:
    """True for a ``CREATE VIRTUAL TABLE`` statement, whatever its module."""
    return isinstance(sql, str) and bool(_VIRTUAL.match(sql))


def is_fts5_sql(sql: object) -> bool:
    """True for a ``CREATE VIRTUAL TABLE … USING fts5(…)`` statement (not fts5vocab, nor any other module)."""
    return is_virtual_sql(sql) and bool(_FTS5_MODULE.search(sql))


def chunks(items: Sequence, size: int = IN_CHUNK) -> Iterator[list]:
    items = list(items)
    for start in range(0, len(items), size):
        yield items[start:start + size]


def sql_literal(text: str) -> str:
    """*text* as an SQL string literal (for SQL we build, where a parameter cannot stand)."""
    return "'" + text.replace("'", "''") + "'"


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


# An IdList keeps this many bytes of ids in memory; the rest goes to a temporary file of its own.
SPILL_BYTES = 1 << 20
READ_BYTES = 1 << 20  # how much of that file one read brings back while the list is walked


class IdList(Sequence[str]):
    """Session ids packed into one buffer, for reports that can name every session of a store.

    A Python list of ids costs a Python object per id; this holds the same ids in about a third of
    the memory (docs/benchmarks.md), and :func:`maint.commands.output.write_json` streams it without building one
    string of the whole list. Past :data:`SPILL_BYTES` the ids go on to an unnamed temporary file (the
    system's temp folder, as SQLite's own temp files), so a list of every session of a 10 GB store holds
    a megabyte of ids in memory and four bytes of offset per id (docs/design/big-stores.md).
    """

    def __init__(self, ids: Iterable[str] = ()):
        self._buf = bytearray()  # the ids after the first _spilled bytes
        self._ends = array("I")  # byte offsets: ids of a store stay far below 4 GB
        self._spilled = 0
        self._file: Any = None
        self.extend(ids)

    def append(self, sid: str) -> None:
        self._buf += str(sid).encode("utf-8", "surrogatepass")
        self._ends.append(self._spilled + len(self._buf))
        if len(self._buf) >= SPILL_BYTES:
            self._spill()

    def _spill(self) -> None:
        import tempfile

        if self._file is None:
            # lives as long as the list: closed (and gone, it has no name) when the list is
            self._file = tempfile.TemporaryFile(prefix="hermes-maint-ids-")  # noqa: SIM115
        self._file.seek(self._spilled)
        self._file.write(self._buf)
        self._file.flush()
        self._spilled += len(self._buf)
        self._buf = bytearray()

    def extend(self, ids: Iterable[str]) -> None:
        for sid in ids:
            self.append(sid)

    def __len__(self) -> int:
        return len(self._ends)

    def _bytes(self, start: int, end: int) -> bytes:
        if start >= self._spilled:
            return bytes(self._buf[start - self._spilled:end - self._spilled])
        import os

        return os.pread(self._file.fileno(), end - start, start)  # an id is never split: it went whole

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        start = self._ends[index - 1] if index else 0
        return self._bytes(start, self._ends[index]).decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        """In order, the spilled ids a block of :data:`READ_BYTES` at a time."""
        ends, count, i, start = self._ends, len(self._ends), 0, 0
        while i < count:
            j = i + 1
            in_file = ends[i] <= self._spilled
            while j < count and ends[j] - start <= READ_BYTES and (ends[j] <= self._spilled) == in_file:
                j += 1
            block = self._bytes(start, ends[j - 1])
            for k in range(i, j):
                yield block[(ends[k - 1] if k else 0) - start:ends[k] - start].decode("utf-8", "surrogatepass")
            start, i = ends[j - 1], j

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
