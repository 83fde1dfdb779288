"""repair-fts: a damaged or incomplete full-text index rebuilt from the messages it indexes.

Hermes writes every message through triggers into ``messages_fts`` and
``messages_fts_trigram``; a damaged index makes search miss or fail, and the
triggers make message writes fail with it. Two layouts exist:

* external content (current upstream): the index reads the messages through a
  view, and FTS5's ``'rebuild'`` rebuilds it from them;
* inline content (hermes-agent 0.19 and older stores): the index keeps its own
  copy of each message's text. It is refilled from ``messages`` with the very
  expression Hermes's own insert trigger uses (read from the store's trigger,
  so it is whatever this Hermes version indexes) when it holds fewer rows than
  that trigger would have written, as an index Hermes recreated empty does;
  ``'rebuild'`` first repairs a damaged one from its own copy.

No message changes. Each index is rebuilt in its own transaction.
"""

from __future__ import annotations

import re

import apsw

from maint.store.connection import Store
from maint.store.fts_index import Fill, fill_of, is_inline  # noqa: F401 - used here and by doctor

EXPECTED = ("messages_fts", "messages_fts_trigram")

def mentions(line: str, table: str) -> bool:
    """The line names this FTS table (not merely one whose name starts the same)."""
    return re.search(rf"(?<![\w]){re.escape(table)}(?![\w])", line) is not None


def coverage(store: Store, table: str) -> tuple[int, int] | None:
    """(rows in an inline index, messages its trigger indexes), when both can be counted cheaply."""
    if not is_inline(store, table):
        return None
    fill = fill_of(store, table)
    if fill is None:
        return None
    expected = store.scalar("SELECT COUNT(*) FROM messages m" + (f" WHERE {fill.where}" if fill.where else ""))
    return store.scalar(f"SELECT COUNT(*) FROM {table}"), expected


def check(store: Store, table: str) -> list[str]:
    """SQLite's integrity check of one index (FTS5 checks itself through it), then its coverage; [] when healthy."""
    try:
        rows = [r[0] for r in store.conn.execute(f"PRAGMA integrity_check({table})")]
    except apsw.Error as exc:
        return [f"{table}: {exc}"]
    if rows != ["ok"]:
        return [line for r in rows for line in str(r).splitlines()]
    return incomplete(store, table)


def incomplete(store: Store, table: str) -> list[str]:
    try:
        cov = coverage(store, table)
    except apsw.Error as exc:
        return [f"{table}: {exc}"]
    if cov and cov[0] != cov[1]:
        return [f"{table} holds {cov[0]} of the {cov[1]} messages it should index"]
    return []


def damaged(store: Store) -> dict[str, list[str]]:
    return {t: lines for t in store.fts_tables if (lines := check(store, t))}


def rebuild(store: Store, table: str) -> str:
    """Rebuild one index in one transaction: FTS5 'rebuild' (which also repairs a damaged inline index from
    its own copy), then, if an inline index still misses messages, a refill from ``messages``.
    Returns 'rebuild' or 'refill'."""
    with store.write() as conn:
        conn.execute(f"INSERT INTO {table}({table}) VALUES('rebuild')")
        fill = fill_of(store, table) if is_inline(store, table) else None
        if fill is None or not incomplete(store, table):
            return "rebuild"
        conn.execute(f"DELETE FROM {table}")
        conn.execute(f"INSERT INTO {table}({fill.columns}) SELECT {fill.values} FROM messages m"
                     + (f" WHERE {fill.where}" if fill.where else ""))
    return "refill"
