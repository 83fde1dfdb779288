"""The planner hermes-maint had before selection moved into SQL, kept as the tests' reference.

It loads every session into a Python record and builds the lineage in Python; its memory grows
with the store, which is why the product no longer uses it. The differential tests
(``tests/test_planner_differential.py``) run it beside the SQL planner on generated stores and
require the same selections and held-back reasons. The code is the product's code as of
a6a5615 (``maint/store/catalog.py``, ``maint/store/lineage.py``, ``plan_prune``, ``plan_archive``,
``list_conversations``, ``plan_idle_archive``, ``pinned_sessions``, ``select_sessions``, ``family``,
``reap_candidates``), trimmed to what decides a selection.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from maint.selection.filters import DEFAULT_PRUNE_DAYS, Filters, implicit_prune_filters
from maint.ops.listing import in_workspace, workspace_key
from maint.store.catalog import CANONICAL_BOT_CHAT_TITLE, ORPHAN_REAP_REASON, SessionInfo
from maint.store.guard import ACTIVE_S, locked_ids
from maint.store.connection import Store

COMPRESSION, DELEGATE, BRANCH, RESET, OTHER, ROOT = "compression", "delegate", "branch", "reset", "other", "root"
RESET_END_REASONS = frozenset(
    {"session_reset", "session_switch", "idle", "daily", "suspended", "resume_pending_expired"})
STATEFUL_SOURCES = frozenset({"cli", "cron", "kanban", "acp", "api_server", "subagent", "tool", "recovered"})


def _marker(col: str, key: str) -> str:
    return f"json_extract(CASE WHEN json_valid({col}) THEN {col} ELSE '{{}}' END, '$.{key}')"


def _opt(store: Store, col: str, default: str = "NULL") -> str:
    return f"s.{col}" if store.has_column("sessions", col) else default


def load_sessions(store: Store, now: float | None = None) -> dict[str, SessionInfo]:
    now = time.time() if now is None else now
    mc = "s.model_config" if store.has_column("sessions", "model_config") else "NULL"
    sql = f"""
        SELECT s.id, s.source, s.started_at, s.ended_at, {_opt(store, 'end_reason')} AS end_reason,
               s.parent_session_id AS parent_id,
               (SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id
                AND typeof(m.timestamp) IN ('integer', 'real')) AS last_message_at,
               {_opt(store, 'last_activity_at')} AS last_activity_at,
               {_opt(store, 'user_id')} AS user_id, {_opt(store, 'chat_id')} AS chat_id,
               {_opt(store, 'chat_type')} AS chat_type, {_opt(store, 'session_key')} AS session_key,
               {_opt(store, 'model')} AS model, {_opt(store, 'title')} AS title, {_opt(store, 'cwd')} AS cwd,
               {_opt(store, 'git_branch')} AS git_branch, {_opt(store, 'billing_provider')} AS billing_provider,
               COALESCE({_opt(store, 'message_count')}, 0) AS message_count,
               COALESCE({_opt(store, 'tool_call_count')}, 0) AS tool_call_count,
               COALESCE({_opt(store, 'input_tokens')}, 0) + COALESCE({_opt(store, 'output_tokens')}, 0) AS tokens,
               COALESCE({_opt(store, 'actual_cost_usd')}, {_opt(store, 'estimated_cost_usd')}, 0) AS cost,
               COALESCE({_opt(store, 'archived', '0')}, 0) AS archived,
               COALESCE({_opt(store, 'auto_archived', '0')}, 0) AS auto_archived,
               {_opt(store, 'git_repo_root')} AS git_repo_root,
               COALESCE({_opt(store, 'pinned', '0')}, 0) AS pinned,
               COALESCE({_opt(store, 'hidden', '0')}, 0) AS hidden,
               {_marker(mc, '_branched_from')} AS branched_from,
               {_marker(mc, '_delegate_from')} AS delegate_from,
               {_marker(mc, '_reset_from')} AS reset_from,
               {_opt(store, 'system_prompt_hash')} AS system_prompt_hash,
               {_opt(store, 'tool_names')} AS tool_names
        FROM sessions s
    """
    out: dict[str, SessionInfo] = {}
    for row in store.iter_rows(sql):
        candidates = [v for v in (row["last_activity_at"], row["last_message_at"]) if isinstance(v, (int, float))]
        started = row["started_at"] if isinstance(row["started_at"], (int, float)) else now
        row["last_active"] = max(candidates) if candidates else started
        if row["end_reason"] == ORPHAN_REAP_REASON and isinstance(row["ended_at"], (int, float)):
            row["last_active"] = max(row["last_active"], row["ended_at"])
        row.pop("last_activity_at")
        for flag in ("archived", "auto_archived", "pinned", "hidden"):
            row[flag] = bool(row[flag])
        for marker in ("branched_from", "delegate_from", "reset_from"):
            if row[marker] is not None:
                row[marker] = str(row[marker])
        out[row["id"]] = SessionInfo(**row)
    for sid in locked_ids(store, now):
        if sid in out:
            out[sid].locked = True
    return out


def classify(s: SessionInfo, sessions: dict[str, SessionInfo]) -> str:
    parent = sessions.get(s.parent_id) if s.parent_id else None
    if parent is None:
        if s.delegate_from and s.delegate_from in sessions and s.delegate_from != s.id:
            return DELEGATE
        return ROOT
    forks_parent = parent.id in (s.branched_from, s.delegate_from, s.reset_from)
    if parent.end_reason == "compression" and not forks_parent and s.source != "tool":
        return COMPRESSION
    if s.delegate_from:
        return DELEGATE
    if s.branched_from or (
        parent.end_reason == "branched" and parent.ended_at is not None and s.started_at >= parent.ended_at
    ):
        return BRANCH
    if s.reset_from or (
        parent.end_reason in RESET_END_REASONS and s.session_key and s.session_key == parent.session_key
    ):
        return RESET
    return OTHER


@dataclass
class Chain:
    ids: list[str]
    tip: str
    delegate_parent: str | None = None
    children: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.ids[0]


@dataclass
class Lineage:
    sessions: dict[str, SessionInfo]
    kind: dict[str, str]
    chain_of: dict[str, str]
    chains: dict[str, Chain]

    def subtree(self, key: str) -> list[str]:
        out, stack, seen = [], [key], set()
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            out.append(k)
            stack.extend(self.chains[k].children)
        return out

    def subtree_session_ids(self, key: str) -> list[str]:
        return [sid for k in self.subtree(key) for sid in self.chains[k].ids]


def _pick_tip(ids: Iterable[str], sessions: dict[str, SessionInfo], children: dict[str, list[str]]) -> str:
    ids = set(ids)
    roots = [i for i in ids if not any(i in children.get(p, []) for p in ids)]
    current = min(roots or ids, key=lambda i: (sessions[i].started_at, i))
    seen = {current}
    while True:
        nxt = [c for c in children.get(current, []) if c in ids and c not in seen]
        if not nxt:
            return current

        def rank(c: str):
            s = sessions[c]
            state = 0 if s.end_reason == "compression" else 1 if s.ended_at is None else 2
            return (state, -s.last_active, -s.started_at, c)

        current = min(nxt, key=rank)
        seen.add(current)


def build(sessions: dict[str, SessionInfo]) -> Lineage:
    kind = {sid: classify(s, sessions) for sid, s in sessions.items()}
    parent_of: dict[str, str] = {sid: sid for sid in sessions}

    def find(x: str) -> str:
        while parent_of[x] != x:
            parent_of[x] = parent_of[parent_of[x]]
            x = parent_of[x]
        return x

    comp_children: dict[str, list[str]] = {}
    for sid, k in kind.items():
        if k == COMPRESSION:
            p = sessions[sid].parent_id
            comp_children.setdefault(p, []).append(sid)
            a, b = find(sid), find(p)
            if a != b:
                parent_of[a] = b
    groups: dict[str, list[str]] = {}
    for sid in sessions:
        groups.setdefault(find(sid), []).append(sid)
    chains: dict[str, Chain] = {}
    chain_of: dict[str, str] = {}
    for members in groups.values():
        members.sort(key=lambda i: (sessions[i].started_at, i))
        chain = Chain(ids=members, tip=_pick_tip(members, sessions, comp_children))
        chains[chain.key] = chain
        for sid in members:
            chain_of[sid] = chain.key
    for key, chain in chains.items():
        for sid in chain.ids:
            if kind[sid] != DELEGATE:
                continue
            s = sessions[sid]
            target = s.parent_id if s.parent_id in sessions else s.delegate_from
            if target in chain_of and chain_of[target] != key:
                chain.delegate_parent = chain_of[target]
                break
    for key, chain in chains.items():
        seen = {key}
        cur = chain.delegate_parent
        while cur is not None:
            if cur in seen:
                chain.delegate_parent = None
                break
            seen.add(cur)
            cur = chains[cur].delegate_parent
    for key, chain in chains.items():
        if chain.delegate_parent:
            chains[chain.delegate_parent].children.append(key)
    return Lineage(sessions=sessions, kind=kind, chain_of=chain_of, chains=chains)


def _hold_reason(s: SessionInfo, include_archived: bool, include_pinned: bool = False) -> str | None:
    if s.is_open:
        return "open"
    if s.pinned and not include_pinned:
        return "pinned"
    if s.locked:
        return "in_progress"
    if s.archived and not include_archived:
        return "archived"
    return None


def plan_prune(store: Store, filters: Filters | None, *, include_archived: bool = False,
               include_pinned: bool = False, now: float | None = None,
               keep: frozenset[str] = frozenset()) -> dict:
    """{"units": [[ids...]...] (each unit's ids in the old order), "held_back", "implicit_days", "sessions"}.

    Upstream's family rule: every compression chain is judged on its own; delegate children are never
    taken with their parent (they are orphaned when it goes).
    """
    now = time.time() if now is None else now
    implicit = None
    if filters is None or filters.is_empty:
        filters, implicit = implicit_prune_filters(now), DEFAULT_PRUNE_DAYS
    with store.snapshot():
        sessions = load_sessions(store, now)
    tree = build(sessions)
    held: dict[str, int] = {}
    units: list[list[str]] = []
    for chain in tree.chains.values():
        matched = [filters.matches(sessions[s]) for s in chain.ids]
        if not any(matched):
            continue
        if not all(matched):
            held["lineage_live"] = held.get("lineage_live", 0) + 1
            continue
        reason = next((r for r in ("just_reaped" if sid in keep else
                                   _hold_reason(sessions[sid], include_archived, include_pinned)
                                   for sid in chain.ids) if r), None)
        if reason:
            held[reason] = held.get(reason, 0) + 1
            continue
        units.append(list(chain.ids))
    return {"units": units, "held_back": held, "implicit_days": implicit, "sessions": sessions}


def plan_archive(store: Store, filters: Filters, *, include_open: bool = False, now: float | None = None) -> dict:
    now = time.time() if now is None else now
    with store.snapshot():
        sessions = load_sessions(store, now)
    tree = build(sessions)
    lineages, skipped_open, skipped_pinned = [], 0, 0
    for chain in tree.chains.values():
        tip = sessions[chain.tip]
        if not filters.matches(tip):
            continue
        members = [sessions[s] for s in chain.ids]
        if all(m.archived and not m.auto_archived for m in members):
            continue
        if any(m.pinned for m in members):
            skipped_pinned += 1
            continue
        if any(m.is_open for m in members) and not include_open:
            skipped_open += 1
            continue
        lineages.append([m.id for m in members if not m.archived or m.auto_archived])
    lineages.sort(key=lambda ids: max(sessions[s].last_active for s in ids))
    return {"lineages": lineages, "skipped_open": skipped_open, "skipped_pinned": skipped_pinned}


def list_conversations(store: Store, *, source: str | None = None, limit: int = 20, workspace: str | None = None,
                       now: float | None = None, sort: str = "last-active") -> tuple[list[dict], int, int]:
    """Rows without the preview (the preview query did not change). The order by start (newest
    first, ties by the first session's id) was added beside the order by activity this planner had."""
    now = time.time() if now is None else now
    with store.snapshot():
        sessions = load_sessions(store, now)
    tree = build(sessions)
    rows = []
    for chain in tree.chains.values():
        root = sessions[chain.ids[0]]
        members = [sessions[s] for s in chain.ids]
        pinned = any(m.pinned for m in members)
        always = pinned and not any(m.hidden and m.title == CANONICAL_BOT_CHAT_TITLE for m in members)
        out_of_sight = tree.kind[root.id] == DELEGATE or any(m.archived or m.hidden for m in members)
        if out_of_sight and not always:
            continue
        if source is not None and root.source != source:
            continue
        tip = sessions[chain.tip]
        key = workspace_key(tip) or workspace_key(root)
        if workspace is not None and not in_workspace(key, workspace):
            continue
        rows.append({"id": tip.id, "root_id": root.id, "title": tip.title or root.title, "source": root.source,
                     "last_active": max(m.last_active for m in members), "started_at": root.started_at,
                     "open": tip.is_open, "segments": len(chain.ids), "pinned": pinned,
                     "archived": any(m.archived for m in members), "workspace": key})
    if sort == "started":
        rows.sort(key=lambda r: (-r["started_at"], r["root_id"]))
    else:
        rows.sort(key=lambda r: (-r["last_active"], r["id"]))
    total = len(rows)
    pinned_past = [r for r in rows[limit:] if r["pinned"]] if limit else []
    shown = rows if not limit else rows[:limit] + pinned_past[:limit]  # up to a page of pins past the limit
    return shown, total, len(pinned_past) - len(shown[limit:]) if limit else 0


def plan_idle_archive(store: Store, idle_days: float, now: float | None = None) -> dict:
    """{"units": [(member ids, ids flipped)...] in key order, "skipped_pinned", "skipped_busy"}."""
    now = time.time() if now is None else now
    cutoff = now - idle_days * 86400
    units, skipped_pinned, skipped_busy = [], 0, 0
    with store.snapshot():
        sessions = load_sessions(store, now)
    tree = build(sessions)
    for chain in tree.chains.values():
        tip = sessions[chain.tip]
        members = [sessions[s] for s in chain.ids]
        if tip.archived or max(m.last_active for m in members) >= cutoff:
            continue
        if tip.hidden and tip.title == CANONICAL_BOT_CHAT_TITLE:
            continue
        if any(m.pinned for m in members):
            skipped_pinned += 1
            continue
        if any(m.locked for m in members):
            skipped_busy += 1
            continue
        units.append((list(chain.ids), [m.id for m in members if not m.archived]))
    units.sort(key=lambda u: u[0][0])
    return {"units": units, "skipped_pinned": skipped_pinned, "skipped_busy": skipped_busy}


def pinned_sessions(store: Store, now: float | None = None) -> list[dict]:
    with store.snapshot():
        sessions = load_sessions(store, now)
    tree = build(sessions)
    out = []
    for chain in tree.chains.values():
        members = [sessions[s] for s in chain.ids]
        if not any(m.pinned for m in members):
            continue
        tip, root = sessions[chain.tip], members[0]
        out.append({"id": tip.id, "title": tip.title or root.title, "source": root.source,
                    "last_active": max(m.last_active for m in members), "message_count": tip.message_count,
                    "archived": any(m.archived for m in members),
                    "session_ids": sorted(m.id for m in members if m.pinned)})
    return sorted(out, key=lambda r: r["id"])


def select_sessions(store: Store, filters: Filters, now: float | None = None) -> list[str]:
    """Export's bulk selection: ended sessions matching the filters (everything without one)."""
    with store.snapshot():
        sessions = load_sessions(store, now)
    chosen = list(sessions.values()) if filters.is_empty else \
        [s for s in sessions.values() if not s.is_open and filters.matches(s)]
    return [s.id for s in sorted(chosen, key=lambda s: (s.started_at, s.id))]


def latest_session(store: Store, now: float | None = None) -> str | None:
    with store.snapshot():
        sessions = load_sessions(store, now)
    return max(sessions.values(), key=lambda s: (s.last_active, s.started_at, s.id)).id if sessions else None


def logical_groups(store: Store, chosen: list[str], now: float | None = None) -> list[list[str]]:
    with store.snapshot():
        tree = build(load_sessions(store, now))
    groups, seen = [], set()
    for sid in chosen:
        key = tree.chain_of[sid]
        if key not in seen:
            seen.add(key)
            groups.append(tree.chains[key].ids)
    return groups


def family(store: Store, session_id: str) -> list[str]:
    sessions = load_sessions(store)
    kinds = {sid: classify(s, sessions) for sid, s in sessions.items()}
    out, frontier = [session_id], [session_id]
    while frontier:
        current = set(frontier)
        frontier = [sid for sid, s in sessions.items() if sid not in out and kinds[sid] == DELEGATE
                    and (s.parent_id in current or s.delegate_from in current)]
        out.extend(sorted(frontier))
    return out


def reap_candidates(store: Store, retention_days: float, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    cutoff = now - retention_days * 86400
    with store.snapshot():
        sessions = load_sessions(store, now)
    kind = build(sessions).kind

    def pinned_tail(s: SessionInfo) -> bool:
        """A compression continuation (transitively) of a pinned segment: the pin covers it."""
        seen = set()
        while kind.get(s.id) == COMPRESSION and s.parent_id in sessions and s.id not in seen:
            seen.add(s.id)
            s = sessions[s.parent_id]
            if s.pinned:
                return True
        return False

    return sorted(s.id for s in sessions.values()
                  if s.is_open and s.source in STATEFUL_SOURCES and not s.pinned and not pinned_tail(s)
                  and not s.locked
                  and s.last_active < cutoff and s.last_active < now - ACTIVE_S  # the write guard's window
                  and isinstance(s.started_at, (int, float)) and s.started_at < cutoff)  # upstream: an old start too
