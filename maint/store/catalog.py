"""Loads the sessions table into light records, whatever columns this layout has.

Hermes adds columns over time (``pinned``, ``hidden``, ``last_activity_at`` ...).
A column that is absent turns its feature off: no ``pinned`` column means
nothing is pinned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from maint.errors import SessionNotFound
from maint.store.connection import Store


ORPHAN_REAP_REASON = "startup_orphan_reap"
# Bot Mode finds its chat by this exact title on a hidden row: it stays hidden and keeps its name.
CANONICAL_BOT_CHAT_TITLE = "Bot Chat"


@dataclass
class SessionInfo:
    id: str
    source: str
    started_at: float
    ended_at: float | None
    end_reason: str | None
    parent_id: str | None
    last_active: float
    last_message_at: float | None = None
    user_id: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    session_key: str | None = None
    model: str | None = None
    title: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    billing_provider: str | None = None
    message_count: int = 0
    tool_call_count: int = 0
    tokens: int = 0
    cost: float = 0.0
    archived: bool = False
    auto_archived: bool = False  # hidden by the idle sweep (sessions.auto_archive), not by hand
    pinned: bool = False
    hidden: bool = False
    git_repo_root: str | None = None
    branched_from: str | None = None
    delegate_from: str | None = None
    reset_from: str | None = None
    system_prompt_hash: str | None = None
    tool_names: str | None = None
    locked: bool = False  # unexpired compression lock or turn lease

    @property
    def is_open(self) -> bool:
        return self.ended_at is None


def _marker(col: str, key: str) -> str:
    return (f"json_extract(CASE WHEN json_valid({col}) THEN {col} ELSE '{{}}' END, '$.{key}')")


def _opt(store: Store, col: str, default: str = "NULL") -> str:
    return f"s.{col}" if store.has_column("sessions", col) else default


def load_sessions(store: Store, now: float | None = None) -> dict[str, SessionInfo]:
    """Every session with its last activity: freshest of last_activity_at, newest message, started_at."""
    now = time.time() if now is None else now
    mc = "s.model_config" if store.has_column("sessions", "model_config") else "NULL"
    sql = f"""
        SELECT s.id, s.source, s.started_at, s.ended_at, {_opt(store, 'end_reason')} AS end_reason,
               s.parent_session_id AS parent_id,
               (SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id) AS last_message_at,
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
        started = row["started_at"] if isinstance(row["started_at"], (int, float)) else 0.0
        row["last_active"] = max(candidates) if candidates else started
        if row["end_reason"] == ORPHAN_REAP_REASON and isinstance(row["ended_at"], (int, float)):
            # A reaped orphan counts again from its closing time: only a later sweep may delete it.
            row["last_active"] = max(row["last_active"], row["ended_at"])
        row.pop("last_activity_at")
        for flag in ("archived", "auto_archived", "pinned", "hidden"):
            row[flag] = bool(row[flag])
        for marker in ("branched_from", "delegate_from", "reset_from"):
            if row[marker] is not None:
                row[marker] = str(row[marker])
        out[row["id"]] = SessionInfo(**row)
    for sid in locked_session_ids(store, now):
        if sid in out:
            out[sid].locked = True
    return out


def locked_session_ids(store: Store, now: float) -> set[str]:
    """Sessions with a turn or compression in progress (unexpired lock or lease rows)."""
    locked: set[str] = set()
    if store.has_table("compression_locks"):
        locked.update(r[0] for r in store.conn.execute(
            "SELECT session_id FROM compression_locks WHERE expires_at > ?", (now,)))
    if store.has_table("session_turn_leases"):
        locked.update(r[0] for r in store.conn.execute(
            "SELECT conversation_id FROM session_turn_leases WHERE expires_at > ?", (now,)))
    return locked


def resolve_session(store: Store, ref: str) -> str:
    """An id or a unique prefix of one (case-sensitive, as ids are)."""
    if not ref:
        raise SessionNotFound("empty session id (expected a session id or a unique prefix)")
    if store.scalar("SELECT 1 FROM sessions WHERE id = ?", (ref,)):
        return ref
    matches = [r[0] for r in store.conn.execute(
        "SELECT id FROM sessions WHERE id > ?1 AND substr(id, 1, length(?1)) = ?1 ORDER BY id LIMIT 3", (ref,))]
    if not matches:
        raise SessionNotFound(f"no session matches {ref!r} (expected a session id or a unique prefix)")
    if len(matches) > 1:
        raise SessionNotFound(f"session prefix {ref!r} is ambiguous ({', '.join(matches[:2])}, ...); "
                              "give more of the id")
    return matches[0]
