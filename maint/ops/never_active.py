"""prune --never-active: keyed gateway rows opened and never used, as upstream's
``list_never_active_keyed_sessions`` / ``prune_never_active_keyed_sessions`` select them.

The ordinary prune only ever selects *ended* sessions; these rows never end. A row qualifies when it
has a routing key (``session_key`` not NULL), is still open, has no title, no ``last_activity_at``, no
messages, no tokens, tool calls or API calls, is neither pinned nor archived, and started before the
age bound (``--older-than``, default 30 days: a young one may be a chat nobody has replied to yet).
Upstream deletes the ``gateway_routing`` entries naming them first, then the rows; we do both in one
transaction, re-checking every condition inside it, and never touch a row with a turn in progress.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maint.store import guard
from maint.store.connection import Store, open_store
from maint.store.delete import delete_sessions, remove_session_files, session_files

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget

DEFAULT_DAYS = 30.0


def _col(store: Store, name: str, default: str = "NULL") -> str:
    return f"s.{name}" if store.has_column("sessions", name) else default


def never_active_where(store: Store) -> str | None:
    """The selection as SQL over ``sessions s`` (bind ``:cutoff``); None when the layout has no routing keys."""
    if not store.has_column("sessions", "session_key"):
        return None
    zero = " AND ".join(f"COALESCE({_col(store, c, '0')}, 0) = 0" for c in (
        "message_count", "tool_call_count", "api_call_count", "input_tokens", "output_tokens", "pinned", "archived"))
    return (f"s.session_key IS NOT NULL AND s.ended_at IS NULL AND {_col(store, 'title')} IS NULL "
            f"AND {_col(store, 'last_activity_at')} IS NULL AND {zero} "
            "AND s.started_at IS NOT NULL AND s.started_at < :cutoff "
            "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)")


def never_active_ids(store: Store, cutoff: float, conn=None) -> list[str]:
    where = never_active_where(store)
    if where is None:
        return []
    conn = conn or store.conn
    return [r[0] for r in conn.execute(f"SELECT s.id FROM sessions s WHERE {where} ORDER BY s.started_at, s.id",
                                       {"cutoff": cutoff})]


def _routing_keys(store: Store, conn, ids: list[str]) -> list[tuple[str, str]]:
    """``gateway_routing`` rows whose entry names one of *ids* (the id lives only inside ``entry_json``)."""
    if not ids or not store.has_table("gateway_routing") or not store.has_column("gateway_routing", "entry_json"):
        return []
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT scope, session_key FROM gateway_routing WHERE json_valid(entry_json) "
        "AND json_extract(entry_json, '$.session_id') IN (SELECT value FROM json_each(?))", (json.dumps(ids),))]


@dataclass(frozen=True)
class NeverActiveRequest:
    """``prune --never-active``'s options: *before* is the age bound (``--older-than``'s moment), None = 30 days."""

    before: float | None = None
    dry_run: bool = False


def prune_never_active(target: StoreTarget, req: NeverActiveRequest, op: Operator,
                       now: float | None = None) -> dict[str, Any]:
    """Plan, ask, delete: the report of one store's ``prune --never-active``."""
    now = time.time() if now is None else now
    cutoff = now - DEFAULT_DAYS * 86400 if req.before is None else req.before
    days = (now - cutoff) / 86400
    with open_store(target.path, readonly=req.dry_run) as store:
        with store.snapshot():
            planned = never_active_ids(store, cutoff)
        report: dict[str, Any] = {
            "store": str(target.path), "dry_run": req.dry_run, "never_active": True, "days": round(days, 3),
            "matched": len(planned), "session_ids": planned, "deleted": 0, "routing_deleted": 0,
            "skipped_changed": [], "session_files": [], "removed_files": [],
            # the ordinary prune report's fields, empty: one renderer and one history rule for both
            "messages": 0, "implicit_days": None, "held_back": {}, "oldest": None, "newest": None,
        }
        if req.dry_run or not planned:
            if req.dry_run:
                report["session_files"] = session_files(target.path, planned)
            return report
        op.confirm(f"Delete {len(planned)} never-active keyed sessions?", [
            f"{len(planned)} open keyed sessions older than {days:g} days with no messages, title, tokens, "
            "tool or API calls (the gateway opens a fresh session on the next message)",
        ])
        with store.write() as conn:
            still = set(never_active_ids(store, cutoff, conn))
            busy = guard.busy(store, [sid for sid in planned if sid in still], time.time())
            ids = [sid for sid in planned if sid in still and sid not in busy]
            keys = _routing_keys(store, conn, ids)
            conn.executemany("DELETE FROM gateway_routing WHERE scope = ? AND session_key = ?", keys)
            delete_sessions(store, conn, ids)
        report.update(session_ids=ids, deleted=len(ids), routing_deleted=len(keys),
                      skipped_changed=[sid for sid in planned if sid not in ids],
                      removed_files=remove_session_files(store, ids))
        return report
