"""Orphan reaping: closing open sessions that automation left behind.

cron jobs, kanban workers, subagents and one-shot CLI runs can stop without
ending their session; prune only deletes ended rows, so these would pile up
forever. Reaping ends them (nothing is deleted; they count again from now).
Messaging-platform, TUI and desktop sessions, pinned ones (with the continuations of a
pinned segment) and ones with a turn or compression in progress are never touched.
"""

from __future__ import annotations

import time

from maint.store.catalog import NUMERIC, ORPHAN_REAP_REASON, catalog_sql
from maint.store.lineage import compression_edges_sql
from maint.store.guard import active_sql, busy
from maint.store.sqlutil import chunks, ph
from maint.store.connection import Store

STATEFUL_SOURCES = frozenset({"cli", "cron", "kanban", "acp", "api_server", "subagent", "tool", "recovered"})
REAP_REASON = ORPHAN_REAP_REASON


def reap_candidates(store: Store, retention_days: float, now: float | None = None) -> list[str]:
    """Open sessions of the stateful sources whose start and last activity are both older than the retention
    (upstream's rule: a fresh child carrying copied old activity is not an orphan), never pinned, never busy
    (:mod:`maint.store.guard`: with ``retention_days: 0`` a chat written to a moment ago is not an orphan)."""
    now = time.time() if now is None else now
    cutoff = now - retention_days * 86400
    sources = ", ".join(f"'{s}'" for s in sorted(STATEFUL_SOURCES))
    with store.snapshot():
        return [r[0] for r in store.conn.execute(
            f"SELECT id FROM ({catalog_sql(store, ())}) WHERE ended_at IS NULL AND source IN ({sources}) "
            f"AND NOT pinned AND id NOT IN ({pinned_tail_sql(store)}) AND NOT locked AND NOT {active_sql()} "
            f"AND last_active < :cutoff AND typeof(started_at) IN {NUMERIC} AND started_at < :cutoff ORDER BY id",
            {"now": now, "cutoff": cutoff})]


def pinned_tail_sql(store: Store) -> str:
    """Ids of the compression continuations (transitively) of a pinned segment: a pin covers its whole
    conversation, so the sweep does not reap them either (upstream's ``exclude_pinned`` with
    ``_PINNED_TAIL_SQL``)."""
    if not store.has_column("sessions", "pinned"):
        return "SELECT NULL WHERE 0"
    edges = compression_edges_sql(store)
    return f"""WITH RECURSIVE e(child, parent) AS MATERIALIZED ({edges}),
        tail(id) AS (SELECT e.child FROM e JOIN sessions p ON p.id = e.parent WHERE COALESCE(p.pinned, 0) <> 0
                     UNION SELECT e.child FROM e JOIN tail t ON e.parent = t.id)
        SELECT id FROM tail"""


def reap(store: Store, ids: list[str], now: float | None = None) -> list[str]:
    """End the given sessions, re-checking inside each transaction that they are still open and not busy."""
    now = time.time() if now is None else now
    done: list[str] = []
    for chunk in chunks(ids, 200):
        with store.write() as conn:
            marks = ph(chunk)
            open_ = [r[0] for r in conn.execute(
                f"SELECT id FROM sessions WHERE id IN ({marks}) AND ended_at IS NULL", chunk)]
            busy_now = busy(store, open_, time.time())
            still = [sid for sid in open_ if sid not in busy_now]
            if still:
                conn.execute(f"UPDATE sessions SET ended_at = ?, end_reason = ? "
                             f"WHERE ended_at IS NULL AND id IN ({ph(still)})", [now, REAP_REASON, *still])
        done.extend(still)
    return done
