"""--delete-after-verified: delete a session only once its export is proven and nothing has changed.

The session and each delegate child are exported to their own files; each file
is re-read and its SHA-256 compared with the manifest and with a fresh render
from the store. Then, inside one write transaction, the display transcript
(message ids, contents, count, compaction state) and the set of delegate
children are compared with what was exported; any difference refuses the
delete and leaves files and store as they are.
"""

from __future__ import annotations

import json

import hashlib
from collections.abc import Callable

from maint.store import guard
from maint.store.catalog import session_info
from maint.store.lineage import delegate_family
from maint.errors import MaintError
from maint.store.delete import delete_sessions, note_unlinked, refuse_if_too_big_while_shared, remove_session_files
from maint.store.connection import USAGE_TABLE, Store, quote_ident
from maint.store.sqlutil import sql_literal
from maint.export.transcript import iter_messages


def family(store: Store, session_id: str) -> list[str]:
    """The session and its delegate (subagent) descendants."""
    return delegate_family(store, session_id)


def fingerprint(store: Store, session_id: str) -> str:
    """SHA-256 of everything a session's jsonl record carries, as stored: its row, every column of every message,
    its usage rows. Taken in the export's own read snapshot and again inside the delete's transaction, so any
    change between them refuses the delete: a title, a usage row, a resume that cleared ``ended_at`` (hostile try
    16, T2 and T11: only the messages' display columns were compared, and those changes were deleted unexported)."""
    h = hashlib.sha256()
    n = 0
    h.update(repr(store.conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchall()).encode())
    for msg in iter_messages(store, session_id):
        h.update(repr(tuple(msg.values())).encode())
        n += 1
    if store.has_table(USAGE_TABLE):
        usage = store.conn.execute(f"SELECT * FROM {USAGE_TABLE} WHERE session_id = ?", (session_id,)).fetchall()
        h.update(repr(sorted(map(repr, usage))).encode())
    h.update(f"count={n}".encode())
    return h.hexdigest()


def refuse_lossy_values(store: Store, ids: list[str]) -> None:
    """A value the jsonl record cannot carry as it is stored refuses the delete, naming the session and column: a
    BLOB in a column that is not declared BLOB (the record holds Python's bytes repr, ``"b'\\xff...'"``, which
    import stores as that text), or text that reads as such a repr in a BLOB column (import would turn it into
    bytes). The record would be the only copy left, and it would not be the data (hostile try 15, S14). Hermes
    writes text there; a BLOB comes from another client writing bytes. Refusing is simpler than a tagged form of
    bytes, which Hermes's own import would store as JSON text, and which both renderers would have to write."""
    from maint.ops.importer import blob_columns

    for table, key, what in (("sessions", "id", "its row's"), ("messages", "session_id", "message {}'s"),
                             (USAGE_TABLE, "session_id", "a model_usage row's")):
        if not store.has_table(table):
            continue
        blobs = blob_columns(store, table)
        tests = []
        for col in store.columns(table):
            q = quote_ident(col)
            tests.append((col, f"typeof({q}) = 'text' AND ({q} GLOB 'b''*' OR {q} GLOB 'b\"*')" if col in blobs
                          else f"typeof({q}) = 'blob'"))
        which = "CASE " + " ".join(f"WHEN {t} THEN {sql_literal(c)}" for c, t in tests) + " END"
        row = "id" if table == "messages" else "NULL"
        found = store.conn.execute(
            f"SELECT {key}, {which}, {row} FROM {table} WHERE {key} IN (SELECT value FROM json_each(?)) "
            f"AND ({' OR '.join(f'({t})' for _, t in tests)}) LIMIT 1", (json.dumps(list(ids)),)).fetchone()
        if found:
            sid, col, message = found
            if col in blobs:
                held, back = "text that reads as bytes (b'...')", "as bytes"
            else:
                held, back = "a BLOB (bytes)", "as the text of its Python repr"
            raise MaintError(f"session {sid}: {what.format(message)} {col} holds {held}, which its jsonl record "
                             f"cannot carry (import would give it back {back}; expected text or a number): refusing "
                             "to delete it, nothing was exported or deleted")


def refuse_if_busy(store: Store, ids: list[str], *, include_pinned: bool = False) -> None:
    """Only ended, idle sessions are deleted after an export, and pinned ones only with *include_pinned* (the
    session-write guard, as ``delete`` asks it, and more)."""
    busy = guard.busy(store, ids)
    for sid in ids:
        if sid in busy:
            raise MaintError(f"session {sid}: {busy[sid]}; refusing to delete it (nothing was exported or deleted)")
        info = session_info(store, sid)
        if info.is_open:
            raise MaintError(f"session {sid} is still open; refusing to delete it (nothing was exported or deleted)")
    pins = guard.pinned_covering(store, ids[0], ids)
    if pins and not include_pinned:
        raise MaintError(guard.pinned_refusal(ids[0], pins, "nothing was exported or deleted"))


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


def delete_if_unchanged(store: Store, ids: list[str], prints: dict[str, str], *,
                        include_pinned: bool = False) -> list[str]:
    """Delete the exported sessions in one transaction if nothing changed (a pin set since the plan counts,
    unless *include_pinned*); then Hermes's files of them (returned)."""
    store.refuse_unknown_references()
    refuse_if_too_big_while_shared(store, ids, "files kept, store untouched")
    with store.write() as conn:
        now_family = family(store, ids[0])
        if sorted(now_family) != sorted(ids):
            raise MaintError(f"session {ids[0]} gained or lost delegate children since the export; "
                             "refusing to delete (files kept, store untouched)")
        busy = guard.busy(store, ids)
        if busy:
            sid = sorted(busy)[0]
            raise MaintError(f"session {sid}: {busy[sid]}; refusing to delete it (files kept, store untouched)")
        pins = guard.pinned_covering(store, ids[0], ids)
        if pins and not include_pinned:
            raise MaintError(guard.pinned_refusal(ids[0], pins, "files kept, store untouched"))
        for sid in ids:
            if session_info(store, sid).is_open:  # resumed since the plan: Hermes writes on into it (T11)
                raise MaintError(f"session {sid} was resumed since it was exported (it is open again); refusing to "
                                 "delete it (files kept, store untouched)")
            if fingerprint(store, sid) != prints[sid]:
                raise MaintError(f"session {sid} changed since it was exported (its row, messages or usage rows: a "
                                 "title, a new message, a usage figure); refusing to delete (files kept, store "
                                 "untouched)")
        kept = conn.execute("SELECT id, parent_session_id FROM sessions WHERE parent_session_id IN "
                            "(SELECT value FROM json_each(?))", (json.dumps(ids),)).fetchall()
        note_unlinked(store, conn, [(c, p) for c, p in kept if c not in ids])  # their parent's import relinks them
        delete_sessions(store, conn, ids)
    return remove_session_files(store, ids)
