"""stats: what the store holds and how much of the file is reclaimable."""

from __future__ import annotations

from typing import Any

from maint.store.connection import Store, sqlite_version


def store_stats(store: Store) -> dict[str, Any]:
    """One pass over ``sessions`` (every per-session figure at once) and SQLite's count of ``messages``."""
    archived = "SUM(archived = 1)" if store.has_column("sessions", "archived") else "0"
    pinned = "SUM(pinned = 1)" if store.has_column("sessions", "pinned") else "0"
    with store.snapshot():
        groups = store.conn.execute(
            f"SELECT source, COUNT(*), SUM(ended_at IS NULL), {archived}, {pinned} FROM sessions "
            "GROUP BY source ORDER BY COUNT(*) DESC, source").fetchall()
        messages = store.scalar("SELECT COUNT(*) FROM messages")
        pages = store.page_stats()
    by_source = {src: n for src, n, *_ in groups}
    sessions, open_count, archived, pinned = (sum(g[i] for g in groups) for i in range(1, 5))
    sizes = store.file_sizes()
    free_share = pages["freelist_count"] / pages["page_count"] if pages["page_count"] else 0.0
    return {
        "store": str(store.path),
        "schema_version": store.schema_version,
        "sqlite_version": sqlite_version(),
        "sessions": sessions,
        "messages": messages,
        "open_sessions": open_count,
        "archived_sessions": archived,
        "pinned_sessions": pinned,
        "sessions_by_source": by_source,
        "file_bytes": sizes["db"] + sizes["wal"],
        "db_bytes": sizes["db"],
        "wal_bytes": sizes["wal"],
        "page_count": pages["page_count"],
        "freelist_count": pages["freelist_count"],
        "free_page_share": round(free_share, 4),
    }
