"""What a bulk delete does to Hermes's FTS5 indexes, so that neither its lock nor a Hermes append pays
for index work all at once (docs/design/fts.md).

* Merges: for the run ``automerge`` is 0 (crisis merges stay on) and we run FTS5's own ``merge``
  command a few pages at a time before each transaction's deletes, then finish what is left in short
  transactions and put Hermes's value back exactly. A store Hermes filled has a level per ``optimize``
  it ran (one per 1,000 writes), and FTS5 lets itself do 64 x levels pages of merge work per 64 pages
  written, so left to itself a merge runs to the end in whichever statement triggers it.
* Detach: a unit too big for one transaction of the target length leaves each inline index first, in
  pieces of their own with writers let in between; its delete then finds nothing left to remove from
  the index. Meanwhile the conversation is whole and only a search misses it. If it is not deleted
  after all (changed, stopped, crashed), its messages go back with the expression of Hermes's own
  insert trigger, in pieces likewise.

Each holds a note in ``state_meta`` written in the transaction that changes the store, so the next run
(or ``repair-fts``) puts back what a killed one left. Only an index whose delete trigger is exactly
``DELETE FROM t WHERE rowid = old.id`` (with the insert trigger's condition, if any) is taken apart;
an external-content index is left to its triggers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from maint.crashpoints import crash_point
from maint.store.batching import run_steps
from maint.store.connection import Store
from maint.store.sqlutil import fts5_indexes

log = logging.getLogger(__name__)

META_KEY = "hermes_maint.fts_automerge"
FTS5_DEFAULT_AUTOMERGE = 4
MERGE_STEP_S = 0.01  # one merge step aims at this much work, so the clock can end a transaction between steps
MIN_PAGES, MAX_PAGES = 8, 256
FTS5_MAX_AUTOMERGE = 64
STRUCTURE_ROWID = 10  # FTS5 keeps its segment list in this row of <table>_data


def fts5_tables(conn) -> list[str]:
    """The store's FTS5 tables (Hermes 0.19.0: messages_fts and messages_fts_trigram)."""
    return fts5_indexes(conn)


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


def _parsed(raw: str) -> object:
    """A note of ours as JSON, or None when it is not JSON. Our notes nest two levels at most, so one nested
    deeper is damaged whether Python's recursive parser reaches its bottom or gives up: not ours either way."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _saved_values(raw: str) -> dict[str, object] | None:
    """The values a note keeps, or None when it is not the note we write (hand-edited, damaged)."""
    saved = _parsed(raw)
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
    """The merges FTS5 would have done (levels of ``usermerge`` segments), in steps of about :data:`MERGE_STEP_S`."""

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
                if took > MERGE_STEP_S:
                    self.pages = max(MIN_PAGES, self.pages // 2)
                elif took < MERGE_STEP_S / 4:
                    self.pages = min(MAX_PAGES, self.pages * 2)
        return worked


@contextlib.contextmanager
def merges_in_our_hands(store: Store, *, target_s: float,
                        pause: Callable[[], None]) -> Iterator[Callable[[], bool] | None]:
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
    pause()  # writers in before the run's first transaction
    steps = MergeSteps(store, tables)
    try:
        yield steps.step
        # the last pause too: giving Hermes's settings back is one more transaction
        run_steps(steps.step, store.write, pause, target_s)
    finally:
        with store.write() as conn:
            _restore(conn, saved)


# How Hermes's insert trigger fills an inline index (read from the store, so it is what this Hermes writes).
_INSERT = re.compile(r"INSERT\s+INTO\s+(\w+)\s*\(([^)]*)\)\s*VALUES\s*\((.*)\)\s*;\s*$", re.I | re.S)
_TRIGGER = re.compile(r"AFTER\s+INSERT\s+ON\s+messages\s*(?:WHEN\s+(.*?))?\s*BEGIN\s+(.*?)\s*END\s*$", re.I | re.S)


@dataclass
class Fill:
    """How Hermes's insert trigger fills an inline index: its columns, the values per message, its condition."""

    columns: str
    values: str
    where: str | None


def is_inline(store: Store, table: str) -> bool:
    sql = store.scalar("SELECT sql FROM sqlite_master WHERE name = ?", (table,)) or ""
    return "content=" not in sql.replace(" ", "").lower()


def fill_of(store: Store, table: str) -> Fill | None:
    """The single ``INSERT INTO table(...) VALUES (new....)`` of Hermes's AFTER INSERT trigger, re-aimed at ``m``."""
    for (sql,) in store.conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"):
        trig = _TRIGGER.search(sql or "")
        if not trig:
            continue
        ins = _INSERT.search(trig.group(2).strip())
        if not ins or ins.group(1) != table or ";" in trig.group(2).strip()[:-1]:
            continue
        values = re.sub(r"\bnew\.", "m.", ins.group(3), flags=re.I)
        where = re.sub(r"\bnew\.", "m.", trig.group(1), flags=re.I) if trig.group(1) else None
        return Fill(ins.group(2), values, where)
    return None


# Detach

NOTE_KEY = "hermes_maint.fts_detached"
PIECE_STEP_S = 0.02  # one piece aims at this much lock time, so the clock can end a transaction between pieces
MIN_PIECE, MAX_PIECE = 16, 20_000

_DELETE = re.compile(r"AFTER\s+DELETE\s+ON\s+\"?messages\"?\s*(?:WHEN\s+(.*?))?\s*BEGIN\s+DELETE\s+FROM\s+\"?(\w+)\"?"
                     r"\s+WHERE\s+rowid\s*=\s*old\.id\s*;\s*END\s*$", re.I | re.S)


def _same_condition(a: str | None, b: str | None) -> bool:
    def norm(s: str | None) -> str:
        return re.sub(r"\s+", " ", re.sub(r"\b(?:new|old|m)\.", "m.", s or "", flags=re.I)).strip().lower()
    return norm(a) == norm(b)


def _keyed_by_message_id(fill: Fill) -> bool:
    """The insert trigger writes each message under its own id as the index's rowid."""
    return (fill.columns.split(",")[0].strip().lower() == "rowid"
            and re.match(r"\s*m\.id\s*,", fill.values, re.I) is not None)


@dataclass(frozen=True)
class Index:
    """An inline FTS5 index fed from ``messages``: how Hermes fills it, so rows taken out can go back."""

    table: str
    fill: Fill


def detachable(store: Store) -> list[Index]:
    """The indexes whose rows may leave ahead of their messages (see the module docstring)."""
    deletes: dict[str, list[str | None]] = {}
    for (sql,) in store.conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"):
        m = _DELETE.search(sql or "")
        if m:
            deletes.setdefault(m.group(2), []).append(m.group(1))
    found = []
    for table in store.fts_tables:
        conditions = deletes.get(table)
        if not conditions or len(conditions) != 1 or not is_inline(store, table):
            continue
        fill = fill_of(store, table)
        if fill is not None and _keyed_by_message_id(fill) and _same_condition(conditions[0], fill.where):
            found.append(Index(table, fill))
    return found


_MESSAGES_OF = "SELECT m.id FROM messages m WHERE m.session_id IN (SELECT value FROM json_each(?))"


def _sessions_of(raw: str) -> list[str] | None:
    """The session ids a note names, or None when it is not the note we write."""
    note = _parsed(raw)
    sessions = note.get("sessions") if isinstance(note, dict) else None
    if not isinstance(sessions, list) or not all(isinstance(sid, str) for sid in sessions):
        return None
    return sessions


def put_back_left_over(store: Store, target_s: float | None = None, pause: Callable[[], None] | None = None) -> bool:
    """A run that stopped with a conversation out of the index left its note: put its messages back, in
    transactions of about *target_s* with *pause* between them. True if there was a note."""
    raw = store.get_meta(NOTE_KEY) if store.has_table("state_meta") else None
    if raw is None:
        return False
    sessions = _sessions_of(raw)
    if sessions is None:
        log.warning("%s: the note of a conversation taken out of the search index is damaged (%r…); it is "
                    "dropped: `hermes-maint repair-fts --apply` refills whatever the index misses",
                    store.path, raw[:80])
        with store.write() as conn:
            conn.execute("DELETE FROM state_meta WHERE key = ?", (NOTE_KEY,))
        return True
    detacher = Detacher(store, detachable(store), MIN_PIECE)
    detacher.sessions = sessions
    detacher.give_back()
    _give_back_all(store, detacher, target_s, pause)
    return True


def _give_back_all(store: Store, detacher: Detacher, target_s: float | None,
                   pause: Callable[[], None] | None) -> None:
    """Every piece left to put back, a transaction of about *target_s* at a time, *pause* between them."""
    from maint.store.batching import pacer_for, target_from_env

    run_steps(detacher.give_back_step, store.write, pause or pacer_for(store).pause,
              target_from_env() if target_s is None else target_s)


class Detacher:
    """Takes one conversation at a time out of the detachable indexes, in pieces of about :data:`PIECE_STEP_S`."""

    def __init__(self, store: Store, indexes: list[Index], piece: int):
        self.store = store
        self.indexes = indexes
        self.piece = max(MIN_PIECE, min(MAX_PIECE, piece))
        self.sessions: list[str] | None = None
        self._after: int | None = None  # the last message id taken out; None before the first piece
        self._back: int | None = None  # the last message id put back; None unless it is being put back
        self.pieces = 0

    def start(self, session_ids: Sequence[str]) -> Callable[[], bool]:
        """Begin on a conversation (its note is written with the first piece); returns its step."""
        assert self.sessions is None, "one conversation at a time"
        self.sessions, self._after = list(session_ids), None
        return self.step

    def step(self) -> bool:
        """Inside the caller's transaction: the next piece of messages leaves every index. False once none is left.

        The conversation's message ids are listed once, in a temp table keyed by id, so each piece costs
        its own size (reading the whole conversation at every piece made a 100k-message one quadratic).
        A message Hermes adds meanwhile is not in the list: the delete trigger takes it, or the
        conversation has changed and is put back whole."""
        assert self.sessions is not None
        conn = self.store.conn
        if self._after is None:
            self._after = -(2 ** 63)
            conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                         (NOTE_KEY, json.dumps({"sessions": self.sessions})))
            self._list()
        started = time.monotonic()
        upto = self._next(self._after)
        if upto is None:
            return False
        for ix in self.indexes:
            cond = f" AND ({ix.fill.where})" if ix.fill.where else ""
            conn.execute(f'DELETE FROM "{ix.table}" WHERE rowid IN (SELECT m.id FROM temp.maint_detach d '
                         f'JOIN messages m ON m.id = d.id WHERE d.id > ? AND d.id <= ?{cond})', (self._after, upto))
        self._after = upto
        self.pieces += 1
        self._adapt(time.monotonic() - started)
        return True

    def _list(self) -> None:
        conn = self.store.conn
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS maint_detach (id INTEGER PRIMARY KEY)")
        conn.execute("DELETE FROM temp.maint_detach")
        conn.execute(f"INSERT INTO temp.maint_detach {_MESSAGES_OF}", (json.dumps(self.sessions),))

    def _next(self, after: int) -> int | None:
        """The last id of the next piece after *after*, or None when the list is done."""
        return self.store.scalar("SELECT MAX(id) FROM (SELECT id FROM temp.maint_detach WHERE id > ? "
                                 "ORDER BY id LIMIT ?)", (after, self.piece))

    def _adapt(self, took: float) -> None:
        if took > PIECE_STEP_S:
            self.piece = max(MIN_PIECE, self.piece // 2)
        elif took < PIECE_STEP_S / 4:
            self.piece = min(MAX_PIECE, self.piece * 2)

    def give_back(self) -> None:
        """The conversation is not to be deleted after all: its messages go back, a piece per
        :meth:`give_back_step`, in the transactions that follow (the note stays until the last)."""
        if self.sessions is not None and self._back is None:
            self._back = -(2 ** 63)
            self._after = None

    def give_back_step(self) -> bool:
        """Inside the caller's transaction: the next piece goes back where an index lacks it (it is listed
        again, with what Hermes added since); the last call removes the note. False once nothing is left."""
        if self.sessions is None or self._back is None:
            return False
        conn = self.store.conn
        if self._back == -(2 ** 63):
            self._list()
        started = time.monotonic()
        upto = self._next(self._back)
        if upto is None:
            conn.execute("DELETE FROM state_meta WHERE key = ?", (NOTE_KEY,))
            conn.execute("DROP TABLE IF EXISTS temp.maint_detach")
            self.sessions = self._back = None
            return False
        for ix in self.indexes:
            cond = f" AND ({ix.fill.where})" if ix.fill.where else ""
            conn.execute(f'INSERT INTO "{ix.table}"({ix.fill.columns}) SELECT {ix.fill.values} FROM '
                         f"temp.maint_detach d JOIN messages m ON m.id = d.id WHERE d.id > ? AND d.id <= ?{cond} "
                         f'AND NOT EXISTS (SELECT 1 FROM "{ix.table}" f WHERE f.rowid = m.id) ORDER BY m.id',
                         (self._back, upto))
        self._back = upto
        self._adapt(time.monotonic() - started)
        return True

    def out(self, session_ids: Sequence[str]) -> bool:
        """True when these are (among) the sessions taken out."""
        return self.sessions is not None and bool(set(session_ids) & set(self.sessions))

    def settle(self, conn, deleted: bool) -> None:
        """Inside the transaction that deletes the conversation (or gives it up): the note goes, or, if
        it was given up, its messages start going back (:meth:`give_back_step`)."""
        if self.sessions is None:
            return
        if not deleted:
            self.give_back()
            return
        conn.execute("DELETE FROM state_meta WHERE key = ?", (NOTE_KEY,))
        conn.execute("DROP TABLE IF EXISTS temp.maint_detach")
        self.sessions = None


@contextlib.contextmanager
def detaching(store: Store, piece: int, target_s: float | None = None,
              pause: Callable[[], None] | None = None) -> Iterator[Detacher | None]:
    """A :class:`Detacher` for the run (None when no index of this store can be taken apart). A note a
    crashed run left is dealt with first; whatever is still out when the run ends goes back, in
    transactions of about *target_s* with *pause* between them."""
    put_back_left_over(store, target_s, pause)
    indexes = detachable(store) if store.has_table("state_meta") else []
    if not indexes:
        yield None
        return
    detacher = Detacher(store, indexes, piece)
    try:
        yield detacher
    finally:
        if detacher.sessions is not None:
            detacher.give_back()
            _give_back_all(store, detacher, target_s, pause)
