"""A conversation too big for one short transaction leaves Hermes's full-text index first, a piece at a time.

Deleting a message row costs little; taking it out of an FTS5 index costs the
rest (its text is tokenized again, and the trigram index writes a delete marker
for every three characters). On a store SessionDB built, a 3,439-message
conversation held the lock for 0.25 to 0.3 s in its one transaction, against
0.06 s for the same delete with its messages already out of both indexes.

So before the transaction that deletes such a conversation, its messages leave
each index that keeps its own copy of the text (hermes-agent 0.19's layout)
in transactions of their own, of the usual length, with writers let in between.
The delete trigger then finds nothing left to remove. Meanwhile the
conversation itself is whole; only a search misses it. A note in ``state_meta``,
written with the first piece, names its sessions; the transaction that deletes
them removes it. If they are not deleted after all (the conversation changed,
the run was stopped or died), their messages go back into the indexes with
the expression of Hermes's own insert trigger, in pieces of the same length
with writers let in between (a 100k-message conversation put back in one
transaction held the lock 3.8 s), and the note goes with the last piece. A
piece puts back only what an index lacks, so pieces after a crash are safe.

Only an index whose delete trigger is exactly ``DELETE FROM t WHERE rowid =
old.id`` (with the insert trigger's condition, if any) is taken apart this way:
removing a row it no longer holds is then a no-op. Others (an external-content
index, where a delete is a ``'delete'`` command that must match the row) are
left to their triggers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from maint import json_text
from maint.ops.fts import Fill, fill_of, is_inline
from maint.store.connection import Store

log = logging.getLogger(__name__)

NOTE_KEY = "hermes_maint.fts_detached"
STEP_S = 0.02  # one piece aims at this much lock time, so the clock can end a transaction between pieces
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
    try:
        note = json_text.loads(raw)
    except ValueError:
        return None
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
    from maint.store.batching import pacer_for, run_steps, target_from_env

    run_steps(detacher.give_back_step, store.write, pause or pacer_for(store).pause,
              target_from_env() if target_s is None else target_s)


class Detacher:
    """Takes one conversation at a time out of the detachable indexes, in pieces of about :data:`STEP_S`."""

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
        if took > STEP_S:
            self.piece = max(MIN_PIECE, self.piece // 2)
        elif took < STEP_S / 4:
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
