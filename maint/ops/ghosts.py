"""Empty TUI ghost sessions: the one-time repair Hermes runs at start-up (``prune_empty_ghost_sessions``).

Upstream's rule: ``source = 'tui'``, no title, ended, started more than 24 hours ago, and not a single
message. Hermes runs it once per store, latched by its own ``ghost_session_prune_v1`` key in
``state_meta``, before the auto-archive and auto-prune steps and whatever ``sessions.auto_prune`` says;
the sweep runs it the same way, sharing the latch (a store Hermes already repaired is not read again).
Ours also spares a pinned ghost and one with a turn or compression in progress, and orphans a child of
a ghost (parent NULLed, as every delete here does) instead of leaving it a dangling link.
"""

from __future__ import annotations

import time

from maint.store import guard
from maint.store.connection import Store
from maint.store.delete import delete_sessions, remove_session_files

MARKER_KEY = "ghost_session_prune_v1"  # Hermes's own latch, shared with every Hermes process
MIN_AGE_S = 86400.0


def ghost_ids(store: Store, now: float, conn=None) -> list[str]:
    """Upstream's selection (plus: never a pinned one)."""
    conn = conn or store.conn
    title = "title IS NULL" if store.has_column("sessions", "title") else "1"
    pinned = "AND COALESCE(pinned, 0) = 0" if store.has_column("sessions", "pinned") else ""
    return [r[0] for r in conn.execute(
        f"SELECT id FROM sessions WHERE source = 'tui' AND {title} AND ended_at IS NOT NULL AND started_at < ? "
        f"{pinned} AND NOT EXISTS (SELECT 1 FROM messages WHERE messages.session_id = sessions.id) ORDER BY id",
        (now - MIN_AGE_S,))]


def prune_ghosts_once(store: Store, now: float | None = None) -> list[str] | None:
    """Delete the ghosts unless the latch is set, then set it, in one write transaction; remove their files
    after the commit. Returns the deleted ids, or None when the latch was already set."""
    now = time.time() if now is None else now
    if not store.has_table("state_meta"):
        return None
    with store.write() as conn:
        if conn.execute("SELECT 1 FROM state_meta WHERE key = ? AND COALESCE(value, '') <> ''",
                        (MARKER_KEY,)).fetchone():
            return None
        ids = ghost_ids(store, now, conn)
        busy = guard.busy(store, ids, time.time())
        ids = [sid for sid in ids if sid not in busy]
        delete_sessions(store, conn, ids)
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, '1')", (MARKER_KEY,))
    remove_session_files(store, ids)
    return ids
