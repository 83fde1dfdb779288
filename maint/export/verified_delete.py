"""--delete-after-verified: delete a session only once its export is proven and nothing has changed.

The session and each delegate child are exported to their own files; each file
is re-read and its SHA-256 compared with the manifest and with a fresh render
from the store. Then, inside one write transaction, the display transcript
(message ids, contents, count, compaction state) and the set of delegate
children are compared with what was exported; any difference refuses the
delete and leaves files and store as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from maint.store import lineage as lin
from maint.store.catalog import load_sessions
from maint.errors import MaintError
from maint.ops.prune import delete_sessions
from maint.store.connection import Store
from maint.export.transcript import iter_messages


def family(store: Store, session_id: str, sessions: dict | None = None) -> list[str]:
    """The session and its delegate (subagent) descendants; *sessions* when already loaded."""
    sessions = load_sessions(store) if sessions is None else sessions
    kinds = {sid: lin.classify(s, sessions) for sid, s in sessions.items()}
    out, frontier = [session_id], [session_id]
    while frontier:
        current = set(frontier)
        frontier = [sid for sid, s in sessions.items() if sid not in out and kinds[sid] == lin.DELEGATE
                    and (s.parent_id in current or s.delegate_from in current)]
        out.extend(sorted(frontier))
    return out


def fingerprint(store: Store, session_id: str) -> str:
    h = hashlib.sha256()
    n = 0
    for msg in iter_messages(store, session_id):
        h.update(repr((msg.get("id"), msg.get("role"), msg.get("content"), msg.get("tool_calls"),
                       msg.get("active"), msg.get("compacted"), msg.get("timestamp"))).encode())
        n += 1
    h.update(f"count={n}".encode())
    return h.hexdigest()


def refuse_if_busy(sessions: dict, ids: list[str]) -> None:
    for sid in ids:
        if sessions[sid].is_open:
            raise MaintError(f"session {sid} is still open; refusing to delete it (nothing was exported or deleted)")
        if sessions[sid].locked:  # load_sessions marks unexpired compression locks and turn leases
            raise MaintError(f"session {sid} has a turn or compression in progress; refusing to delete it")
        if sessions[sid].pinned:
            raise MaintError(f"session {sid} is pinned; unpin it before deleting")


def verify_files(entries: list[dict], rerender: Callable[[dict], str]) -> None:
    from pathlib import Path

    from maint.export.files import sha256_file

    for entry in entries:
        on_disk = sha256_file(Path(entry["path"]))
        if on_disk != entry["sha256"]:
            raise MaintError(f"{entry['path']}: SHA-256 differs from the manifest; nothing deleted")
        if rerender(entry) != on_disk:
            raise MaintError(f"{entry['path']}: differs from a fresh render of the store (the session changed); "
                             "nothing deleted")


def delete_if_unchanged(store: Store, ids: list[str], prints: dict[str, str]) -> None:
    store.refuse_unknown_references()
    with store.write() as conn:
        now_family = family(store, ids[0])
        if sorted(now_family) != sorted(ids):
            raise MaintError(f"session {ids[0]} gained or lost delegate children since the export; "
                             "refusing to delete (files kept, store untouched)")
        for sid in ids:
            if fingerprint(store, sid) != prints[sid]:
                raise MaintError(f"session {sid} changed since it was exported (new, edited, rewound or compacted "
                                 "messages); refusing to delete (files kept, store untouched)")
        delete_sessions(store, conn, ids)
