"""stats: what the store holds and how much of the file is reclaimable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from maint.store.connection import Store, open_store, sqlite_version

if TYPE_CHECKING:
    from maint.store.targets import StoreTarget


def store_stats(store: Store) -> dict[str, Any]:
    """Counts from one read snapshot, each the cheapest way SQLite has.

    Sessions per source come from a covering index when the store has one (Hermes creates
    ``idx_sessions_source``); the open, archived and pinned counts from one pass over the table
    (in a single GROUP BY, SQLite would walk that index and look up every row instead);
    messages from SQLite's count over their smallest index.
    """
    archived = "COALESCE(SUM(archived = 1), 0)" if store.has_column("sessions", "archived") else "0"
    pinned = "COALESCE(SUM(pinned = 1), 0)" if store.has_column("sessions", "pinned") else "0"
    with store.snapshot():
        groups = store.conn.execute(
            "SELECT source, COUNT(*) FROM sessions GROUP BY source ORDER BY COUNT(*) DESC, source").fetchall()
        sessions, open_count, archived, pinned = store.conn.execute(
            f"SELECT COUNT(*), COALESCE(SUM(ended_at IS NULL), 0), {archived}, {pinned} FROM sessions").fetchone()
        messages = store.scalar("SELECT COUNT(*) FROM messages")
        pages = store.page_stats()
    by_source = dict(groups)
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


def stats_report(target: StoreTarget) -> dict[str, Any]:
    """``hermes-maint stats`` on one store, read-only."""
    with open_store(target.path, readonly=True) as store:
        return store_stats(store)
