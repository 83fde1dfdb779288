"""The shape of a store's FTS5 indexes: levels, segments, leaf pages, terms.

A delete's cost in FTS5 depends on it: each commit flushes a segment, full
levels are merged, and the merge work allowed per 64 leaf pages written is
64 x the number of levels.

    python bench/fts_shape.py DB...
"""

import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from maint.store.fts_segments import decode, fts5_tables, structure_blob  # noqa: E402


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
