"""Orphan reaping: closing open sessions that automation left behind.

cron jobs, kanban workers, subagents and one-shot CLI runs can stop without
ending their session; prune only deletes ended rows, so these would pile up
forever. Reaping ends them (nothing is deleted; they count again from now).
Messaging-platform, TUI and desktop sessions, pinned ones and ones with a turn
or compression in progress are never touched.
"""

from __future__ import annotations

import time

from maint.store.catalog import ORPHAN_REAP_REASON, catalog_sql
from maint.store.sqlutil import chunks, ph
from maint.store.connection import Store

STATEFUL_SOURCES = frozenset({"cli", "cron", "kanban", "acp", "api_server", "subagent", "tool", "recovered"})
REAP_REASON = ORPHAN_REAP_REASON


def reap_candidates(store: Store, retention_days: float, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    cutoff = now - retention_days * 86400
    sources = ", ".join(f"'{s}'" for s in sorted(STATEFUL_SOURCES))
    with store.snapshot():
        return [r[0] for r in store.conn.execute(
            f"SELECT id FROM ({catalog_sql(store, ())}) WHERE ended_at IS NULL AND source IN ({sources}) "
            "AND NOT pinned AND NOT locked AND last_active < :cutoff ORDER BY id", {"now": now, "cutoff": cutoff})]


def reap(store: Store, ids: list[str], now: float | None = None) -> list[str]:
    """End the given sessions, re-checking inside each transaction that they are still open."""
    now = time.time() if now is None else now
    done: list[str] = []
    for chunk in chunks(ids, 200):
        with store.write() as conn:
            marks = ph(chunk)
            still = [r[0] for r in conn.execute(
                f"SELECT id FROM sessions WHERE id IN ({marks}) AND ended_at IS NULL", chunk)]
            if still:
                conn.execute(f"UPDATE sessions SET ended_at = ?, end_reason = ? "
                             f"WHERE ended_at IS NULL AND id IN ({ph(still)})", [now, REAP_REASON, *still])
        done.extend(still)
    return done
