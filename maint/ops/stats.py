"""stats: what the store holds and how much of the file is reclaimable."""

from __future__ import annotations

from typing import Any

from maint.store.connection import Store, sqlite_version


def store_stats(store: Store) -> dict[str, Any]:
    with store.snapshot():
        sessions = store.scalar("SELECT COUNT(*) FROM sessions")
        messages = store.scalar("SELECT COUNT(*) FROM messages")
        by_source = {src: n for src, n in store.conn.execute(
            "SELECT source, COUNT(*) FROM sessions GROUP BY source ORDER BY COUNT(*) DESC, source")}
        open_count = store.scalar("SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL")
        archived = (store.scalar("SELECT COUNT(*) FROM sessions WHERE archived = 1")
                    if store.has_column("sessions", "archived") else 0)
        pinned = (store.scalar("SELECT COUNT(*) FROM sessions WHERE pinned = 1")
                  if store.has_column("sessions", "pinned") else 0)
        pages = store.page_stats()
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
