"""list: the conversations a user would see, newest activity first.

Compression continuations fold into their lineage (shown at its live tip) and
subagent runs are hidden, as in Hermes's own picker; archived and hidden
sessions are not listed, except pinned ones: a pin means "always listed" (the
hidden canonical Bot Chat excepted, which Bot Mode reaches through its bot).
Pinned conversations are listed even past ``limit``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from maint.store import lineage as lin
from maint.store.catalog import CANONICAL_BOT_CHAT_TITLE, SessionInfo, load_sessions
from maint.store.connection import Store

PREVIEW_CHARS = 60


def workspace_key(s: SessionInfo) -> str | None:
    """Hermes's workspace key: the git repo root, else the working directory (upstream ``workspace_key``)."""
    return (s.git_repo_root or "").strip() or (s.cwd or "").strip() or None


def in_workspace(key: str | None, needle: str) -> bool:
    """Path substring or exact directory name, case-insensitive (as ``hermes sessions list --workspace``)."""
    if not key:
        return False
    key, needle = key.lower(), needle.lower()
    return needle in key or needle == os.path.basename(key.rstrip("/\\"))


def list_conversations(store: Store, *, source: str | None = None, limit: int = 20, workspace: str | None = None,
                       now: float | None = None) -> tuple[list[dict[str, Any]], int]:
    """Rows to show and the total number that matched (for the '… more not shown' line)."""
    now = time.time() if now is None else now
    with store.snapshot():
        sessions = load_sessions(store, now)
        tree = lin.build(sessions)
        rows = []
        for chain in tree.chains.values():
            root = sessions[chain.ids[0]]
            members = [sessions[s] for s in chain.ids]
            pinned = any(m.pinned for m in members)
            always = pinned and not any(m.hidden and m.title == CANONICAL_BOT_CHAT_TITLE for m in members)
            out_of_sight = tree.kind[root.id] == lin.DELEGATE or any(m.archived or m.hidden for m in members)
            if out_of_sight and not always:
                continue
            if source is not None and root.source != source:
                continue
            tip = sessions[chain.tip]
            key = workspace_key(tip) or workspace_key(root)
            if workspace is not None and not in_workspace(key, workspace):
                continue
            rows.append({
                "id": tip.id,
                "root_id": root.id,
                "title": tip.title or root.title,
                "source": root.source,
                "last_active": max(m.last_active for m in members),
                "started_at": root.started_at,
                "open": tip.is_open,
                "segments": len(chain.ids),
                "pinned": pinned,
                "archived": any(m.archived for m in members),
                "workspace": key,
            })
        rows.sort(key=lambda r: (-r["last_active"], r["id"]))
        total = len(rows)
        shown = rows if not limit else rows[:limit] + [r for r in rows[limit:] if r["pinned"]]
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


# The list's Src column is six wide; longer platform names get the short forms the Sessions docs show.
SOURCE_ABBREVIATIONS = {
    "telegram": "tele", "discord": "disc", "whatsapp": "wapp", "api_server": "api", "subagent": "sub",
    "desktop": "desk", "recovered": "recov", "mattermost": "mmost", "homeassistant": "hass",
    "bluebubbles": "bbub", "dingtalk": "dtalk",
}


def source_label(source: str) -> str:
    return SOURCE_ABBREVIATIONS.get(source, source[:6])
