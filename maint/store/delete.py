"""Deleting sessions, the one way every command does it (prune, sweep, delete, a verified delete, repairs).

The rows go in the caller's transaction, through Hermes's own triggers for the search indexes; what no
session references any more (content-addressed prompts) goes with them; children the deletion keeps lose
their parent link, as Hermes does. It lives in the store layer so that deleting one session does not load
the prune planners.
"""

from __future__ import annotations

import json

from maint.store.connection import Store
from maint.store.sqlutil import chunks, ph


def delete_sessions(store: Store, conn, ids: list[str]) -> None:
    """The deletion itself, inside the caller's transaction.

    One statement per table whatever the count: FTS5 flushes its pending index data into a new
    segment at every statement, so splitting the messages delete costs a segment (and later
    merge work) per piece.
    """
    if not ids:
        return
    id_list = (json.dumps(ids),)
    each = "SELECT value FROM json_each(?)"
    ref_cols = [c for c in ("system_prompt_hash", "tool_names") if store.has_column("sessions", c)]
    prompt_refs: set[str] = set()
    if store.has_table("system_prompts") and ref_cols:
        for row in conn.execute(f"SELECT {', '.join(ref_cols)} FROM sessions WHERE id IN ({each})", id_list):
            prompt_refs.update(v for v in row if isinstance(v, str) and v)
    conn.execute(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN ({each})", id_list)
    conn.execute(f"DELETE FROM messages WHERE session_id IN ({each})", id_list)
    for table in ("session_model_usage", "compression_locks"):
        if store.has_table(table):
            conn.execute(f"DELETE FROM {table} WHERE session_id IN ({each})", id_list)
    conn.execute(f"DELETE FROM sessions WHERE id IN ({each})", id_list)
    if prompt_refs:
        still = " OR ".join(f"s.{c} = system_prompts.hash" for c in ref_cols)
        conn.execute(f"DELETE FROM system_prompts WHERE hash IN ({each}) "
                     f"AND NOT EXISTS (SELECT 1 FROM sessions s WHERE {still})", (json.dumps(sorted(prompt_refs)),))


def message_counts(store: Store, ids: list[str]) -> dict[str, tuple[int, int]]:
    """Per session with messages: (message count, lowest message rowid)."""
    out: dict[str, tuple[int, int]] = {}
    for chunk in chunks(ids):
        for sid, n, first in store.conn.execute(
                f"SELECT session_id, COUNT(*), MIN(id) FROM messages WHERE session_id IN ({ph(chunk)}) "
                "GROUP BY session_id", chunk):
            out[sid] = (n, first)
    return out
