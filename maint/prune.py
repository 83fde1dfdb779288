"""prune: delete ended sessions, whole lineages at a time.

What it may touch: rows of ``sessions``, ``messages`` (the FTS indexes follow
through Hermes's own triggers), ``session_model_usage`` and expired
``compression_locks`` of the sessions it deletes, ``system_prompts`` rows no
session references any more, and ``parent_session_id`` of surviving children
(branch/reset children are orphaned, as Hermes does, never deleted).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import apsw

from maint import lineage as lin
from maint.batching import Batcher, Yielder, run_batched
from maint.catalog import SessionInfo, load_sessions, locked_session_ids
from maint.filters import DEFAULT_PRUNE_DAYS, Filters, implicit_prune_filters
from maint.sqlutil import chunks, ph
from maint.store import Store


@dataclass
class Unit:
    """One atomic deletion: a compression chain plus its delegate subtree."""

    session_ids: list[str]
    messages: int = 0
    # fingerprint re-checked inside the write transaction
    last_message_at: dict[str, float | None] = field(default_factory=dict)


@dataclass
class PrunePlan:
    units: list[Unit]
    sessions: dict[str, SessionInfo]
    filters: Filters
    implicit_days: float | None
    held_back: dict[str, int]

    @property
    def session_ids(self) -> list[str]:
        return [sid for u in self.units for sid in u.session_ids]

    @property
    def messages(self) -> int:
        return sum(u.messages for u in self.units)


def _hold_reason(s: SessionInfo, include_archived: bool) -> str | None:
    if s.is_open:
        return "open"
    if s.pinned:
        return "pinned"
    if s.locked:
        return "in_progress"
    if s.archived and not include_archived:
        return "archived"
    return None


def plan_prune(store: Store, filters: Filters | None, *, include_archived: bool = False,
               now: float | None = None, keep: frozenset[str] = frozenset()) -> PrunePlan:
    """Choose what goes. ``filters`` empty/None = the bare rule: inactive >= 90 days."""
    now = time.time() if now is None else now
    implicit = None
    if filters is None or filters.is_empty:
        filters, implicit = implicit_prune_filters(now), DEFAULT_PRUNE_DAYS
    with store.snapshot():
        sessions = load_sessions(store, now)
        tree = lin.build(sessions)
        held: dict[str, int] = {}
        chosen: list[str] = []  # chain keys that head a unit

        def head_ok(key: str) -> bool:
            chain = tree.chains[key]
            matched = [filters.matches(sessions[s]) for s in chain.ids]
            if not any(matched):
                return False
            if not all(matched):
                held["lineage_live"] = held.get("lineage_live", 0) + 1
                return False
            for sid in chain.ids:
                reason = "just_reaped" if sid in keep else _hold_reason(sessions[sid], include_archived)
                if reason:
                    held[reason] = held.get(reason, 0) + 1
                    return False
            return True

        def subtree_safe(key: str) -> bool:
            for k in tree.subtree(key)[1:]:
                for sid in tree.chains[k].ids:
                    if sid in keep or _hold_reason(sessions[sid], include_archived=True):
                        held["delegate_child_busy"] = held.get("delegate_child_busy", 0) + 1
                        return False
            return True

        stack = [k for k, c in tree.chains.items() if c.delegate_parent is None]
        while stack:
            key = stack.pop()
            if head_ok(key) and subtree_safe(key):
                chosen.append(key)
            else:
                stack.extend(tree.chains[key].children)
        units = [Unit(session_ids=tree.subtree_session_ids(k)) for k in chosen]
        counts = message_counts(store, [sid for u in units for sid in u.session_ids])
        for u in units:
            u.messages = sum(counts.get(sid, 0) for sid in u.session_ids)
            u.last_message_at = {sid: sessions[sid].last_message_at for sid in u.session_ids}
    units.sort(key=lambda u: min(sessions[s].last_active for s in u.session_ids))
    return PrunePlan(units=units, sessions=sessions, filters=filters, implicit_days=implicit, held_back=held)


def message_counts(store: Store, ids: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for chunk in chunks(ids):
        for sid, n in store.conn.execute(
                f"SELECT session_id, COUNT(*) FROM messages WHERE session_id IN ({ph(chunk)}) GROUP BY session_id",
                chunk):
            out[sid] = n
    return out


def stored_bytes(store: Store, ids: list[str]) -> int:
    """Bytes of message text the deletion removes (content, tool calls, reasoning)."""
    cols = [c for c in ("content", "tool_calls", "reasoning", "reasoning_content", "api_content")
            if store.has_column("messages", c)]
    expr = " + ".join(f"COALESCE(LENGTH(CAST({c} AS BLOB)), 0)" for c in cols) or "0"
    total = 0
    for chunk in chunks(ids):
        total += store.scalar(f"SELECT COALESCE(SUM({expr}), 0) FROM messages WHERE session_id IN ({ph(chunk)})",
                              chunk) or 0
    return total


def _still_safe(store: Store, unit: Unit, now: float) -> bool:
    """Read-check inside the write transaction: nothing reopened, pinned, locked or written to."""
    ids = unit.session_ids
    pinned = "COALESCE(pinned, 0)" if store.has_column("sessions", "pinned") else "0"
    rows = {}
    for chunk in chunks(ids):
        for sid, ended, pin, last in store.conn.execute(
                f"SELECT id, ended_at, {pinned}, (SELECT MAX(timestamp) FROM messages m WHERE m.session_id = s.id) "
                f"FROM sessions s WHERE id IN ({ph(chunk)})", chunk):
            rows[sid] = (ended, pin, last)
    locked = locked_session_ids(store, now)
    for sid in ids:
        if sid not in rows:
            continue  # already gone: nothing to do for it
        ended, pin, last = rows[sid]
        if ended is None or pin or sid in locked or last != unit.last_message_at.get(sid):
            return False
    return True


def delete_sessions(store: Store, conn, ids: list[str]) -> None:
    """The deletion itself, inside the caller's transaction."""
    prompt_refs: set[str] = set()
    ref_cols = [c for c in ("system_prompt_hash", "tool_names") if store.has_column("sessions", c)]
    has_prompts = store.has_table("system_prompts") and bool(ref_cols)
    for chunk in chunks(ids):
        marks = ph(chunk)
        if has_prompts:
            for row in conn.execute(f"SELECT {', '.join(ref_cols)} FROM sessions WHERE id IN ({marks})", chunk):
                prompt_refs.update(v for v in row if isinstance(v, str) and v)
        conn.execute(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN ({marks})", chunk)
        conn.execute(f"DELETE FROM messages WHERE session_id IN ({marks})", chunk)
        if store.has_table("session_model_usage"):
            conn.execute(f"DELETE FROM session_model_usage WHERE session_id IN ({marks})", chunk)
        if store.has_table("compression_locks"):
            conn.execute(f"DELETE FROM compression_locks WHERE session_id IN ({marks})", chunk)
        conn.execute(f"DELETE FROM sessions WHERE id IN ({marks})", chunk)
    if has_prompts and prompt_refs:
        refs = sorted(prompt_refs)
        still = " OR ".join(f"s.{c} = system_prompts.hash" for c in ref_cols)
        for chunk in chunks(refs):
            conn.execute(f"DELETE FROM system_prompts WHERE hash IN ({ph(chunk)}) "
                         f"AND NOT EXISTS (SELECT 1 FROM sessions s WHERE {still})", chunk)


@dataclass
class PruneResult:
    deleted_ids: list[str]
    messages: int
    skipped_changed: list[str]
    transactions: int
    longest_lock_s: float


def checkpoint_passive(store: Store) -> None:
    with contextlib.suppress(apsw.Error):  # busy or not in WAL: the next one will do
        store.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def execute_prune(store: Store, plan: PrunePlan, *, batcher: Batcher | None = None,
                  on_progress: Callable[[int], None] | None = None) -> PruneResult:
    deleted: list[str] = []
    changed: list[str] = []
    msgs = [0]
    before = store.write_stats.transactions

    def apply(batch: list[Unit]) -> int:
        now = time.time()
        with store.write() as conn:
            ok = []
            for unit in batch:
                if _still_safe(store, unit, now):
                    ok.append(unit)
                else:
                    changed.extend(unit.session_ids)
            ids = [sid for u in ok for sid in u.session_ids]
            if ids:
                delete_sessions(store, conn, ids)
        deleted.extend(ids)
        msgs[0] += sum(u.messages for u in ok)
        # Copy our pages out of the WAL ourselves, outside the write lock, so a Hermes writer's
        # commit never inherits that work as its auto-checkpoint.
        checkpoint_passive(store)
        return len(ids)

    run_batched(plan.units, lambda u: u.messages + len(u.session_ids), apply,
                batcher=batcher, yielder=Yielder(store.data_version), on_progress=on_progress)
    return PruneResult(deleted_ids=deleted, messages=msgs[0], skipped_changed=changed,
                       transactions=store.write_stats.transactions - before,
                       longest_lock_s=store.write_stats.longest_hold_s)
