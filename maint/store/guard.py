"""The session-write guard: may this session be deleted, replaced or closed while Hermes may be working on it?

One rule for every command that deletes, replaces or closes sessions (delete, prune, the sweep's reap,
import --replace, export --delete-after-verified), so a new command cannot forget a case:

* **locked**: a live turn lease or compression lock — a turn or compression is in progress;
* **active**: open, with activity (a message, or Hermes's ``last_activity_at``) within :data:`ACTIVE_S` —
  a chat may still be writing to it, and what it writes after our read would be lost or orphaned.

Each command decides what a reason means for it (refuse, skip and report, or warn), but asks here.

A **pin** is the user's "keep" mark (Hermes's Sessions docs): a delete that takes a whole family (``delete``,
``export --delete-after-verified``: the session and its delegate children) refuses while any member is
pinned, the named session or a child the operator never named, unless the operator says so
(``--include-pinned``, as prune's); both ask :func:`pinned` and word it with :func:`pinned_refusal`, when
they plan and again inside their write transaction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from maint.store.catalog import NEWEST_MESSAGE_SQL, NUMERIC, catalog_sql
from maint.store.connection import Store

ACTIVE_S = 300.0
LOCKED = "a turn or compression is in progress"
ACTIVE = f"open and written to within the last {ACTIVE_S / 60:g} minutes (a chat may still be writing to it)"


def active_sql(now_param: str = ":now") -> str:
    """1 when a catalog row (``catalog_sql``) is open with activity within :data:`ACTIVE_S` of *now_param*."""
    return (f"(ended_at IS NULL AND typeof(last_active) IN {NUMERIC} "
            f"AND last_active >= {now_param} - {ACTIVE_S})")


def locked_ids(store: Store, now: float) -> set[str]:
    """Every session with a turn or compression in progress (unexpired lock or lease rows): a handful at most,
    read store-wide, so the bulk commands check whole transactions against it cheaply."""
    locked: set[str] = set()
    if store.has_table("compression_locks"):
        locked.update(r[0] for r in store.conn.execute(
            "SELECT session_id FROM compression_locks WHERE expires_at > ?", (now,)))
    if store.has_table("session_turn_leases"):
        locked.update(r[0] for r in store.conn.execute(
            "SELECT conversation_id FROM session_turn_leases WHERE expires_at > ?", (now,)))
    return locked


def busy(store: Store, ids: Iterable[str], now: float | None = None, *, active: bool = True) -> dict[str, str]:
    """Why each of *ids* may not be changed now (absent when it may): :data:`LOCKED`, or (with *active*)
    :data:`ACTIVE`. Reads in the caller's transaction, so a check inside a write sees what it writes over."""
    now = time.time() if now is None else now
    wanted = json.dumps(list(ids))
    where = "s.id IN (SELECT value FROM json_each(:ids))"
    rows = store.conn.execute(f"SELECT id, locked, {active_sql()} FROM ({catalog_sql(store, (), where=where)})",
                              {"now": now, "ids": wanted})
    out: dict[str, str] = {}
    for sid, locked, is_active in rows:
        if locked:
            out[sid] = LOCKED
        elif active and is_active:
            out[sid] = ACTIVE
    return out


def given_children_since(store: Store, ids: list[str], since: float) -> set[str]:
    """The *ids* that a session outside *ids* started at or after *since* names as its parent: a
    continuation or subagent run that a plan made at *since* did not see (none when *since* is 0)."""
    if not since:
        return set()
    planned = json.dumps(ids)
    return {p for (p,) in store.conn.execute(
        "SELECT parent_session_id FROM sessions WHERE parent_session_id IN (SELECT value FROM json_each(?1)) "
        "AND id NOT IN (SELECT value FROM json_each(?1)) AND started_at >= ?2", (planned, since))}


def changed_since_plan(store: Store, planned: dict[str, float | None], planned_at: float, now: float, *,
                       pinned_ok: bool = False) -> set[str]:
    """Of the sessions a bulk delete planned (id -> its newest message time then), those it may no longer
    delete, read inside its write transaction: reopened, pinned, locked, written to, or given a child
    since *planned_at* (a subagent run started under it after the plan would be left behind with its
    parent gone). With *pinned_ok* (prune --include-pinned) a pin does not stop it. A session already
    gone is not among them: there is nothing left to do for it."""
    ids = list(planned)
    pinned = "COALESCE(pinned, 0)" if store.has_column("sessions", "pinned") else "0"
    busy = given_children_since(store, ids, planned_at) | locked_ids(store, now)
    return {sid for sid, ended, pin, last in store.conn.execute(
        f"SELECT id, ended_at, {pinned}, {NEWEST_MESSAGE_SQL} FROM sessions s "
        "WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),))
        if ended is None or (pin and not pinned_ok) or last != planned[sid] or sid in busy}


def pinned(store: Store, ids: Iterable[str]) -> list[str]:
    """The *ids* that are pinned now (none on a store without Hermes's ``pinned`` column), in the given order.
    Reads in the caller's transaction, so a check inside a write sees a pin set since the plan."""
    ids = list(ids)
    if not ids or not store.has_column("sessions", "pinned"):
        return []
    found = {r[0] for r in store.conn.execute(
        "SELECT id FROM sessions WHERE id IN (SELECT value FROM json_each(?)) AND COALESCE(pinned, 0) != 0",
        (json.dumps(ids),))}
    return [sid for sid in ids if sid in found]


# A session's compression lineage, as upstream's _LINEAGE_CTE_SQL: ancestors through compression-ended
# parents and every continuation after it. Bound twice: (id, id).
LINEAGE_CTE = """
WITH RECURSIVE
  ancestors(id) AS (
    SELECT ? UNION
    SELECT parent.id FROM ancestors a JOIN sessions child ON child.id = a.id
    JOIN sessions parent ON parent.id = child.parent_session_id WHERE parent.end_reason = 'compression'),
  descendants(id) AS (
    SELECT ? UNION
    SELECT child.id FROM descendants d JOIN sessions parent ON parent.id = d.id
    JOIN sessions child ON child.parent_session_id = parent.id WHERE parent.end_reason = 'compression'),
  lineage(id) AS (SELECT id FROM ancestors UNION SELECT id FROM descendants)
"""


def pinned_covering(store: Store, sid: str, ids: Iterable[str]) -> list[str]:
    """The pinned sessions among *ids* (the session *sid* and its delegate children) and in the compression
    lineage of each, which a pin covers whole (``pin`` sets it on every member, prune keeps a lineage with a
    pinned member): deleting the first half of a pinned conversation deletes a pinned conversation (hostile
    try 6, I2), whether the named session is that half or one of its delegate children is (hostile try 7, J4)."""
    ids = list(dict.fromkeys([sid, *ids]))
    covered = dict.fromkeys(ids)
    for member in ids:
        for (other,) in store.conn.execute(LINEAGE_CTE + "SELECT id FROM lineage ORDER BY id", (member, member)):
            covered.setdefault(other)
    return pinned(store, list(covered))


def pinned_refusal(named: str, pins: list[str], nothing: str) -> str:
    """The one wording of a family delete refused for its pins; *nothing*: what was left undone."""
    if pins == [named]:
        what = "it is"
    else:
        what = (f"{', '.join(pins)} {'is' if len(pins) == 1 else 'are'} in its family (the session and its "
                "delegate children go together; a pin keeps a compressed conversation whole) and")
    them = "it" if len(pins) == 1 else "them"
    return (f"refusing to delete {named}: {what} pinned (a pin means keep); unpin {them} (hermes-maint unpin "
            f"{' '.join(pins)}) or pass --include-pinned; {nothing}")
