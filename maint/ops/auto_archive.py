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

from maint.store import lineage as lin
from maint.store.batching import pacer_for, run_batched
from maint.store.catalog import CANONICAL_BOT_CHAT_TITLE, load_sessions, locked_session_ids
from maint.store.connection import Store
from maint.store.sqlutil import ph

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
    units: list[IdleUnit]
    idle_days: float
    skipped_pinned: int = 0
    skipped_busy: int = 0

    @property
    def session_ids(self) -> list[str]:
        return [sid for u in self.units for sid in u.flip_ids]


def _marks(store: Store, ids: list[str]) -> dict[str, tuple]:
    """What a resume, a new message, a pin or an end would change: compared before each write."""
    last = "last_activity_at" if store.has_column("sessions", "last_activity_at") else "NULL"
    pinned = "COALESCE(pinned, 0)" if store.has_column("sessions", "pinned") else "0"
    out = {}
    for sid, *rest in store.conn.execute(
            f"SELECT id, ended_at, {pinned}, {last}, archived, "
            f"(SELECT MAX(timestamp) FROM messages m WHERE m.session_id = s.id) "
            f"FROM sessions s WHERE id IN ({ph(ids)})", ids):
        out[sid] = tuple(rest)
    return out


def plan_idle_archive(store: Store, idle_days: float, now: float | None = None) -> IdlePlan:
    now = time.time() if now is None else now
    cutoff = now - idle_days * 86400
    plan = IdlePlan(units=[], idle_days=idle_days)
    with store.snapshot():
        sessions = load_sessions(store, now)
        tree = lin.build(sessions)
        for chain in tree.chains.values():
            tip = sessions[chain.tip]
            members = [sessions[s] for s in chain.ids]
            if tip.archived or max(m.last_active for m in members) >= cutoff:
                continue
            if tip.hidden and tip.title == CANONICAL_BOT_CHAT_TITLE:
                continue
            if any(m.pinned for m in members):
                plan.skipped_pinned += 1
                continue
            if any(m.locked for m in members):
                plan.skipped_busy += 1
                continue
            unit = IdleUnit(member_ids=list(chain.ids), flip_ids=[m.id for m in members if not m.archived])
            unit.marks = _marks(store, unit.member_ids)
            plan.units.append(unit)
    plan.units.sort(key=lambda u: u.member_ids[0])
    return plan


def execute_idle_archive(store: Store, plan: IdlePlan,
                         on_progress: Callable[[int], None] | None = None) -> list[str]:
    """Archive each planned lineage that nothing touched since planning; returns the ids flipped."""
    done: list[str] = []

    def apply(batch: list[IdleUnit]) -> int:
        locked = locked_session_ids(store, time.time())
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

    run_batched(plan.units, lambda u: len(u.member_ids), apply, store.write, pacer_for(store),
                on_progress=on_progress)
    return done
