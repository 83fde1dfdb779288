"""Deleting sessions, the one way every command does it (prune, sweep, delete, a verified delete, repairs).

The rows go in the caller's transaction, through Hermes's own triggers for the search indexes; what no
session references any more (content-addressed prompts) goes with them; children the deletion keeps lose
their parent link, as Hermes does; after the commit, the files Hermes keeps for each session go too. It lives
in the store layer so that deleting one session does not load the prune planners.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from maint import files
from maint.errors import MaintError
from maint.store.connection import PROMPT_REFS, Store
from maint.store.sqlutil import chunks, ph


# SessionDB gives up on a write after about 1.3 s of retries (15 x 20-150 ms, hermes-agent issue
# #74478); while other processes have the store open, a delete that would hold the lock longer than the
# max_unit_s setting (below that budget) waits for Hermes to stop.
SLOWEST_S_PER_MESSAGE = 0.0002  # the slowest rate measured on stores Hermes built (0.08-0.2 ms)


def max_unit_seconds() -> float:
    from maint import settings

    return settings.value("max_unit_s")


def refuse_if_too_big_while_shared(store: Store, ids: list[str], nothing: str) -> None:
    """A delete of *ids* in one transaction (a conversation is never split) that would hold the write lock past
    what Hermes waits, while other processes have the store open (or we cannot tell): refused, as prune keeps
    such a unit (hostile try 11, N4: deleting a 156,020-message conversation held the lock 17 s and a running
    Hermes's append failed)."""
    messages = store.scalar("SELECT COUNT(*) FROM messages WHERE session_id IN (SELECT value FROM json_each(?))",
                            (json.dumps(ids),)) or 0
    refuse_long_transaction_while_shared(store, messages, f"{ids[0]}: deleting its {messages} messages", nothing)


def refuse_long_transaction_while_shared(store: Store, messages: int, doing: str, nothing: str) -> None:
    """The rule of :func:`refuse_if_too_big_while_shared` for one transaction touching *messages* messages (a
    delete, or an import's lineage), estimated at :data:`SLOWEST_S_PER_MESSAGE` each."""
    from maint.store.holders import other_connections

    estimate, budget = messages * SLOWEST_S_PER_MESSAGE, max_unit_seconds()
    if estimate <= budget:
        return
    others = other_connections(store.path)
    if others == 0:
        return
    who = "other processes have the store open" if others else "we cannot tell whether other processes have it open"
    raise MaintError(f"{doing} holds the write lock about {estimate:.0f} s, past what Hermes waits (max_unit_s "
                     f"{budget:g} s), and {who}; stop Hermes and run it again; {nothing}")


# state_meta keys of sessions unlinked from a parent that went away (the value: the parent's id), by a verified
# delete (the children it kept) or an import that lacked the parent: importing that parent links them again.
# Only this store's own notes decide: a file's word alone never re-parents a session (hostile try 10, M4).
PARENT_NOTE = "hermes_maint.unlinked_from."


def note_unlinked(store: Store, conn, pairs: Iterable[tuple[str, str]]) -> None:
    """Record, in the caller's transaction, that each (child, parent) was unlinked for want of the parent."""
    if store.has_table("state_meta"):
        conn.executemany("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                         [(PARENT_NOTE + child, parent) for child, parent in pairs])


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
    ref_cols = [c for c in PROMPT_REFS if store.has_column("sessions", c)]
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


# -- the files Hermes keeps per session --------------------------------------------------------------

_DUMP = re.compile(r"^request_dump_(?P<sid>.+)_(?P<ts>\d{8}_\d{6}_\d+)\.json$")


def hermes_safe_id(session_id: str) -> str:
    """The name Hermes's writers give a session's files (``_safe_session_filename_component``)."""
    safe = re.sub(r"[^\w-]", "_", session_id).strip("._")[:96] or "session"
    if safe != session_id:
        safe += "_" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return safe


def session_files(store_path: Path, ids: Iterable[str]) -> list[str]:
    """The names, in ``<that store's HERMES_HOME>/sessions/``, of the files Hermes keeps for *ids*: what its own
    delete and prune remove (``<id>.json``, ``<id>.jsonl``, ``request_dump_<id>_<time>.json``), under the raw id
    and under the name its writers actually use (a sanitised id; also ``session_<id>.json`` snapshots, which
    Hermes's remover misses). The home of a store is its folder (a profile is a home of its own).

    Each id's fixed names are looked up one by one, and the folder is read once for request dumps alone: the
    memory is the files found, whatever the number of ids (a preview of a 10 GB store's prune names 400,000;
    eight candidate names per id in a set cost 24 MB per 55,000 ids)."""
    folder = _sessions_folder(Path(store_path))
    if folder is None:
        return []
    with folder:
        return _files_of(folder, ids)


def remove_session_files(store: Store, ids: Iterable[str]) -> list[str]:
    """Remove the files of deleted sessions (after the commit, as Hermes does), never following a link and never
    outside that folder; returns their paths. A file that cannot be removed is left (and not reported)."""
    folder = _sessions_folder(store)
    if folder is None:
        return []
    with folder:
        return _unlink(folder, _files_of(folder, ids))


class SessionFileRemover:
    """:func:`remove_session_files` for a run that deletes in many transactions (prune, the sweep): the
    sessions folder is opened, and its request dumps listed, once for the whole run (on the first removal),
    not once per transaction (a folder of 100,000 files read after each of 400 commits). A dump Hermes
    writes during the run is not in the list; it writes them for a session it is running, and a run deletes
    only sessions unchanged since its plan."""

    def __init__(self, store: Store):
        self.store = store
        self.folder: files.Folder | None = None
        self.dumps: dict[str, list[str]] | None = None
        self.listings = 0  # how many times the folder was read for request dumps

    def __enter__(self) -> SessionFileRemover:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.folder is not None:
            self.folder.close()
            self.folder = None

    def remove(self, ids: Iterable[str]) -> list[str]:
        ids = list(ids)
        if not ids:
            return []
        if self.dumps is None:
            self.folder = _sessions_folder(self.store)
            self.listings += self.folder is not None
            self.dumps = _request_dumps(self.folder) if self.folder is not None else {}
        if self.folder is None:
            return []
        return _unlink(self.folder, _files_of(self.folder, ids, self.dumps))


def _unlink(folder: files.Folder, names: list[str]) -> list[str]:
    removed = []
    for name in names:
        try:
            if folder.unlink(name):
                removed.append(str(folder.path / name))
        except OSError:
            continue
    return removed


def _files_of(folder: files.Folder, ids: Iterable[str], dumps: dict[str, list[str]] | None = None) -> list[str]:
    """:func:`session_files` in a folder already open (*dumps*: its request dumps, listed by the caller)."""
    dumps = _request_dumps(folder) if dumps is None else dumps
    out: set[str] = set()
    for sid in ids:
        for name in {sid, hermes_safe_id(sid)}:
            if "/" in name or name in (".", ".."):
                continue
            for entry in (f"{name}.json", f"{name}.jsonl", f"session_{name}.json", *dumps.get(name, ())):
                if entry not in out:
                    st = _lstat(folder, entry)
                    if st is not None and not stat.S_ISDIR(st.st_mode):  # a link is removed itself, never followed
                        out.add(entry)
    return sorted(out)


def _lstat(folder: files.Folder, name: str) -> os.stat_result | None:
    """A name no file can have (a NUL, too long, not encodable) is simply not there."""
    try:
        return folder.lstat(name)
    except (ValueError, UnicodeError, OSError):
        return None


def _request_dumps(folder: files.Folder) -> dict[str, list[str]]:
    """``request_dump_<id>_<time>.json`` names in the folder, by id (one pass; only these names are kept)."""
    dumps: dict[str, list[str]] = {}
    with os.scandir(folder.fd) as entries:
        for entry in entries:
            m = _DUMP.match(entry.name)
            if m:
                dumps.setdefault(m.group("sid"), []).append(entry.name)
    return dumps


def _sessions_folder(store: Store | Path) -> files.Folder | None:
    """The ``sessions`` folder beside the store: for an open :class:`Store`, reached from the descriptor of the
    folder its file was opened in (``Store.dir_fd``), never by the path again (hostile try 10, M1); for a path
    (a dry run's listing), by the path. None when absent, a link or not a folder: nothing of ours there."""
    if isinstance(store, Path):
        path = Path(store).expanduser().absolute().parent / "sessions"
        try:
            return files.Folder.open(path, what="sessions folder")
        except MaintError:
            return None
    if store.dir_fd is None:
        return None
    parent = files.Folder(Path(store.path).expanduser().absolute().parent, os.dup(store.dir_fd))
    try:
        return parent.subfolder("sessions")
    except MaintError:
        return None
    finally:
        parent.close()
