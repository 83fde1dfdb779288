"""Which sessions an export takes: one named session, or the shared filters over ended ones.

Bulk filters take ended sessions only; pinned and archived sessions that match
are included (a backup keeps protected rows). No filter at all takes everything.
The bulk selection is made by SQLite into a temp table and read back a page at a
time, so it costs the same memory for ten sessions or a hundred thousand.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from maint.errors import UsageError
from maint.selection.filters import Filters
from maint.store.catalog import catalog_sql, resolve_session
from maint.store.connection import Store
from maint.store.sqlutil import Paged
from maint.store.text_check import Unreadable, is_blob_sql, unreadable_sessions


def select_sessions(store: Store, session_id: str | None, filters: Filters,
                    now: float | None = None, *, exact: bool = False,
                    skipped: list[Unreadable] | None = None, messages: bool = True) -> Sequence[str]:
    """Session ids in export order: started first, ties by id. *exact*: --session-id must be a whole id.

    Given a *skipped* list, the sessions whose stored text is not UTF-8 are left out and added to it
    (:mod:`maint.store.text_check`): one such session never stops the export of the others. Without
    *messages*, a bulk selection leaves the messages' text to the export that reads it (the jsonl lines).
    """
    if session_id is not None and not filters.is_empty:
        raise UsageError("--session-id cannot be combined with filters (use one or the other)")
    if session_id is not None:
        sid = resolve_session(store, session_id, exact=exact)
        if skipped is not None:
            with store.snapshot():
                bad = unreadable_sessions(store, "SELECT ?", (sid,))
            if bad:
                skipped.extend(bad)
                return []
        return [sid]
    now = time.time() if now is None else now
    where, params = ("1", {}) if filters.is_empty else filters.sql("c.")
    ended = "" if filters.is_empty else "c.ended_at IS NOT NULL AND "
    conn = store.conn
    with store.snapshot():
        conn.execute("DROP TABLE IF EXISTS temp.maint_export")
        conn.execute("DROP TABLE IF EXISTS temp.maint_export_all")
        conn.execute("DROP TABLE IF EXISTS temp.maint_export_bad")
        conn.execute(f"""CREATE TEMP TABLE maint_export_all AS SELECT c.id AS id, c.started_at AS started_at
            FROM ({catalog_sql(store, filters.columns)}) c WHERE {ended}({where})""", {"now": now, **params})
        bad = [] if skipped is None else unreadable_sessions(store, "SELECT id FROM temp.maint_export_all",
                                                             messages=messages)
        # matched by bytes and kind: a BLOB id of the same bytes as a text id is another row (hostile try 17, U6);
        # a row without an id is never exported (unreadable_sessions names it)
        conn.execute("CREATE TEMP TABLE maint_export_bad (raw BLOB, blob INTEGER, PRIMARY KEY (raw, blob))")
        conn.executemany("INSERT INTO maint_export_bad VALUES (?, ?)",
                         [(b.raw_id, b.blob) for b in bad if b.raw_id is not None])
        conn.execute(f"""CREATE TEMP TABLE maint_export AS
            SELECT ROW_NUMBER() OVER (ORDER BY started_at, id) - 1 AS ord, id FROM temp.maint_export_all
            WHERE id IS NOT NULL
              AND (CAST(id AS BLOB), {is_blob_sql('id')}) NOT IN (SELECT raw, blob FROM temp.maint_export_bad)""")
        conn.execute("DROP TABLE temp.maint_export_all")
        conn.execute("DROP TABLE temp.maint_export_bad")
        conn.execute("CREATE UNIQUE INDEX temp.maint_export_ord ON maint_export(ord)")
        count = store.scalar("SELECT COUNT(*) FROM maint_export")
    if skipped is not None:
        skipped.extend(bad)
    store.plan_generation += 1
    generation = store.plan_generation

    def load(start: int, stop: int) -> list[str]:
        if store.plan_generation != generation:
            raise RuntimeError("this selection was replaced by a later one on the same store")
        return [r[0] for r in conn.execute("SELECT id FROM maint_export WHERE ord >= ? AND ord < ? ORDER BY ord",
                                           (start, stop))]

    return Paged(count, load, page=2048)


def latest_session(store: Store, now: float | None = None, *, raw: bool = False) -> str | bytes | None:
    """The most recently active session (ties: started later, then the higher id); *raw*: its id's stored
    bytes (an id that is not UTF-8 cannot be read as text)."""
    now = time.time() if now is None else now
    return store.scalar(latest_session_sql(store, "CAST(id AS BLOB)" if raw else "id"), {"now": now})


def latest_session_sql(store: Store, column: str = "id") -> str:
    """SQL selecting :func:`latest_session`'s *column* (parameter ``:now``): as the scope of a check, it names that
    row itself, not every row of the same id bytes (a BLOB twin of a text id: hostile try 18, V2)."""
    return (f"SELECT {column} FROM ({catalog_sql(store, ())}) "
            "ORDER BY last_active DESC, started_at DESC, id DESC LIMIT 1")
