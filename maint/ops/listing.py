"""list: the conversations a user would see, newest activity first.

Compression continuations fold into their lineage (shown at its live tip) and
subagent runs are hidden, as in Hermes's own picker; archived and hidden
sessions are not listed.
"""

from __future__ import annotations

import time
from typing import Any

from maint.store import lineage as lin
from maint.store.catalog import load_sessions
from maint.store.connection import Store

PREVIEW_CHARS = 60


def list_conversations(store: Store, *, source: str | None = None, limit: int = 20,
                       now: float | None = None) -> tuple[list[dict[str, Any]], int]:
    """Rows to show and the total number that matched (for the '… more not shown' line)."""
    now = time.time() if now is None else now
    with store.snapshot():
        sessions = load_sessions(store, now)
        tree = lin.build(sessions)
        rows = []
        for chain in tree.chains.values():
            root = sessions[chain.ids[0]]
            if tree.kind[root.id] == lin.DELEGATE:
                continue
            members = [sessions[s] for s in chain.ids]
            if any(m.archived or m.hidden for m in members):
                continue
            if source is not None and root.source != source:
                continue
            tip = sessions[chain.tip]
            rows.append({
                "id": tip.id,
                "root_id": root.id,
                "title": tip.title or root.title,
                "source": root.source,
                "last_active": max(m.last_active for m in members),
                "started_at": root.started_at,
                "open": tip.is_open,
                "segments": len(chain.ids),
            })
        rows.sort(key=lambda r: (-r["last_active"], r["id"]))
        total = len(rows)
        shown = rows[:limit] if limit else rows
        for row in shown:
            row["preview"] = _preview(store, row["root_id"])
    return shown, total


def _preview(store: Store, session_id: str) -> str:
    text = store.scalar(
        "SELECT content FROM messages WHERE session_id = ? AND role = 'user' AND content IS NOT NULL "
        "ORDER BY timestamp, id LIMIT 1", (session_id,))
    text = " ".join(str(text or "").split())
    return text[:PREVIEW_CHARS] + "..." if len(text) > PREVIEW_CHARS else text


def relative_time(ts: float, now: float | None = None) -> str:
    now = time.time() if now is None else now
    delta = max(0.0, now - ts)
    if delta < 60:
        return "just now"
    if delta < 3600:
        return f"{int(delta // 60)}m ago"
    if delta < 86400:
        return f"{int(delta // 3600)}h ago"
    if delta < 2 * 86400:
        return "yesterday"
    if delta < 30 * 86400:
        return f"{int(delta // 86400)}d ago"
    return time.strftime("%Y-%m-%d", time.localtime(ts))
