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

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from maint.errors import MaintError, UsageError
from maint.flow import Operator, target_config
from maint.ops.auto_archive import execute_idle_archive, missing_column, plan_idle_archive
from maint.store.catalog import NEWEST_MESSAGE_SQL
from maint.store.guard import given_children_since
from maint.store import lineage
from maint.store.batching import paced_writes
from maint.selection.filters import Filters
from maint.store.sqlutil import IdList, Paged, chunks, ph
from maint.store.connection import Store, open_store
from maint.store.text_check import unreadable_id_sql

if TYPE_CHECKING:
    from maint.config import Config
    from maint.store.targets import StoreTarget


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
        conn.execute(f"""CREATE TEMP TABLE maint_arch AS
            SELECT c.key, c.first_rid,
                   CASE WHEN MAX({unreadable_id_sql('s')}) THEN 'id_not_utf8'
                        WHEN MIN(s.archived AND NOT s.auto_archived) = 1 THEN 'done' WHEN MAX(s.pinned) THEN 'pinned'
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

    with paced_writes(store) as writes:
        writes.run_batches(plan.lineages, len, apply, store.write, on_progress=on_progress)
    return ArchiveResult(archived_ids=done, skipped_changed=skipped)


@dataclass(frozen=True)
class ArchiveRequest:
    """``hermes-maint archive``'s options, refused when they would select everything or contradict --idle."""

    filters: Filters = field(default_factory=Filters)
    include_open: bool = False
    idle: bool = False  # the idle sweep now: its own selection, from sessions.auto_archive_days
    dry_run: bool = False

    def __post_init__(self) -> None:
        if self.idle:
            if not self.filters.is_empty or self.include_open:
                raise UsageError("--idle is a selection of its own (idle for sessions.auto_archive_days, open ones "
                                 "included); drop the filters and --include-open")
        elif self.filters.is_empty:
            raise UsageError("archive needs at least one filter (refusing to archive the whole history); "
                             "e.g. --newer-than 5h or --title 'dry run'")


def archive_store(target: StoreTarget, req: ArchiveRequest, op: Operator) -> dict[str, Any]:
    """Plan, ask, set the archived flags lineage by lineage: the report of one store's archive."""
    with open_store(target.path, readonly=req.dry_run) as store:  # a preview works on a read-only store
        if req.idle:
            return _archive_idle(store, target, idle_days(target_config(target)), req.dry_run, op)
        plan = plan_archive(store, req.filters, include_open=req.include_open)
        ids = plan.session_ids
        report = {"store": str(target.path), "dry_run": req.dry_run, "matched": len(ids), "session_ids": ids,
                  "lineages": len(plan.lineages), "skipped_open": plan.skipped_open,
                  "skipped_pinned": plan.skipped_pinned, "skipped_busy": 0, "include_open": req.include_open,
                  "idle": False, "idle_days": None, "skipped_changed": []}
        if req.dry_run or not ids:
            return report
        op.confirm(f"Archive {len(ids)} sessions?", [
            f"{len(ids)} sessions in {len(plan.lineages)} conversations will be archived "
            f"({plan.skipped_open} skipped as open, {plan.skipped_pinned} as pinned)"])
        with op.progress(len(plan.lineages), "Archiving") as tick:
            result = execute_archive(store, plan, on_progress=tick)
        report.update(session_ids=result.archived_ids, matched=len(result.archived_ids),
                      skipped_changed=result.skipped_changed)
        return report


def idle_days(cfg: Config) -> float:
    """sessions.auto_archive_days from the store's own config.yaml (default 3), the idle sweep's threshold."""
    days = cfg.session("auto_archive_days")
    if isinstance(days, bool) or not isinstance(days, (int, float)) or not math.isfinite(days) or days < 0:
        raise UsageError(f"sessions.auto_archive_days: bad value {days!r} in config.yaml "
                         "(expected a number of days >= 0, e.g. 3)")
    return float(days)


def _archive_idle(store: Store, target: StoreTarget, days: float, dry_run: bool, op: Operator) -> dict[str, Any]:
    reason = missing_column(store)
    if reason:
        raise MaintError(f"{target.path}: {reason}")
    plan = plan_idle_archive(store, days)
    ids = plan.session_ids
    report = {"store": str(target.path), "dry_run": dry_run, "matched": len(ids), "session_ids": ids,
              "lineages": len(plan.units), "skipped_open": 0, "skipped_pinned": plan.skipped_pinned,
              "skipped_busy": plan.skipped_busy, "include_open": True, "idle": True, "idle_days": days,
              "skipped_changed": []}
    if dry_run or not ids:
        return report
    op.confirm(f"Archive {len(ids)} idle sessions?", [
        f"{len(ids)} sessions in {len(plan.units)} conversations idle for {days:g} days or more will be "
        f"archived until resumed ({plan.skipped_pinned} pinned and {plan.skipped_busy} busy left alone)"])
    with op.progress(len(plan.units), "Archiving") as tick:
        done = execute_idle_archive(store, plan, on_progress=tick)
    flipped = set(done)
    report.update(session_ids=done, matched=len(done), skipped_changed=[sid for sid in ids if sid not in flipped])
    return report
