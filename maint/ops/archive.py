"""archive: set the archived flag on matching conversations; nothing else changes.

A compression lineage is judged by its live tip and archived as a unit, so an
old segment of a conversation still in use never hides it on its own.
Pinned lineages are left alone (a pin means "keep visible"); open ones only
with ``include_open``. Each lineage is checked again inside the write transaction: one that became
pinned or open, or was written to, since planning is left alone and reported (``skipped_changed``).
A hand archive clears ``auto_archived`` on what it archives, so a
conversation the idle sweep had hidden stays hidden until it is un-archived by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from maint.store.catalog import NEWEST_MESSAGE_SQL, given_children_since
from maint.store import lineage
from maint.store.batching import pacer_for, run_batched
from maint.selection.filters import Filters
from maint.store.sqlutil import IdList, Paged, chunks, ph
from maint.store.connection import Store


@dataclass
class ArchivePlan:
    lineages: Paged[list[str]]  # session ids per lineage to archive, read from temp tables a page at a time
    sessions: int  # how many sessions the lineages hold
    skipped_open: int  # lineages that matched but are still open
    skipped_pinned: int
    include_open: bool = False
    planned_at: float = 0.0  # wall clock when planning began: a session started later is new

    @property
    def session_ids(self) -> IdList:
        return IdList(sid for ids in self.lineages for sid in ids)


def plan_archive(store: Store, filters: Filters, *, include_open: bool = False,
                 now: float | None = None) -> ArchivePlan:
    """Per compression chain whose tip matches: skipped when every segment is archived by hand already,
    held back when one is pinned, or open (unless *include_open*); else its segments not archived by
    hand go (one the idle sweep hid becomes a hand archive: it no longer comes back on resume).
    Lineages come least recently active first (ties: table order)."""
    planned_at = time.time()
    now = planned_at if now is None else now
    conn = store.conn
    with store.planning():
        lineage.build(store, now, filters)
        conn.execute("DROP TABLE IF EXISTS temp.maint_arch")
        conn.execute("""CREATE TEMP TABLE maint_arch AS
            SELECT c.key, c.first_rid,
                   CASE WHEN MIN(s.archived AND NOT s.auto_archived) = 1 THEN 'done' WHEN MAX(s.pinned) THEN 'pinned'
                        WHEN MAX(s.ended_at IS NULL) AND NOT :include_open THEN 'open' ELSE 'go' END AS verdict,
                   MAX(CASE WHEN NOT s.archived OR s.auto_archived THEN s.last_active END) AS active,
                   SUM(NOT s.archived OR s.auto_archived) AS n
            FROM maint_c c JOIN maint_s t ON t.id = c.tip AND t.matched JOIN maint_s s ON s.chain = c.key
            GROUP BY c.key""", {"include_open": int(include_open)})
        conn.execute("DROP TABLE IF EXISTS temp.maint_archive")
        conn.execute("""CREATE TEMP TABLE maint_archive AS
            SELECT ROW_NUMBER() OVER (ORDER BY active, first_rid) - 1 AS ord, key, n
            FROM maint_arch WHERE verdict = 'go'""")
        conn.execute("CREATE UNIQUE INDEX temp.maint_archive_ord ON maint_archive(ord)")
        skipped = dict(conn.execute("SELECT verdict, COUNT(*) FROM maint_arch GROUP BY verdict").fetchall())
        count, sessions = conn.execute("SELECT COUNT(*), COALESCE(SUM(n), 0) FROM maint_archive").fetchone()
    store.plan_generation += 1
    generation = store.plan_generation

    def load(start: int, stop: int) -> list[list[str]]:
        if store.plan_generation != generation:
            raise RuntimeError("this plan was replaced by a later one on the same store")
        out: dict[int, list[str]] = {}
        for ord_, sid in conn.execute(
                "SELECT a.ord, s.id FROM maint_archive a "
                "JOIN maint_s s ON s.chain = a.key AND (NOT s.archived OR s.auto_archived) "
                "WHERE a.ord >= ? AND a.ord < ? ORDER BY a.ord, s.started_at, s.id", (start, stop)):
            out.setdefault(ord_, []).append(sid)
        return [out[i] for i in sorted(out)]

    return ArchivePlan(lineages=Paged(count, load), sessions=sessions, skipped_open=skipped.get("open", 0),
                       skipped_pinned=skipped.get("pinned", 0), include_open=include_open, planned_at=planned_at)


@dataclass
class ArchiveResult:
    archived_ids: IdList
    skipped_changed: list[str]  # sessions of lineages pinned, reopened or written to since planning


def _changed(store: Store, ids: list[str], include_open: bool, planned_at: float = 0.0) -> set[str]:
    """Inside the write transaction: the *ids* now pinned, open (unless *include_open*), with another
    newest message than the plan saw (``temp.maint_s``, on this connection), or given a child session
    since *planned_at* (a compression continuation or subagent run the plan did not see)."""
    pinned = "COALESCE(s.pinned, 0)" if store.has_column("sessions", "pinned") else "0"
    out = given_children_since(store, ids, planned_at)
    for chunk in chunks(ids):
        out.update(r[0] for r in store.conn.execute(
            f"SELECT s.id FROM sessions s JOIN temp.maint_s p ON p.id = s.id WHERE s.id IN ({ph(chunk)}) AND "
            f"({pinned} OR (s.ended_at IS NULL AND NOT ?) OR {NEWEST_MESSAGE_SQL} IS NOT p.last_message_at)",
            [*chunk, int(include_open)]))
    return out


def execute_archive(store: Store, plan: ArchivePlan,
                    on_progress: Callable[[int], None] | None = None) -> ArchiveResult:
    """Archive the planned lineages, each re-checked inside the write transaction (see :func:`_changed`)."""
    done = IdList()
    skipped: list[str] = []

    # A hand archive never carries the idle sweep's provenance (Hermes's set_session_archived clears it).
    manual = (", auto_archived = 0", "(archived = 0 OR auto_archived <> 0)") \
        if store.has_column("sessions", "auto_archived") else ("", "archived = 0")

    def apply(batch: list[list[str]]) -> int:
        changed = _changed(store, [sid for lineage in batch for sid in lineage], plan.include_open, plan.planned_at)
        keep = [lineage for lineage in batch if changed.isdisjoint(lineage)]
        skipped.extend(sid for lineage in batch if not changed.isdisjoint(lineage) for sid in lineage)
        ids = [sid for lineage in keep for sid in lineage]
        for chunk in chunks(ids):
            store.conn.execute(f"UPDATE sessions SET archived = 1{manual[0]} WHERE {manual[1]} AND id IN ({ph(chunk)})",
                               chunk)
        done.extend(ids)
        return len(ids)

    run_batched(plan.lineages, len, apply, store.write, pacer_for(store), on_progress=on_progress)
    return ArchiveResult(archived_ids=done, skipped_changed=skipped)
