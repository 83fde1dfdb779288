"""Reads an FTS5 index's segment list (its "structure record") without touching it.

FTS5 keeps the list in row 10 of ``<table>_data`` (fts5StructureDecode in
SQLite's fts5_index.c): per level, the segments and how many of them an
unfinished merge is consuming. Bulk deletes read it to see what merge work
is pending before they take the lock again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STRUCTURE_ROWID = 10
V2_MARK = b"\xff\x00\x00\x01"  # FTS5_STRUCTURE_V2, SQLite 3.43+


@dataclass
class Level:
    merging: int  # input segments of an unfinished merge (0: none)
    leaves: list[int] = field(default_factory=list)  # leaf pages per segment, oldest first


@dataclass
class Structure:
    levels: list[Level]
    write_counter: int  # leaf pages flushed so far; automerge works once per 64 of them

    @property
    def segments(self) -> int:
        return sum(len(lv.leaves) for lv in self.levels)

    def pending_merge(self, min_segments: int) -> bool:
        """An unfinished merge, or a level with enough segments for FTS5 to start one."""
        return any(lv.merging or len(lv.leaves) >= min_segments for lv in self.levels)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite's varint: big-endian 7-bit groups, the ninth byte whole."""
    value = 0
    for n in range(9):
        b = buf[i + n]
        if n == 8:
            return (value << 8) | b, i + 9
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            return value, i + n + 1
    raise AssertionError("unreachable")


def decode(blob: bytes) -> Structure:
    i = 4  # the config cookie
    v2 = blob[i:i + 4] == V2_MARK
    if v2:
        i += 4
    n_levels, i = _varint(blob, i)
    _n_segments, i = _varint(blob, i)
    writes, i = _varint(blob, i)
    levels = []
    for _ in range(n_levels):
        merging, i = _varint(blob, i)
        n_segs, i = _varint(blob, i)
        level = Level(merging)
        for _ in range(n_segs):
            _segid, i = _varint(blob, i)
            first, i = _varint(blob, i)
            last, i = _varint(blob, i)
            if v2:
                for _ in range(5):  # origin1, origin2, tombstone pages, tombstone entries, entries
                    _, i = _varint(blob, i)
            level.leaves.append(last - first + 1)
        levels.append(level)
    return Structure(levels, writes)


def structure_blob(conn, table: str) -> bytes | None:
    row = conn.execute(f'SELECT block FROM "{table}_data" WHERE id = ?', (STRUCTURE_ROWID,)).fetchone()
    return bytes(row[0]) if row and row[0] is not None else None


def read_structure(conn, table: str) -> Structure | None:
    """None when the index has no structure record yet (never written)."""
    blob = structure_blob(conn, table)
    return decode(blob) if blob else None


def fts5_tables(conn) -> list[str]:
    """The store's FTS5 tables (Hermes 0.19.0: messages_fts and messages_fts_trigram)."""
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%' "
        "AND lower(sql) LIKE '%using fts5%' ORDER BY name")]
