"""Which sessions an export takes: one named session, or the shared filters over ended ones.

Bulk filters take ended sessions only; pinned and archived sessions that match
are included (a backup keeps protected rows). No filter at all takes everything.
"""

from __future__ import annotations


from maint.store.catalog import SessionInfo, load_sessions, resolve_session
from maint.errors import UsageError
from maint.selection.filters import Filters
from maint.store.connection import Store


def select_sessions(store: Store, session_id: str | None, filters: Filters,
                    sessions: dict[str, SessionInfo] | None = None) -> list[SessionInfo]:
    """*sessions* is the store's catalogue when the caller already loaded it."""
    if session_id is not None and not filters.is_empty:
        raise UsageError("--session-id cannot be combined with filters (use one or the other)")
    if sessions is None:
        with store.snapshot():
            sessions = load_sessions(store)
    if session_id is not None:
        return [sessions[resolve_session(store, session_id)]]
    if filters.is_empty:
        chosen = list(sessions.values())
    else:
        chosen = [s for s in sessions.values() if not s.is_open and filters.matches(s)]
    return sorted(chosen, key=lambda s: (s.started_at, s.id))
