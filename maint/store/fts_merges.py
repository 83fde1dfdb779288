"""While a bulk delete runs, FTS5 merge work is done by us in bounded steps instead of all at once.

Each commit flushes FTS5's pending index data into a new segment, and a level
that fills up (``automerge`` segments) is merged; FTS5 lets itself do 64 x
levels pages of that work per 64 pages written, and a store Hermes filled has
a level per ``optimize`` it ran (one per 1,000 writes), so a merge there runs
to the end in whichever statement triggers it: ours, or a Hermes append.

So for the run ``automerge`` is 0 (crisis merges stay on) and we run FTS5's
own ``merge`` command a few pages at a time before each transaction's deletes,
then finish what is left in short transactions and put Hermes's value back
exactly. The value is saved in ``state_meta`` in the transaction that changes
it, so the next run puts it back after a crash. See docs/design/fts.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator

from maint import json_text
from maint.crashpoints import crash_point
from maint.store.batching import run_steps
from maint.store.connection import Store

log = logging.getLogger(__name__)

META_KEY = "hermes_maint.fts_automerge"
FTS5_DEFAULT_AUTOMERGE = 4
STEP_S = 0.01  # one merge step aims at this much work, so the clock can end a transaction between steps
MIN_PAGES, MAX_PAGES = 8, 256
FTS5_MAX_AUTOMERGE = 64
STRUCTURE_ROWID = 10  # FTS5 keeps its segment list in this row of <table>_data


def fts5_tables(conn) -> list[str]:
    """The store's FTS5 tables (Hermes 0.19.0: messages_fts and messages_fts_trigram)."""
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%' "
        "AND lower(sql) LIKE '%using fts5%' ORDER BY name")]


def structure_blob(conn, table: str) -> bytes | None:
    """The index's segment list as stored: a merge that did any work changes it."""
    row = conn.execute(f'SELECT block FROM "{table}_data" WHERE id = ?', (STRUCTURE_ROWID,)).fetchone()
    return bytes(row[0]) if row and row[0] is not None else None


def fts5_int(value: object, default: int, low: int, high: int) -> int:
    """An integer option as FTS5 reads it (``sqlite3Fts5ConfigSetValue``): a value that is not an integer
    in [*low*, *high*] is ignored, so the default holds (hand-edited rows must not stop a run). FTS5 takes
    it with ``sqlite3_value_int``, which keeps a 64-bit integer's low 32 bits as a signed int (2**32 + 5
    is 5, 2**31 is negative)."""
    try:
        n = int(str(value).strip()) if value is not None else None
    except ValueError:
        n = None
    if n is not None:
        n = (n + 2**31) % 2**32 - 2**31 if -(2**63) <= n < 2**63 else None  # past 64 bits SQLite reads a REAL
    return n if n is not None and low <= n <= high else default


def _automerge(value: object) -> int:
    """The ``automerge`` FTS5 works with for a stored value (a blob is not a number to FTS5: ignored)."""
    value = _untag(value)
    if isinstance(value, bytes):
        return FTS5_DEFAULT_AUTOMERGE
    return fts5_int(value, FTS5_DEFAULT_AUTOMERGE, 0, FTS5_MAX_AUTOMERGE)


def _settable(value: object) -> bool:
    """True when FTS5's own ``automerge`` insert of *value* stores what was there: an integer in range
    (or its digits, as notes written before text was tagged hold it)."""
    if isinstance(value, str) and value.isdigit() and str(int(value)) == value:
        value = int(value)
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= FTS5_MAX_AUTOMERGE


def _config(conn, table: str, key: str) -> int | float | dict | None:
    """The stored value, its type kept in JSON (the note that holds it): text and blobs are tagged."""
    row = conn.execute(f'SELECT v FROM "{table}_config" WHERE k = ?', (key,)).fetchone()
    if row is None or isinstance(row[0], (int, float)):
        return None if row is None else row[0]
    return {"blob": row[0].hex()} if isinstance(row[0], bytes) else {"text": row[0]}


def _untag(value: object) -> object:
    """The SQLite value a saved one stands for (a blob as bytes, text as str)."""
    if isinstance(value, dict):
        if "blob" in value:
            try:
                return bytes.fromhex(str(value["blob"]))
            except ValueError:
                return None
        return str(value.get("text", ""))
    return value


def _set_config(conn, table: str, key: str, value: int) -> None:
    # The special insert also bumps the index's config cookie, so every other connection reloads it.
    conn.execute(f'INSERT INTO "{table}"("{table}", rank) VALUES (?, ?)', (key, value))


def _restore(conn, saved: dict[str, object]) -> None:
    """Inside the caller's transaction: Hermes's automerge exactly as it was (value and type), and our note gone."""
    tables = set(fts5_tables(conn))
    for table, value in saved.items():
        if table not in tables:
            continue
        _set_config(conn, table, "automerge", _automerge(value))  # also makes every connection reload it
        if value is None:
            conn.execute(f'DELETE FROM "{table}_config" WHERE k = ?', ("automerge",))
        elif not _settable(value):
            # Anything the insert above may not have stored as it was (text, a blob, out of range): the
            # row comes back exactly; FTS5 reads it as before.
            conn.execute(f'UPDATE "{table}_config" SET v = ? WHERE k = ?', (_untag(value), "automerge"))
    conn.execute("DELETE FROM state_meta WHERE key = ?", (META_KEY,))


def restore_left_over(store: Store) -> bool:
    """A run that died with merges held leaves its note: put Hermes's values back. True if it did."""
    raw = store.get_meta(META_KEY) if store.has_table("state_meta") else None
    if raw is None:
        return False
    saved = _saved_values(raw)
    with store.write() as conn:
        if saved is None:
            _give_back_defaults(store, conn, raw)
        else:
            _restore(conn, saved)
    return True


def _saved_values(raw: str) -> dict[str, object] | None:
    """The values a note keeps, or None when it is not the note we write (hand-edited, damaged)."""
    try:
        saved = json_text.loads(raw)
    except ValueError:
        return None
    if not isinstance(saved, dict) or not all(isinstance(t, str) for t in saved):
        return None
    for value in saved.values():
        tagged = isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), str) \
            and next(iter(value)) in ("text", "blob")
        if not (value is None or tagged or isinstance(value, (int, float, str)) and not isinstance(value, bool)):
            return None
    return saved


def _give_back_defaults(store: Store, conn, raw: str) -> None:
    """A damaged note: Hermes's values are lost, so each automerge still at 0 (what a run of ours sets)
    goes back to FTS5's default, and the note goes."""
    log.warning("%s: our note %s is damaged (%r…); it is dropped, and automerge goes back to FTS5's default "
                "where a run of ours had changed it", store.path, META_KEY, str(raw)[:60])
    for table in fts5_tables(conn):
        if _untag(_config(conn, table, "automerge")) == 0:
            _restore(conn, {table: None})
    conn.execute("DELETE FROM state_meta WHERE key = ?", (META_KEY,))


class MergeSteps:
    """The merges FTS5 would have done (levels of ``usermerge`` segments), in steps of about :data:`STEP_S`."""

    def __init__(self, store: Store, tables: list[str]):
        self.store = store
        self.tables = tables
        self.pages = 32  # leaf pages a step may write, adjusted to the time steps take
        self.steps = 0

    def step(self) -> bool:
        """One bounded merge step inside the caller's transaction; False when nothing was left to merge."""
        conn = self.store.conn
        worked = False
        for table in self.tables:
            before = structure_blob(conn, table)
            started = time.monotonic()
            # FTS5 merges a level only when it holds usermerge segments, or finishes a merge begun; the
            # segment list is rewritten only when it did some work.
            conn.execute(f'INSERT INTO "{table}"("{table}", rank) VALUES (\'merge\', ?)', (self.pages,))
            took = time.monotonic() - started
            if structure_blob(conn, table) != before:
                worked = True
                self.steps += 1
                # Halve after a slow step, double after a quick one, within bounds: a step's pages are
                # what it writes, and a merge that cancels deletes against their rows reads far more.
                if took > STEP_S:
                    self.pages = max(MIN_PAGES, self.pages // 2)
                elif took < STEP_S / 4:
                    self.pages = min(MAX_PAGES, self.pages * 2)
        return worked


@contextlib.contextmanager
def merges_in_our_hands(store: Store, *, target_s: float, pause: Callable[[], None],
                        after_commit: Callable[[], None]) -> Iterator[Callable[[], bool] | None]:
    """Yields one merge step (see :class:`MergeSteps`) for the caller to run inside its transactions,
    or None when the store has no FTS5 index. On the way out the merges left are finished in
    transactions of about *target_s* with *pause* between them, then Hermes's settings come back."""
    restore_left_over(store)
    tables = fts5_tables(store.conn)
    if not tables or not store.has_table("state_meta"):
        yield None
        return
    saved = {t: _config(store.conn, t, "automerge") for t in tables}
    if all(v is not None and _automerge(v) == 0 for v in saved.values()):
        yield None  # automerge already off: nothing merges behind our back, nothing to hold
        return
    with store.write() as conn:
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", (META_KEY, json.dumps(saved)))
        for t in tables:
            _set_config(conn, t, "automerge", 0)
    crash_point("fts_automerge_held")
    after_commit()
    pause()  # writers in before the run's first transaction
    steps = MergeSteps(store, tables)
    try:
        yield steps.step
        # the last pause too: giving Hermes's settings back is one more transaction
        run_steps(steps.step, store.write, pause, target_s, after_commit)
    finally:
        with store.write() as conn:
            _restore(conn, saved)
        after_commit()
