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

import os
import re
from collections.abc import Callable
from pathlib import Path

import apsw

from maint.errors import MaintError
from maint.store.connection import Store, as_found, open_store, scaled_write_limit_s
from maint.store.holders import HolderReport, find_holders
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


def check(store: Store, table: str, *, content: bool = False) -> list[str]:
    """SQLite's integrity check of one index (FTS5 checks itself through it), then its coverage; [] when healthy.
    With *content* (a store opened for writing), an external-content index is also checked against the rows
    it indexes (:func:`content_check`), which the pragma does not do."""
    try:
        rows = [r[0] for r in store.conn.execute(f"PRAGMA integrity_check({table})")]
    except apsw.Error as exc:
        return [f"{table}: {exc}"]
    if rows != ["ok"]:
        return [line for r in rows for line in str(r).splitlines()]
    if content and not is_inline(store, table) and (problem := content_damaged(store, [table]).get(table, [None])[0]):
        return [problem]
    return incomplete(store, table)


def content_check(conn: apsw.Connection, table: str) -> str | None:
    """FTS5's own check of an index against the rows it indexes (rank 1); None when they agree.

    ``PRAGMA integrity_check`` runs FTS5's check with rank 0, which compares an external-content index
    (current upstream: it reads the messages through a view) only with itself: an index out of step with
    its messages passes it, and Hermes's delete trigger then fails with SQLITE_CORRUPT_VTAB on those rows
    (hostile try 5, H6). FTS5 takes the check as an INSERT, so *conn* must be able to write (the check
    writes nothing, but holds the write lock while it reads and tokenizes every indexed message: about
    2.6 s and 5.1 s for the two indexes of an 80,000-message bench store)."""
    name = '"' + table.replace('"', '""') + '"'
    try:
        conn.execute(f"INSERT INTO {name}({name}, rank) VALUES ('integrity-check', 1)")
    except (apsw.BusyError, apsw.LockedError, apsw.InterruptError):
        raise  # says nothing about the index (interrupted: past the bound of the transaction around it)
    except apsw.CorruptError as exc:
        return f"{table} is out of step with the rows it indexes ({exc})"
    except apsw.Error as exc:
        return f"{table}: FTS5's check against the rows it indexes failed ({type(exc).__name__}: {exc})"
    return None


def content_damaged(store: Store, tables: list[str] | None = None) -> dict[str, list[str]]:
    """The external-content indexes that fail :func:`content_check` (a store opened for writing), in one bounded
    transaction: the check reads the messages through the store's own content view, and one that never ends
    would hold the write lock for good (hostile try 11, N2)."""
    with store.write(scaled_write_limit_s(store.path)) as conn:
        return {t: [p] for t in (store.fts_tables if tables is None else tables)
                if not is_inline(store, t) and (p := content_check(conn, t))}


def incomplete(store: Store, table: str) -> list[str]:
    try:
        cov = coverage(store, table)
    except apsw.Error as exc:
        return [f"{table}: {exc}"]
    if cov and cov[0] != cov[1]:
        return [f"{table} holds {cov[0]} of the {cov[1]} messages it should index"]
    return []


def damaged(store: Store, *, content: bool = False) -> dict[str, list[str]]:
    return {t: lines for t in store.fts_tables if (lines := check(store, t, content=content))}


def rebuild(store: Store, table: str) -> str:
    """Rebuild one index in one transaction: FTS5 'rebuild' (which also repairs a damaged inline index from
    its own copy), then, if an inline index still misses messages, a refill from ``messages``.
    Returns 'rebuild' or 'refill'. It holds the lock for its whole run by design, with Hermes stopped (repair-fts
    refuses while anyone holds the store), bounded by the store's size (a content view that never ends, N2)."""
    with store.write(scaled_write_limit_s(store.path)) as conn:
        conn.execute(f"INSERT INTO {table}({table}) VALUES('rebuild')")
        fill = fill_of(store, table) if is_inline(store, table) else None
        if fill is None or not incomplete(store, table):
            return "rebuild"
        conn.execute(f"DELETE FROM {table}")
        conn.execute(f"INSERT INTO {table}({fill.columns}) SELECT {fill.values} FROM messages m"
                     + (f" WHERE {fill.where}" if fill.where else ""))
    return "refill"


def check_content_of(path: Path, holders: Callable[[Path], HolderReport] = find_holders,
                     ) -> tuple[dict[str, list[str]], str | None]:
    """FTS5's content check of the store's external-content indexes (:func:`content_check`):
    (the indexes that fail it, None), or ({}, why it did not run). FTS5 runs it as a write, holding the
    write lock while it reads every indexed message, so it runs only when no other process holds the
    store (a live Hermes writer never waits for it) and we may write to it."""
    report = holders(path)
    if not report.quiet:
        return {}, (f"the search indexes' check against their messages was not run: {report.describe()} "
                    "(it holds the write lock while it reads every message); stop Hermes and run it again")
    from maint.store.runlock import lock_path, tidy_lock

    had_lock = os.path.lexists(lock_path(Path(os.path.realpath(path))))
    try:
        with as_found(path), open_store(path) as store:  # a store at rest is left without a -wal and -shm
            return content_damaged(store), None
    except (apsw.BusyError, apsw.LockedError):
        return {}, ("the search indexes' check against their messages was not run: another process held the "
                    "write lock past the busy timeout")
    except MaintError as exc:
        return {}, f"the search indexes' check against their messages was not run: {exc}"
    finally:
        if not had_lock:
            tidy_lock(path)  # a report leaves the store's folder as it found it
