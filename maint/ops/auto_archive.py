"""The idle sweep (``sessions.auto_archive``): hide conversations nobody has touched for a while.

Follows upstream Hermes (``SessionDB.maybe_auto_archive``, ``archive_stale_sessions``,
``_auto_archive_lineage``): a compression lineage whose live tip has been idle for
``sessions.auto_archive_days`` (default 3) is archived as a whole, and the rows it hides get
``auto_archived = 1`` so that Hermes un-hides them when the conversation is resumed or continued by
compression. A row already archived keeps its provenance: a hand archive is never relabelled.

Never touched: lineages with a pinned segment, lineages with a turn or compression in progress,
lineages whose tip is already archived, and the hidden canonical Bot Chat (Bot Mode finds it by
title). Open sessions are archived too, as upstream does: idle means idle, ended or not.

Stores without the ``auto_archived`` column (before upstream's schema 31) are refused by
:func:`missing_column`: archiving there would hide conversations that Hermes could never bring back
by itself, and we never alter the schema.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from maint.store import lineage
from maint.store.batching import paced_writes
from maint.store import guard
from maint.store.catalog import NEWEST_MESSAGE_SQL
from maint.store.connection import Store
from maint.store.sqlutil import IdList, Paged, ph

MARKER_KEY = "last_auto_archive"  # Hermes's own key: one idle sweep per interval among all processes


def claim_idle_marker(store: Store, interval_s: float, now: float, force: bool) -> tuple[bool, float | None]:
    """Read-compare-write of Hermes's ``last_auto_archive`` in one write transaction, so among every
    process sharing the store one idle sweep runs per interval. Returns (claimed, previous)."""
    with store.write() as conn:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (MARKER_KEY,)).fetchone()
        try:
            previous = float(row[0]) if row and row[0] is not None else None
        except (TypeError, ValueError):
            previous = None  # a corrupt marker counts as no earlier run
        if previous is not None and not force and 0 <= now - previous < interval_s:
            return False, previous
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", (MARKER_KEY, str(now)))
        return True, previous


def missing_column(store: Store) -> str | None:
    """Why this store cannot be auto-archived, or None when it can."""
    if store.has_column("sessions", "auto_archived"):
        return None
    return (f"auto-archive needs the sessions.auto_archived column (Hermes schema 31 or later); this store is "
            f"schema {store.schema_version}, so nothing was archived (the schema is never altered)")


@dataclass
class IdleUnit:
    """One lineage: every member (re-checked), and the members this archive flips."""

    member_ids: list[str]
    flip_ids: list[str]
    marks: dict[str, tuple] = field(default_factory=dict)  # activity fingerprint, re-read in the transaction


@dataclass
class IdlePlan:
    units: Paged[IdleUnit]  # in key order, read from temp tables a page at a time
    idle_days: float
    skipped_pinned: int = 0
    skipped_busy: int = 0

    @property
    def session_ids(self) -> IdList:
        return IdList(sid for u in self.units for sid in u.flip_ids)


def _marks_sql(store: Store) -> str:
    """What a resume, a new message, a pin or an end would change: compared before each write."""
    last = "last_activity_at" if store.has_column("sessions", "last_activity_at") else "NULL"
    pinned = "COALESCE(pinned, 0)" if store.has_column("sessions", "pinned") else "0"
    return (f"SELECT id, ended_at, {pinned}, {last}, archived, "
            f"{NEWEST_MESSAGE_SQL} FROM sessions s")


def _marks(store: Store, ids: list[str]) -> dict[str, tuple]:
    return {sid: tuple(rest) for sid, *rest in store.conn.execute(f"{_marks_sql(store)} WHERE id IN ({ph(ids)})",
                                                                  ids)}


def plan_idle_archive(store: Store, idle_days: float, now: float | None = None) -> IdlePlan:
    """Per lineage: left out when its tip is archived already, it was active since the cutoff, or it is the
    hidden canonical Bot Chat; held back when pinned or busy; else every member is re-checked at write
    time and the members not archived yet are flipped. Selected in SQLite (:mod:`maint.store.lineage`),
    with each member's marks taken from the same snapshot."""
    now = time.time() if now is None else now
    cutoff = now - idle_days * 86400
    conn = store.conn
    with store.planning():
        lineage.build(store, now)
        conn.execute("DROP TABLE IF EXISTS temp.maint_idle")
        conn.execute("""CREATE TEMP TABLE maint_idle AS
            SELECT c.key, CASE WHEN MAX(s.pinned) THEN 'pinned' WHEN MAX(s.locked) THEN 'busy' ELSE 'go' END
                AS verdict
            FROM maint_c c JOIN maint_s t ON t.id = c.tip JOIN maint_s s ON s.chain = c.key
            WHERE NOT t.archived AND c.last_active < :cutoff AND NOT t.botchat
            GROUP BY c.key""", {"cutoff": cutoff})
        conn.execute("DROP TABLE IF EXISTS temp.maint_idle_units")
        conn.execute("""CREATE TEMP TABLE maint_idle_units AS
            SELECT ROW_NUMBER() OVER (ORDER BY key) - 1 AS ord, key FROM maint_idle WHERE verdict = 'go'""")
        conn.execute("CREATE UNIQUE INDEX temp.maint_idle_units_ord ON maint_idle_units(ord)")
        conn.execute("DROP TABLE IF EXISTS temp.maint_idle_marks")
        conn.execute(f"""CREATE TEMP TABLE maint_idle_marks AS SELECT m.* FROM ({_marks_sql(store)}) m
            WHERE m.id IN (SELECT s.id FROM maint_idle_units u JOIN maint_s s ON s.chain = u.key)""")
        conn.execute("CREATE UNIQUE INDEX temp.maint_idle_marks_id ON maint_idle_marks(id)")
        skipped = dict(conn.execute("SELECT verdict, COUNT(*) FROM maint_idle GROUP BY verdict").fetchall())
        count = skipped.get("go", 0)
    store.plan_generation += 1
    generation = store.plan_generation

    def load(start: int, stop: int) -> list[IdleUnit]:
        if store.plan_generation != generation:
            raise RuntimeError("this plan was replaced by a later one on the same store")
        units: dict[int, IdleUnit] = {}
        for ord_, sid, archived, *marks in conn.execute(
                "SELECT u.ord, s.id, s.archived, k.* FROM maint_idle_units u JOIN maint_s s ON s.chain = u.key "
                "JOIN maint_idle_marks k ON k.id = s.id WHERE u.ord >= ? AND u.ord < ? "
                "ORDER BY u.ord, s.started_at, s.id", (start, stop)):
            unit = units.setdefault(ord_, IdleUnit(member_ids=[], flip_ids=[]))
            unit.member_ids.append(sid)
            if not archived:
                unit.flip_ids.append(sid)
            unit.marks[sid] = tuple(marks[1:])
        return [units[i] for i in sorted(units)]

    return IdlePlan(units=Paged(count, load), idle_days=idle_days, skipped_pinned=skipped.get("pinned", 0),
                    skipped_busy=skipped.get("busy", 0))


def execute_idle_archive(store: Store, plan: IdlePlan,
                         on_progress: Callable[[int], None] | None = None) -> list[str]:
    """Archive each planned lineage that nothing touched since planning; returns the ids flipped."""
    done: list[str] = []

    def apply(batch: list[IdleUnit]) -> int:
        locked = guard.locked_ids(store, time.time())
        flipped = 0
        for unit in batch:
            if _marks(store, unit.member_ids) != unit.marks or locked.intersection(unit.member_ids):
                continue  # resumed, written to, pinned, ended or busy since planning: leave it
            ids = unit.flip_ids
            store.conn.execute(
                "UPDATE sessions SET archived = 1, "
                "auto_archived = CASE WHEN archived = 0 THEN 1 ELSE auto_archived END "
                f"WHERE archived = 0 AND id IN ({ph(ids)})", ids)
            done.extend(ids)
            flipped += len(ids)
        return flipped

    with paced_writes(store) as writes:
        writes.run_batches(plan.units, lambda u: len(u.member_ids), apply, store.write, on_progress=on_progress)
    return done
