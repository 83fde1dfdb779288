"""The shape of a store's FTS5 indexes: levels, segments, leaf pages, terms.

A delete's cost in FTS5 depends on it: each commit flushes a segment, full
levels are merged, and the merge work allowed per 64 leaf pages written is
64 x the number of levels.

    python bench/fts_shape.py DB...
"""

import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from maint.store.fts_index import fts5_tables, structure_blob  # noqa: E402

# FTS5's private structure record (fts5StructureDecode in SQLite's fts5_index.c), decoded here to
# describe a bench store; the product never reads it.
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




def shape(db: Path) -> dict:
    """Per FTS table: levels (in the structure), segments, per-level leaf pages, %_data/%_idx rows, terms."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = {}
    try:
        for t in fts5_tables(conn):
            st = decode(structure_blob(conn, t))
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.v_{t} USING fts5vocab(main, {t}, row)")
            out[t] = {
                "levels": len(st.levels),
                "segments": st.segments,
                "leaves_by_level": {n: lv.leaves for n, lv in enumerate(st.levels) if lv.leaves},
                "data_rows": conn.execute(f"SELECT COUNT(*) FROM {t}_data").fetchone()[0],
                "idx_rows": conn.execute(f"SELECT COUNT(*) FROM {t}_idx").fetchone()[0],
                "terms": conn.execute(f"SELECT COUNT(*) FROM temp.v_{t}").fetchone()[0],
            }
    finally:
        conn.close()
    return out


def summary(db: Path) -> str:
    lines = []
    for t, s in shape(db).items():
        lv = ", ".join(f"L{n}: {len(leaves)}x ({sum(leaves)} leaves)" for n, leaves in s["leaves_by_level"].items())
        lines.append(f"  {t}: {s['levels']} levels, {s['segments']} segments, {s['data_rows']} %_data rows, "
                     f"{s['idx_rows']} %_idx rows, {s['terms']} terms; {lv}")
    return "\n".join(lines)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(arg)
        print(summary(Path(arg)))
