"""archive: set the archived flag on matching conversations; nothing else changes.

A compression lineage is judged by its live tip and archived as a unit, so an
old segment of a conversation still in use never hides it on its own.
Pinned lineages are left alone (a pin means "keep visible"); open ones only
with ``include_open``. A hand archive clears ``auto_archived`` on what it archives, so a
conversation the idle sweep had hidden stays hidden until it is un-archived by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from maint.store import lineage as lin
from maint.store.batching import pacer_for, run_batched
from maint.store.catalog import SessionInfo, load_sessions
from maint.selection.filters import Filters
from maint.store.sqlutil import chunks, ph
from maint.store.connection import Store


@dataclass
class ArchivePlan:
    lineages: list[list[str]]  # session ids per lineage to archive
    sessions: dict[str, SessionInfo]
    skipped_open: int  # lineages that matched but are still open
    skipped_pinned: int

    @property
    def session_ids(self) -> list[str]:
        return [sid for ids in self.lineages for sid in ids]


def plan_archive(store: Store, filters: Filters, *, include_open: bool = False,
                 now: float | None = None) -> ArchivePlan:
    now = time.time() if now is None else now
    with store.snapshot():
        sessions = load_sessions(store, now)
    tree = lin.build(sessions)
    lineages, skipped_open, skipped_pinned = [], 0, 0
    for chain in tree.chains.values():
        tip = sessions[chain.tip]
        if not filters.matches(tip):
            continue
        members = [sessions[s] for s in chain.ids]
        if all(m.archived and not m.auto_archived for m in members):
            continue  # already archived by hand: re-running is a no-op
        if any(m.pinned for m in members):
            skipped_pinned += 1
            continue
        if any(m.is_open for m in members) and not include_open:
            skipped_open += 1
            continue
        # A lineage the idle sweep hid becomes a hand archive: it no longer comes back on resume.
        lineages.append([m.id for m in members if not m.archived or m.auto_archived])
    lineages.sort(key=lambda ids: max(sessions[s].last_active for s in ids))
    return ArchivePlan(lineages=lineages, sessions=sessions, skipped_open=skipped_open,
                       skipped_pinned=skipped_pinned)


def execute_archive(store: Store, plan: ArchivePlan,
                    on_progress: Callable[[int], None] | None = None) -> list[str]:
    done: list[str] = []

    # A hand archive never carries the idle sweep's provenance (Hermes's set_session_archived clears it).
    manual = (", auto_archived = 0", "(archived = 0 OR auto_archived <> 0)") \
        if store.has_column("sessions", "auto_archived") else ("", "archived = 0")

    def apply(batch: list[list[str]]) -> int:
        ids = [sid for lineage in batch for sid in lineage]
        for chunk in chunks(ids):
            store.conn.execute(f"UPDATE sessions SET archived = 1{manual[0]} WHERE {manual[1]} AND id IN ({ph(chunk)})",
                               chunk)
        done.extend(ids)
        return len(ids)

    run_batched(plan.lineages, len, apply, store.write, pacer_for(store), on_progress=on_progress)
    return done
