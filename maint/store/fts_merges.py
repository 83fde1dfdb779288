"""While a bulk delete runs, FTS5 merge work is done by us in bounded steps instead of all at once.

Each commit flushes FTS5's pending index data into a new segment, and when a
level fills up (``automerge`` segments, default 4) FTS5 merges it. The work
it allows itself per 64 leaf pages written is 64 x the number of levels in
the index, and every ``optimize`` adds a level: Hermes runs one every 1,000
writes, so a store it filled has a hundred levels or more and each merge
runs to the end in whichever statement triggers it (measured on a store
built through SessionDB: one statement merging 4,000 leaf pages for 2 to
3 s, in our transaction or in a Hermes append).

So for the duration we set ``automerge`` to 0 (FTS5's own switch; crisis
merges of 16 segments stay on) and do the same merges ourselves with FTS5's
``merge`` command, a few pages at a time, before each transaction's deletes.
While the deletes go on, a level is merged once it holds 4 segments fewer than
FTS5's crisis merge (``crisismerge``, default 16: 12) rather than ``usermerge``
(4): every merge rewrites the delete markers it takes in, and the wider fan-in
rewrites each of them fewer times (a 100k-session sweep: 84 s to 76 s). At the
end the remaining merges, down to ``usermerge``, are finished the same way and Hermes's value
is put back exactly (a row it never wrote is removed again). The value to
put back is saved in ``state_meta`` in the same transaction that changes it,
so after a crash the next run restores it before anything else. ``crisismerge``
is held too, well above the level size we merge at (:func:`run_crisis`): a
level keeps gathering Hermes's commits while our steps merge it, and FTS5
would otherwise merge it whole inside one of those commits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterator

from maint import json_text
from maint.crashpoints import crash_point
from maint.store.batching import run_steps
from maint.store.connection import Store
from maint.store.fts_segments import fts5_tables, read_structure, structure_blob

log = logging.getLogger(__name__)

META_KEY = "hermes_maint.fts_automerge"
CRISIS_KEY = "hermes_maint.fts_crisismerge"
FTS5_DEFAULT_AUTOMERGE = 4
FTS5_DEFAULT_USERMERGE = 4
STEP_S = 0.01  # one merge step aims at this much work, so the clock can end a transaction between steps
MIN_PAGES, MAX_PAGES = 8, 256


FTS5_DEFAULT_CRISISMERGE = 16
FTS5_MAX_SEGMENT = 2000
FTS5_MAX_AUTOMERGE = 64
MAX_RUN_FAN_IN = 400  # segments a level may gather during a run (FTS5 allows 2,000 in all)
MAX_RUN_CRISIS = 800  # and the most it may hold before FTS5 merges it in whichever commit comes


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


def _crisismerge(value: object) -> int:
    """The ``crisismerge`` FTS5 works with: a non-integer or negative value is ignored, 0 and 1 mean the
    default, and from ``FTS5_MAX_SEGMENT`` on it is clamped below it (``sqlite3Fts5ConfigSetValue``)."""
    value = _untag(value)
    n = None if isinstance(value, bytes) else fts5_int(value, -1, 0, 2**31)
    if n is None or n < 0:
        return FTS5_DEFAULT_CRISISMERGE
    return FTS5_DEFAULT_CRISISMERGE if n <= 1 else min(n, FTS5_MAX_SEGMENT - 1)


_HELD = {META_KEY: ("automerge", _automerge), CRISIS_KEY: ("crisismerge", _crisismerge)}


def _restore(conn, saved: dict[str, object], note: str = META_KEY) -> None:
    """Inside the caller's transaction: Hermes's option exactly as it was (value and type), and our note gone."""
    option, effective = _HELD[note]
    tables = set(fts5_tables(conn))
    for table, value in saved.items():
        if table not in tables:
            continue
        _set_config(conn, table, option, effective(value))  # also makes every connection reload it
        if value is None:
            conn.execute(f'DELETE FROM "{table}_config" WHERE k = ?', (option,))
        elif not (option == "automerge" and _settable(value)):
            # Anything the insert above may not have stored as it was (text, a blob, out of range): the
            # row comes back exactly; FTS5 reads it as before.
            conn.execute(f'UPDATE "{table}_config" SET v = ? WHERE k = ?', (_untag(value), option))
    conn.execute("DELETE FROM state_meta WHERE key = ?", (note,))


def restore_left_over(store: Store) -> bool:
    """A run that died with merges held leaves its notes: put Hermes's values back. True if it did."""
    if not store.has_table("state_meta"):
        return False
    done = False
    for note in _HELD:
        raw = store.get_meta(note)
        if raw is None:
            continue
        saved = _saved_values(raw)
        with store.write() as conn:
            if saved is None:
                _give_back_defaults(store, conn, note, raw)
            else:
                _restore(conn, saved, note)
        done = True
    return done


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


def _give_back_defaults(store: Store, conn, note: str, raw: str) -> None:
    """A damaged note: Hermes's values are lost, so each option still at what a run of ours sets it to
    (automerge 0, crisismerge above FTS5's default) goes back to FTS5's default, and the note goes."""
    option, _ = _HELD[note]
    log.warning("%s: our note %s is damaged (%r…); it is dropped, and %s goes back to FTS5's default where a run "
                "of ours had changed it", store.path, note, str(raw)[:60], option)
    for table in fts5_tables(conn):
        value = _untag(_config(conn, table, option))
        ours = value == 0 if option == "automerge" else \
            isinstance(value, int) and not isinstance(value, bool) and value > FTS5_DEFAULT_CRISISMERGE
        if ours:
            _restore(conn, {table: None}, note)
    conn.execute("DELETE FROM state_meta WHERE key = ?", (note,))


def run_fan_in(expected_transactions: float, hermes_floor: int) -> int:
    """Segments a level gathers before we merge it during a run: a third of the run's commits, so
    that level 0 is merged at most a few times and what it merges into stays under ``usermerge``
    (4): each delete marker is rewritten once however long the run, instead of once per level of
    a tree that deepens with it. Never below Hermes's own (*hermes_floor*: crisis merge - 4), nor
    above :data:`MAX_RUN_FAN_IN` (past which a marker is rewritten twice)."""
    return max(hermes_floor, min(MAX_RUN_FAN_IN, math.ceil(max(0.0, expected_transactions) / 3)))


def run_crisis(fan_in: int) -> int:
    """``crisismerge`` for a run: room above the fan-in for the segments that land while our steps merge
    a level (Hermes's commits and ours, one per index each). FTS5's own 4 was too little: an append
    beside a prune merged a whole level in its commit. Twice the fan-in, at least 16 above it, within
    :data:`MAX_RUN_CRISIS`."""
    return min(MAX_RUN_CRISIS, max(2 * fan_in, fan_in + 16))


class MergeSteps:
    """The merges FTS5 would have done, in steps of about :data:`STEP_S`."""

    def __init__(self, store: Store, tables: list[str], fan_in: dict[str, int] | None = None):
        self.store = store
        self.tables = tables
        self.min_segments = {t: fts5_int(_untag(_config(store.conn, t, "usermerge")), FTS5_DEFAULT_USERMERGE, 2, 16)
                             for t in tables}
        crisis = {t: _crisismerge(_config(store.conn, t, "crisismerge")) for t in tables}
        self.run_segments = {t: max(self.min_segments[t], (fan_in or {}).get(t, crisis[t] - 4)) for t in tables}
        self.finishing = False
        self.pages = 32  # leaf pages a step may write, adjusted to the time steps take
        self.steps = 0

    def step(self) -> bool:
        """One bounded merge step inside the caller's transaction; False when nothing was left to merge."""
        conn = self.store.conn
        worked = False
        for table in self.tables:
            st = read_structure(conn, table)
            floor = (self.min_segments if self.finishing else self.run_segments)[table]
            if st is None or not st.pending_merge(floor):
                continue
            before = structure_blob(conn, table)
            started = time.monotonic()
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
                        after_commit: Callable[[], None],
                        expected_transactions: float = 0.0) -> Iterator[Callable[[], bool] | None]:
    """Yields one merge step (see :class:`MergeSteps`) for the caller to run inside its transactions,
    or None when the store has no FTS5 index. On the way out the merges left are finished in
    transactions of about *target_s* with *pause* between them, then Hermes's settings come back.

    For a run of many commits (*expected_transactions*, an estimate) a level may gather more segments
    than FTS5's crisis merge allows (:func:`run_fan_in`); ``crisismerge`` is then held above that
    for the run, saved and put back like ``automerge``."""
    restore_left_over(store)
    tables = fts5_tables(store.conn)
    if not tables or not store.has_table("state_meta"):
        yield None
        return
    saved = {t: _config(store.conn, t, "automerge") for t in tables}
    if all(v is not None and _automerge(v) == 0 for v in saved.values()):
        yield None  # automerge already off: nothing merges behind our back, nothing to hold
        return
    crisis = {t: _config(store.conn, t, "crisismerge") for t in tables}
    fan_in = {t: run_fan_in(expected_transactions, _crisismerge(crisis[t]) - 4) for t in tables}
    raise_crisis = {t: run_crisis(fan_in[t]) for t in tables if run_crisis(fan_in[t]) > _crisismerge(crisis[t])}
    with store.write() as conn:
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", (META_KEY, json.dumps(saved)))
        for t in tables:
            _set_config(conn, t, "automerge", 0)
        if raise_crisis:
            conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                         (CRISIS_KEY, json.dumps({t: crisis[t] for t in raise_crisis})))
            for t, value in raise_crisis.items():
                _set_config(conn, t, "crisismerge", value)
    crash_point("fts_automerge_held")
    after_commit()
    pause()  # writers in before the run's first transaction
    steps = MergeSteps(store, tables, fan_in)
    try:
        yield steps.step
        steps.finishing = True
        # the last pause too: giving Hermes's settings back is one more transaction
        run_steps(steps.step, store.write, pause, target_s, after_commit)
    finally:
        with store.write() as conn:
            _restore(conn, saved)
            if raise_crisis:
                _restore(conn, {t: crisis[t] for t in raise_crisis}, CRISIS_KEY)
        after_commit()
