"""The one way into a Hermes state.db.

Every command goes through :class:`Store`. It refuses files that are missing,
not SQLite, truncated or not a Hermes store before anything can be written;
it never changes the schema or the journal mode; and all writes happen in
short ``BEGIN IMMEDIATE`` transactions so Hermes's own writers (which give up
after ~16 s) always get the lock between our batches.

apsw is used instead of the standard library's sqlite3 because it bundles a
SQLite without the WAL-reset corruption bug (3.7.0-3.51.2).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import math
import os
import stat
import struct
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from maint import files
from maint.crashpoints import crash_point
from maint.errors import CorruptStore, MaintError, StoreError, UsageError
from maint.store import fifowatch
from maint.store.sqlutil import sql_literal

log = logging.getLogger("hermes_maint.store")

# Page-cache caps (KiB): the main database for read-only and writable opens, and the temp database
# that holds the planners' tables.
READ_CACHE_KB, WRITE_CACHE_KB, TEMP_CACHE_KB = 2048, 16384, 1024
# The newest schema_version whose layout this release knows (upstream's v31: pins, hidden,
# auto_archived, content-addressed prompts, turn leases). A newer store is read, never written.
NEWEST_KNOWN_SCHEMA = 31
# Tables our deletes clear themselves (prune.delete_sessions) or that need no clearing.
USAGE_TABLE = "session_model_usage"  # a session's per-model usage rows (export, import and moves carry them)
HANDLED_REFERENCES = {"sessions", "messages", USAGE_TABLE, "compression_locks"}
# The session columns that hold a hash into the content-addressed system_prompts table (upstream's
# _delete_unreferenced_system_prompts keeps a prompt either references): a copy or record of a session carries both.
PROMPT_REFS = ("system_prompt_hash", "tool_names")
HERMES_FTS = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")  # Hermes's search indexes, by name
# Tables every Hermes state.db has had since long before v22.
REQUIRED_TABLES = ("sessions", "messages", "state_meta")
SQLITE_HEADER = b"SQLite format 3\x00"

# SQLite releases with the WAL-reset bug, and the fixed backports.
WAL_RESET_FIXED = ((3, 51, 3), (3, 50, 7), (3, 44, 6))


def sqlite_version() -> str:
    return apsw.sqlite_lib_version()


def has_wal_reset_bug(version: str) -> bool:
    """True when *version* is one of the SQLite releases that can corrupt a WAL store."""
    parts = tuple(int(p) for p in version.split(".")[:3])
    if parts < (3, 7, 0) or parts >= (3, 51, 3):
        return False
    for fixed in WAL_RESET_FIXED[1:]:
        if parts[:2] == fixed[:2] and parts >= fixed:
            return False
    return True


@dataclass
class WriteStats:
    """Lock-hold bookkeeping, so tests and benchmarks can see the longest hold."""

    transactions: int = 0
    longest_hold_s: float = 0.0
    total_hold_s: float = 0.0

    def record(self, held: float) -> None:
        self.transactions += 1
        self.total_hold_s += held
        self.longest_hold_s = max(self.longest_hold_s, held)


def check_regular_file(path: Path) -> os.stat_result:
    """The store must be a regular file (a link to one is fine): a FIFO would hang every open, a device worse."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise StoreError(f"{path}: no such store (expected an existing Hermes state.db)") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the store ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{path}: is a directory (expected the state.db file)")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or \
            stat.S_ISBLK(st.st_mode) else "a socket or special file"
        raise StoreError(f"{path}: is {kind}, not a store file; refusing to open it")
    _refuse_foreign_links(Path(path), st)
    _refuse_foreign_journals(Path(path), st)
    return st


def _me() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else -1


def _refuse_foreign_links(path: Path, st: os.stat_result) -> None:
    """A run as root never follows a link to a store owned by someone other than the link's owner (as the
    kernel's fs.protected_symlinks does in shared folders, which many systems leave off): a user's profile
    folder could otherwise point root's nightly run, and that user's config, at another user's store."""
    if _me() != 0:
        return
    current = Path(path.anchor or "/")
    for part in Path(os.path.abspath(path)).parts[1:]:
        current = current / part
        try:
            link = os.lstat(current)
        except OSError:
            return
        if stat.S_ISLNK(link.st_mode) and link.st_uid not in (0, st.st_uid):
            raise StoreError(f"{path}: reached through {current}, a symbolic link owned by uid {link.st_uid}, to a "
                             f"store owned by uid {st.st_uid}; a run as root refuses such a link (open the store by "
                             "its real path)")


def _refuse_foreign_journals(path: Path, st: os.stat_result) -> None:
    """SQLite replays a store's ``-wal`` (or hot ``-journal``) into it on open: one that another user planted
    beside the store (in a shared folder) would rewrite its content. Each that exists must be a regular file
    owned by the store's owner, by root, or by us."""
    for suffix in ("-wal", "-shm", "-journal"):
        side = Path(f"{path}{suffix}")
        try:
            sst = os.lstat(side)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(f"{side}: cannot check it ({exc.strerror}); refusing to open the store") from None
        if not stat.S_ISREG(sst.st_mode):
            raise StoreError(f"{side}: is not a regular file (a link or special file beside the store); refusing "
                             "to open the store")
        foreign = files.foreign_file(sst, st.st_uid)
        if foreign:
            # Empty or not, it is judged by whose it is: its owner may write it between our check and SQLite's
            # look at it (hostile try 8, K3: an empty one was refused as if SQLite would replay it as it was).
            what = ("SQLite reads it as the index of the store's -wal" if suffix == "-shm"
                    else "SQLite replays a -wal or hot -journal into the store")
            raise StoreError(f"{side}: {foreign}, not the store's (uid {st.st_uid}); {what}, and its owner may write "
                             "into it at any time; refusing to open the store (remove it if it is not yours)")


@contextlib.contextmanager
def journal_name_held(path: Path) -> Iterator[None]:
    """While a connection to a WAL store makes its first read, the store's ``-journal`` name is ours (an empty
    file, :func:`maint.files.name_held`). SQLite looks for a hot journal before it finds the store is in WAL
    mode: a read-write connection rolls one back into the store, and a root run's read-only one hands it to the
    store's owner (SQLite gives a journal it opens as root to the store's owner), after which it passes for
    the owner's own. Another user who can make names beside the store (a shared sticky folder) and plants one
    after our checks would have her own pages written over the store (hostile try 7, J7). Such folders are now
    refused before any open (:func:`_refuse_shared_folder`); the held name stays as a second line for a folder
    opened up during a run. A ``-journal`` already there is judged again, as before the open. Rollback-journal
    stores are left as they are: their writers make and remove the ``-journal`` themselves."""
    try:
        wal = header_journal_mode(path) == "wal"
    except (OSError, MaintError, IndexError):
        wal = False  # not a store SQLite will read as one: its open refuses it
    if not wal:
        yield
        return
    with files.name_held(f"{path}-journal") as claim:
        if claim == "exists":
            _refuse_foreign_journals(path, os.stat(path))
        yield


def _open_fds() -> set[int] | None:
    """The descriptors this process has open (None where /proc/self/fd cannot tell). The listing's own
    descriptor is closed by the time it returns, and is left out: SQLite's next open may get its number,
    which would then not count as new (hostile try 7, J5)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    fds = set()
    for name in names:
        try:
            fd = int(name)
            os.fstat(fd)
        except (OSError, ValueError):
            continue
        fds.add(fd)
    return fds


def held_file(fd: int) -> tuple[os.stat_result, str] | None:
    """The file *fd* holds and the kernel's name for it: where it is now, whatever name opened it (None when
    the descriptor is gone, another thread's, or /proc cannot tell)."""
    try:
        return os.fstat(fd), os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def opened_elsewhere(path: Path, checked: tuple[int, int], fds_before: set[int] | None) -> str | None:
    """Why the files SQLite holds open for *path* are not the store we checked, or None.

    Every check runs on the path, and SQLite then opens the store, its -wal and its -shm by that name:
    a folder on the path swapped for a link in between (the store's owner may do that to her own
    profile folder) would send a root run's writes to another user's store, or its WAL into ours. So
    we look at what was actually opened: a descriptor of the file we checked, and the -wal/-shm opened
    since in the folder that file really is in (the kernel's name for an open file is where it is).
    """
    now = _open_fds()
    if now is None or fds_before is None:
        return None  # no /proc: the path's stat before and after the open is all there is
    held = {fd: info for fd in sorted(now) if (info := held_file(fd)) is not None}
    stores = [name for st, name in held.values() if (st.st_dev, st.st_ino) == checked]
    if not stores:
        return "the file SQLite opened is not the one that was checked (a folder on the path was swapped)"
    folder = os.path.dirname(stores[0])
    for fd in sorted(now - fds_before):
        if fd not in held:
            continue
        st, name = held[fd]
        if os.path.basename(name) in (f"{path.name}-wal", f"{path.name}-shm") and os.path.dirname(name) != folder:
            return f"SQLite opened {name}, which is not beside the store it checked (a folder was swapped)"
        # The checked file may be held already (a connection open since before): what this open added must
        # not be another store (hostile try 7, J5).
        if (st.st_dev, st.st_ino) != checked and stat.S_ISREG(st.st_mode) and _sqlite_header(fd):
            return f"SQLite opened {name}, not the store it checked (a folder on the path was swapped)"
    return None


def _sqlite_header(fd: int) -> bool:
    try:
        return os.pread(fd, 16, 0) == b"SQLite format 3\x00"
    except OSError:
        return False


def _refuse_opened_elsewhere(path: Path, file_id: tuple[int, int], fds_before: set[int] | None) -> None:
    """After SQLite's open of *path*: refused (:class:`StoreError`) unless it holds the file *file_id* that was
    checked (:func:`opened_elsewhere`) and the name still leads there; the one check of open_store and
    connect_checked."""
    swapped = opened_elsewhere(path, file_id, fds_before)
    if swapped is None:
        try:
            now = os.stat(path)
        except OSError:
            swapped = "the store's name went away while it was being opened"
        else:
            swapped = None if (now.st_dev, now.st_ino) == file_id else "the store was replaced while being opened"
    if swapped:
        raise StoreError(f"{path}: {swapped}; refusing, nothing was read or written")


def connect_checked(path: Path, checked: os.stat_result | tuple[int, int], flags: int, *,
                    busy_timeout_ms: int | None = None) -> apsw.Connection:
    """:func:`connect` to the store *checked* (its stat, or (st_dev, st_ino)) by *path*, refused when what SQLite
    opened is another file (:func:`opened_elsewhere`): for the opens that write outside :func:`open_store`."""
    file_id = (checked.st_dev, checked.st_ino) if isinstance(checked, os.stat_result) else checked
    fds_before = _open_fds()
    with journal_name_held(path):
        conn = connect(os.path.abspath(path), flags, busy_timeout_ms=busy_timeout_ms)
        with contextlib.suppress(apsw.Error):
            _flat_memory(conn, not flags & apsw.SQLITE_OPEN_READWRITE)
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # opens the -wal and -shm too
    try:
        _refuse_opened_elsewhere(path, file_id, fds_before)
    except StoreError:
        close_untouched(conn)
        raise
    return conn


def close_untouched(conn: apsw.Connection) -> None:
    """Close a connection to a file we must not write (another store than the one checked): SQLite's last
    connection would checkpoint that store's WAL on close and remove its ``-wal`` and ``-shm``."""
    with contextlib.suppress(apsw.Error):
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    with contextlib.suppress(apsw.Error):
        conn.close()


def check_writable(path: Path) -> os.stat_result:
    """The preflight of every open that may write a store (prune, restore, import, the repairs ...).

    A regular file (a link to one is fine) we may write, with one name: SQLite keeps the WAL beside the
    name a file is opened by, so a WAL left beside another hard link is replayed over our changes the next
    time the file is opened by that name (sessions lost, "Rowid out of order").
    """
    st = check_regular_file(path)
    if not os.access(path, os.W_OK):
        raise StoreError(f"{path}: store is read-only (no write permission); nothing was changed")
    if st.st_nlink > 1:
        raise StoreError(f"{path}: the store file has {st.st_nlink} hard links; refusing to change it (SQLite keeps "
                         "a separate WAL beside each name, so a write through one name can be undone or corrupted "
                         "through another); keep one name and use a symlink for the others")
    return st


# A checkpoint that grows the file writes page 1 (and its new page count) before the last page: until
# it ends, a healthy store looks short. A short file beside a WAL is read again for this long.
CHECKPOINT_GRACE_S, CHECKPOINT_POLL_S = 3.0, 0.05


def _not_utf8(path: Path, encoding: str) -> StoreError:
    """The one line for a store whose text is not UTF-8, read from the header (before SQLite opens the file, so
    before a hot journal is rolled back) or from SQLite itself (a ``-wal`` may hold another page 1)."""
    return StoreError(f"{path}: its text encoding is {encoding}; Hermes writes UTF-8 stores and hermes-maint reads "
                      "only those (convert it: sqlite3 OLD .dump | sqlite3 NEW); refusing, nothing was written")


def refuse_unreadable_store(conn: apsw.Connection, path: Path) -> None:
    """Refuse a store SQLite reads in UTF-16 (the header's byte 56 said UTF-8, but a ``-wal`` may hold another
    page 1: hostile try 13, Q3), or with a VIRTUAL generated column (Hermes's schema has none). Every read of
    such a column's rows computes an expression of the store's own, and one such step may take seconds: no
    progress handler or signal gets in between (hostile try 12, P7: `hex(zeroblob(2e7))` kept doctor's and
    backup's checks running for minutes past SIGTERM)."""
    encoding = conn.execute("PRAGMA encoding").fetchall()[0][0]
    if encoding != "UTF-8":
        raise _not_utf8(path, encoding)
    found = [f"{t}.{c}" for t, c in conn.execute(
        "SELECT m.name, x.name FROM sqlite_master AS m, pragma_table_xinfo(m.name) AS x "
        "WHERE m.type = 'table' AND m.sql NOT LIKE 'CREATE VIRTUAL%' AND x.hidden = 2")]
    if found:
        raise StoreError(f"{path}: has computed (VIRTUAL generated) column {', '.join(found[:5])}, which Hermes's "
                         "schema never has: reading its rows runs the store's own expression for each, without "
                         "bound; refusing (ALTER TABLE … DROP COLUMN …, then run again)")


def _check_header(path: Path) -> os.stat_result:
    """Refuse special, non-SQLite and truncated files without opening them through SQLite; the stat of the file
    whose links were judged (what SQLite must then open: :func:`opened_elsewhere`)."""
    st = check_regular_file(path)
    deadline = time.monotonic() + CHECKPOINT_GRACE_S
    while True:
        short = _check_header_once(path)
        if short is None:
            _refuse_shared_folder(path, st)
            return st
        wal = Path(str(path) + "-wal")
        if time.monotonic() >= deadline or not (wal.exists() and wal.stat().st_size > 0):
            raise CorruptStore(f"{path}: truncated or corrupt store ({short[0]} bytes, header says {short[1]}); "
                               "refusing")
        time.sleep(CHECKPOINT_POLL_S)


def _refuse_shared_folder(path: Path, st: os.stat_result) -> None:
    """SQLite replays a ``-journal`` or ``-wal`` it finds beside a store into it, whoever made it, and opens those
    by name at moments we do not choose. So a store is opened only in a folder where no one but its owner, root
    and we may make names: in any other, a name free for a moment is a name another user can take. Hostile tries
    8 and 9: a ``-journal`` planted in a folder writable by all (K2) or beside a rollback-journal store in a
    sticky one (K1), and a ``-wal`` planted beside a WAL store at rest in a sticky folder the moment our open
    began (L1), were replayed into the store, a root run's included."""
    folder = Path(os.path.realpath(path)).parent
    try:
        fst = os.stat(folder)
    except OSError:
        return
    who = files.others_in_folder(fst, folder, st.st_uid)
    if who is None:
        # the folders above: one that others may rename in lets them swap the store's folder for one of theirs
        # mid-run (hostile try 10, M5); sticky ones (as /tmp) keep them from renaming what is not theirs
        above = files.untrusted_folder(folder.parent, also_trusted=st.st_uid)
        if above:
            raise StoreError(f"{path}: the folder above the store's, {folder.parent}, {above}: another user could swap "
                             "the store's folder for one of theirs while we work; refusing to open it (chmod go-w, "
                             "or +t, that folder)")
    if who:
        raise StoreError(f"{path}: its folder {folder} lets {who} create files in it (mode "
                         f"{stat.S_IMODE(fst.st_mode):o}): SQLite would replay a -journal or -wal one of them put "
                         "beside the store; refusing to open it (keep the store in a folder only its owner can "
                         "write: chmod go-w the folder, or move the store)")


def _check_header_once(path: Path) -> tuple[int, int] | None:
    """(file size, size the header gives) when the file is shorter than its header says, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never blocks, even if swapped for a FIFO meanwhile
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise StoreError(f"{path}: is not a regular file; refusing to open it")
            header = fh.read(100)
            size = os.fstat(fh.fileno()).st_size  # after the header: a checkpoint writes page 1 first
    except PermissionError:
        raise StoreError(f"{path}: permission denied (cannot read the store)") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the store ({exc.strerror})") from None
    if size == 0:
        raise StoreError(f"{path}: empty file, not a Hermes store")
    if len(header) < 100 or not header.startswith(SQLITE_HEADER):
        raise StoreError(f"{path}: not a SQLite database (refusing; nothing was written)")
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change_counter, pages = struct.unpack(">II", header[24:32])
    valid_for = struct.unpack(">I", header[92:96])[0]
    if page_size < 512 or page_size & (page_size - 1):
        raise StoreError(f"{path}: corrupt SQLite header (page size {page_size}); refusing")
    encoding = struct.unpack(">I", header[56:60])[0]
    if encoding not in (0, 1):  # 0: no schema yet; 1: UTF-8
        # our checks and copies read text as UTF-8 bytes, and a copy between encodings fails after the fact
        # (hostile try 12, P3/P4: a UTF-16 snapshot was restored, then reported as an error)
        name = {2: "UTF-16le", 3: "UTF-16be"}.get(encoding, f"unknown ({encoding})")
        raise _not_utf8(path, name)
    if pages and change_counter == valid_for and size < pages * page_size:
        return size, pages * page_size
    return None


def header_bytes(path: Path) -> tuple[int, int]:
    """File-format write and read versions (header bytes 18-19): 1 = rollback journal, 2 = WAL."""
    with files.open_regular(path, what="store") as fh:  # never blocks, even on a FIFO swapped in meanwhile
        fh.seek(18)
        data = fh.read(2)
    return data[0], data[1]


def header_journal_mode(path: Path) -> str:
    """Journal mode as written in the file header: 'wal', 'delete', or unknown(w,r)."""
    write, read = header_bytes(path)
    return "wal" if (write, read) == (2, 2) else "delete" if (write, read) == (1, 1) else f"unknown({write},{read})"


class Store:
    """An open Hermes store. Use :func:`open_store`."""

    # (st_dev, st_ino) of the file opened: the path named it before and after the open. None when it
    # did not (the file was replaced meanwhile), so nothing may trust the path to be this store.
    file_id: tuple[int, int] | None = None

    def __init__(self, path: Path, conn: apsw.Connection):
        self.path = path
        self.conn = conn
        self.write_stats = WriteStats()
        self._columns: dict[str, list[str]] = {}
        self._tables: set[str] | None = None
        self.note: str | None = None  # how a read-only store was opened, when not the usual way
        self.run_lock: Any = None  # our run lock, released on close (writable opens only)
        self.plan_generation = 0  # bumped by each plan kept in temp tables (see maint.ops.prune.UnitTable)
        self.tidy_on_close = False  # a read-only open made the -wal and -shm: leave the folder as found
        self.dir_fd: int | None = None  # the folder holding the file opened, as it was then (_store_folder)
        self.busy_timeout_ms: int | None = None  # what its busy handler waits (open_store sets it)

    # -- introspection -------------------------------------------------
    @property
    def tables(self) -> set[str]:
        """The store's real tables. A view named like a table we read is not one (hostile try 11, N1: a view
        that never yields a row in place of schema_version made every command spin at its open)."""
        if self._tables is None:
            self._tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return self._tables

    def has_table(self, name: str) -> bool:
        return name in self.tables

    def columns(self, table: str) -> list[str]:
        """The table's columns in declaration order (the store's own layout, whichever version it is)."""
        if table not in self._columns:
            self._columns[table] = [r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")]
        return self._columns[table]

    def has_column(self, table: str, column: str) -> bool:
        return column in self.columns(table)

    def shared_columns(self, other: Store, table: str) -> list[str]:
        """Our columns of *table* that *other* also has, in our order: what can be copied across."""
        return [c for c in self.columns(table) if other.has_column(table, c)]

    # -- integrity -----------------------------------------------------
    def check_lines(self, pragma: str = "quick_check", table: str | None = None) -> list[str]:
        """SQLite's check (of one table and its indexes when *table* is given) as lines; [] when ok. Its rows
        are at most SQLite's error limit (100), whatever the store holds."""
        arg = f"({sql_literal(table)})" if table is not None else ""
        try:
            rows = [r[0] for r in self.conn.execute(f"PRAGMA {pragma}{arg}")]
        except apsw.Error as exc:
            rows = [f"{pragma} stopped: {exc}"]
        if rows == ["ok"]:
            return []
        return [ln for r in rows for ln in str(r).splitlines() if ln.strip() and not ln.startswith("*** in database")]

    def btree_tables(self) -> list[str]:
        """Every table stored as b-trees (the schema table, Hermes's tables, FTS5's shadow tables), not the FTS5
        virtual tables themselves: ``quick_check(T)`` reads T's pages and its indexes' and, unlike a whole-file
        ``quick_check`` in SQLite >= 3.44, does not run FTS5's own check (70 s of the 76 s a 9 GB store took)."""
        names = [r[0] for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage > 0 ORDER BY rootpage")]
        return ["sqlite_master", *names]

    def damage(self) -> list[str]:
        """``quick_check`` of every b-tree table (:meth:`btree_tables`) as "table: line"; [] when the pages read
        clean. What a command checks before it writes rows into a store it did not open to repair."""
        return [f"{table}: {line}" for table in self.btree_tables() for line in self.check_lines("quick_check", table)]

    def system_prompt(self, digest: Any) -> str | None:
        """A content-addressed prompt by its hash (None when absent, or when the store predates the table)."""
        if not isinstance(digest, str) or not digest or not self.has_table("system_prompts"):
            return None
        return self.scalar("SELECT prompt FROM system_prompts WHERE hash = ?", (digest,))

    @property
    def schema_version(self) -> int | None:
        if not self.has_table("schema_version"):
            return None
        row = self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return row[0] if row else None

    def unknown_references(self) -> list[str]:
        """Tables we do not know whose foreign keys would stop (or be broken by) deleting sessions.

        A key to sessions or messages with ON DELETE CASCADE or SET NULL is harmless; any other key
        from a table outside :data:`HANDLED_REFERENCES` makes a delete fail part-way (or, with keys
        off, leave dangling rows), so callers refuse before the first delete.
        """
        found = []
        for table in sorted(self.tables - HANDLED_REFERENCES):
            for row in self.conn.execute(f"PRAGMA foreign_key_list({quote_ident(table)})"):
                target, on_delete = row[2], (row[6] or "").upper()
                if target in ("sessions", "messages") and on_delete not in ("CASCADE", "SET NULL"):
                    found.append(f"{table}.{row[3]} -> {target}")
        return found

    def refuse_unknown_references(self) -> None:
        found = self.unknown_references()
        if found:
            raise StoreError(f"{self.path}: refusing to delete sessions: tables this hermes-maint does not know "
                             f"reference them ({', '.join(found)}); nothing was changed")

    @property
    def fts_tables(self) -> list[str]:
        """Hermes's search indexes present: FTS5 indexes by those names (another virtual table under one is not)."""
        from maint.store.sqlutil import is_fts5_sql, ph

        sql = dict(self.conn.execute(f"SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name IN "
                                     f"({ph(HERMES_FTS)})", HERMES_FTS).fetchall())
        return [t for t in HERMES_FTS if is_fts5_sql(sql.get(t))]

    # -- reads ---------------------------------------------------------
    def rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        return list(self.iter_rows(sql, params))

    def iter_rows(self, sql: str, params: Any = ()) -> Iterator[dict[str, Any]]:
        cur = self.conn.cursor()
        desc = None
        for row in cur.execute(sql, params):
            if desc is None:
                desc = [d[0] for d in cur.get_description()]
            yield dict(zip(desc, row))

    def scalar(self, sql: str, params: Any = ()) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return row[0] if row else None

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Store]:
        """One consistent read view (WAL readers never block Hermes's writers)."""
        self.conn.execute("BEGIN DEFERRED")
        try:
            yield self
        finally:
            self.conn.execute("COMMIT")

    @contextlib.contextmanager
    def planning(self) -> Iterator[Store]:
        """A read snapshot with the read-only cache size, whatever this connection writes with.

        SQLite's sorts (the planners' GROUP BY and window functions) may use as much memory as the
        page cache: at the write cache's size they would grow with the store up to that cap.
        """
        size = self.scalar("PRAGMA cache_size")
        self.conn.execute(f"PRAGMA cache_size=-{READ_CACHE_KB}")
        try:
            with self.snapshot():
                yield self
        finally:
            self.conn.execute(f"PRAGMA cache_size={int(size)}")

    # -- writes --------------------------------------------------------
    @contextlib.contextmanager
    def write(self, limit_s: float | None = -1.0) -> Iterator[apsw.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction; callers keep the body short. A statement still running *limit_s*
        after the transaction began is interrupted and the transaction rolled back: the write lock is never held
        for good (hostile try 10, M6: a trigger of the store's own that never ends kept prune's first delete
        running, Hermes's writes failing, and a nightly loop stalled). By default the ``write_limit_s`` setting
        (far past any bulk job's transaction: 150 ms aimed at; a conversation deleted whole with Hermes stopped
        takes seconds on a 10 GB store); None: no bound (an index rebuild, which holds the lock for its whole run
        by design, with Hermes stopped)."""
        if limit_s is not None and limit_s < 0:
            from maint import settings

            try:
                limit_s = settings.value("write_limit_s")
            except UsageError:  # a config doctor reports as its finding (any other command stopped at the open)
                limit_s = settings.SETTINGS["write_limit_s"].default
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except apsw.BusyError:
            raise StoreError(
                f"{self.path}: another process holds the write lock past the busy timeout; "
                "nothing was changed, try again later"
            ) from None
        except apsw.ReadOnlyError:
            raise StoreError(f"{self.path}: store is read-only; nothing was changed") from None
        if self.replaced():
            with contextlib.suppress(apsw.Error):
                self.conn.execute("ROLLBACK")
                # what we committed goes into the file we opened, and the -wal (the new file's too) is emptied
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            raise StoreError(f"{self.path}: another file was moved to this name while hermes-maint worked on the "
                             "store; stopped before writing to it (what was already done is in the file that was "
                             "moved away); run again")
        started = time.monotonic()
        if limit_s is not None:
            deadline = started + limit_s
            self.conn.set_progress_handler(lambda: time.monotonic() > deadline, PROGRESS_STEPS)
        crash_point("tx_begun")
        try:
            yield self.conn
            crash_point("tx_before_commit")
        except BaseException as exc:
            with contextlib.suppress(apsw.Error):
                self.conn.execute("ROLLBACK")
            if isinstance(exc, apsw.InterruptError) and limit_s is not None and time.monotonic() > deadline:
                raise StoreError(f"{self.path}: a statement was still running {limit_s:g} s into a transaction "
                                 "holding the write lock (a trigger or view in the store that never ends?); stopped, "
                                 "that transaction rolled back (what committed before it stays)") from None
            raise
        else:
            try:
                self.conn.execute("COMMIT")
            except apsw.Error:
                with contextlib.suppress(apsw.Error):
                    self.conn.execute("ROLLBACK")
                raise
            crash_point("tx_committed")
            self._settle_wal()
        finally:
            if limit_s is not None:
                self.conn.set_progress_handler(_let_signals_in, PROGRESS_STEPS)
            self.write_stats.record(time.monotonic() - started)

    # A WAL longer than this many auto-checkpoints' worth after one of our commits is copied back and reset
    # at once, under the write lock (see _settle_wal).
    WAL_SETTLE_CHECKPOINTS = 2
    SETTLE_WAIT_MS = 200

    def _settle_wal(self) -> None:
        """After a commit that left the WAL long (one big transaction: clean-markers' thousands of rows, a
        repair), copy it back and reset it now with a TRUNCATE checkpoint, which holds the write lock while it
        runs. Left long, every Hermes commit after ours runs a checkpoint of its own while other Hermes processes
        commit and reset the WAL: the pattern of SQLite's WAL-reset race, which corrupted stores beside Hermes on
        a SQLite older than 3.51.3 (hostile try 10, M9; 3 of 3 clean-markers runs). Waits briefly for readers;
        when they keep it from finishing, the WAL is left to SQLite as before."""
        try:
            size = os.stat(f"{self.path}-wal").st_size
            pages = self.scalar("PRAGMA wal_autocheckpoint") or 1000
            if size <= self.WAL_SETTLE_CHECKPOINTS * pages * (self.scalar("PRAGMA page_size") or 4096):
                return
            if self.busy_timeout_ms is None:
                return  # not a store open_store made: its busy handler is not ours to swap
            self.conn.set_busy_handler(polling_busy_handler(self.SETTLE_WAIT_MS))
            try:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                self.conn.set_busy_handler(polling_busy_handler(self.busy_timeout_ms))
        except (OSError, apsw.Error):
            return

    def replaced(self) -> bool:
        """True when the store's name no longer names the file we opened (a copy was moved into place): a
        commit would go to the old file while its WAL, kept by name, is replayed into the new one."""
        if self.file_id is None:
            return False
        try:
            st = os.stat(self.path)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self.file_id

    def data_version(self) -> int:
        """Changes whenever another connection commits: how we notice Hermes writing."""
        return self.scalar("PRAGMA data_version")

    # -- Hermes's key/value table -------------------------------------
    def get_meta(self, key: str) -> str | None:
        return self.scalar("SELECT value FROM state_meta WHERE key = ?", (key,))

    def meta_time(self, key: str) -> float | None:
        """A marker's time (seconds since the epoch), or None when it is absent or not a positive finite number."""
        try:
            value = float(self.get_meta(key) or "")
        except ValueError:
            return None
        return value if math.isfinite(value) and value > 0 else None

    def set_meta(self, key: str, value: str) -> None:
        with self.write() as conn:
            conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", (key, value))

    # -- files ---------------------------------------------------------
    def file_sizes(self) -> dict[str, int]:
        out = {}
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            out["db" if not suffix else suffix[1:]] = p.stat().st_size if p.exists() else 0
        return out

    def page_stats(self) -> dict[str, int]:
        page_count = self.scalar("PRAGMA page_count")
        freelist = self.scalar("PRAGMA freelist_count")
        page_size = self.scalar("PRAGMA page_size")
        return {"page_count": page_count, "freelist_count": freelist, "page_size": page_size}

    def close(self) -> None:
        with contextlib.suppress(apsw.Error):
            self.conn.close()
        if self.dir_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.dir_fd)
            self.dir_fd = None
        if self.tidy_on_close:
            self.tidy_on_close = False
            if self.file_id is not None:
                _remove_our_wal_files(self.path, self.file_id)
        if self.run_lock is not None:
            self.run_lock.release()
            self.run_lock = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def scaled_write_limit_s(path: Path | str) -> float:
    """The ``write_limit_s`` setting per started GB of the store (its file and -wal): the bound of work that
    reads the whole store under one lock or in one run (an index rebuild, FTS5's content check, a salvage), so a
    statement a store's own trigger or view keeps running never runs for good (hostile try 11, N2, N3)."""
    from maint import settings

    size = sum(os.path.getsize(p) for p in (Path(path), Path(f"{path}-wal")) if os.path.exists(p))
    return settings.value("write_limit_s") * max(1, math.ceil(size / 1e9))


def _store_folder(path: Path, file_id: tuple[int, int]) -> int | None:
    """A descriptor of the folder that holds the store file we opened, checked to hold it: what we touch beside
    the store later (Hermes's per-session files) is reached from it, never by the path again. The store's owner
    may move her folder away and put a link to another user's at its name after our open (hostile try 10, M1:
    root's delete then removed that user's session files). None when it cannot be had: nothing is touched."""
    real = os.path.realpath(path)
    try:
        fd = os.open(os.path.dirname(real), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.stat(os.path.basename(real), dir_fd=fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) == file_id:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


@contextlib.contextmanager
def as_found(path: Path | str) -> Iterator[None]:
    """Opens inside leave a WAL file that was at rest (no ``-wal``, no ``-shm``) as they found it: what they
    made beside it is removed after (:func:`_remove_our_wal_files`). For the opens that are not
    :func:`open_store`'s (which does this itself): a snapshot's, a damaged store's."""
    path = Path(path)
    at_rest = not any(os.path.lexists(f"{path}{s}") for s in ("-wal", "-shm"))
    try:
        found = os.stat(path)
    except OSError:
        found = None
    try:
        yield
    finally:
        if at_rest and found is not None:
            _remove_our_wal_files(path, (found.st_dev, found.st_ino))


def _remove_our_wal_files(path: Path, file_id: tuple[int, int]) -> None:
    """Remove the empty ``-wal`` and the ``-shm`` a read-only open created (SQLite cannot remove them from a
    read-only connection), so a dry run or a report leaves a store at rest as it found it.

    SQLite does it itself: a read-write connection that closes as the store's last one checkpoints the
    (empty) WAL and removes both; when Hermes has the store open meanwhile it is not the last, and both stay.
    The open is :func:`connect_checked` against *file_id*, the file that was read: a path swapped since then
    is left alone.
    """
    wal = Path(f"{path}-wal")
    try:
        if os.lstat(wal).st_size != 0 or not os.access(path.parent, os.W_OK):
            return
        conn = connect_checked(path, file_id, apsw.SQLITE_OPEN_READWRITE, busy_timeout_ms=0)  # never waits
    except (OSError, apsw.Error, StoreError):
        return
    with contextlib.suppress(apsw.Error):
        conn.close()  # its open read the schema: closing as the last connection removes both files


def _persist_wal(conn: apsw.Connection) -> None:
    """Keep -wal on our last close: Hermes processes may hold the file, so we never remove it."""
    flag = ctypes.c_int(1)
    with contextlib.suppress(apsw.Error, AttributeError, TypeError):
        conn.file_control("main", apsw.SQLITE_FCNTL_PERSIST_WAL, ctypes.addressof(flag))


# How often we try for a lock another connection holds.
BUSY_POLL_S = 0.001


def polling_busy_handler(timeout_ms: int):
    """Try for the lock every millisecond until *timeout_ms*.

    SQLite's own handler sleeps ever longer while it waits (up to 100 ms a try), so behind a steady
    stream of Hermes writers, each fresh and quick to retry, we would come last until we time out.
    Our pauses between transactions give every waiting writer its turn first (see batching.Pacer);
    then we take ours as soon as the lock is free.
    """
    limit = timeout_ms / 1000
    started = 0.0

    def handler(prior_calls: int) -> bool:
        nonlocal started
        now = time.monotonic()
        if prior_calls == 0:
            started = now
        if now - started >= limit:
            return False
        time.sleep(BUSY_POLL_S)
        return True

    return handler


def not_utf8(raw: Any) -> int:
    """1 when *raw* (a text's bytes, ``CAST(x AS BLOB)``) is not UTF-8: apsw could not hand it to Python."""
    if raw.__class__ is not bytes:
        return 0
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return 1
    return 0


def shown_bytes(raw: Any) -> Any:
    """A text's bytes (``CAST(x AS BLOB)``) as text to show: bytes that are not UTF-8 as ``\\xff``."""
    return raw.decode("utf-8", "backslashreplace") if raw.__class__ is bytes else raw


def register_functions(conn: apsw.Connection) -> None:
    """The Python functions our SQL calls, so the planners' SQL means exactly what their Python did.

    ``maint_str`` is ``str()`` (markers are compared as text), ``maint_lower`` is ``str.lower``
    (SQLite's ``lower()`` folds ASCII only) and ``maint_cwd_under`` is the ``--cwd`` prefix rule.
    ``maint_not_utf8`` tells stored bytes apsw cannot decode (:mod:`maint.store.text_check`).
    """
    from maint.store.sqlutil import cwd_under

    conn.create_scalar_function("maint_str", lambda v: None if v is None else str(v), 1, deterministic=True)
    conn.create_scalar_function("maint_lower", lambda v: None if v is None else str(v).lower(), 1,
                                deterministic=True)
    conn.create_scalar_function("maint_not_utf8", not_utf8, 1, deterministic=True)
    conn.create_scalar_function("maint_shown", shown_bytes, 1, deterministic=True)
    conn.create_scalar_function("maint_cwd_under", lambda cwd, prefix: int(cwd_under(cwd, prefix)), 2,
                                deterministic=True)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def connect(target: str, flags: int = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE, *,
            busy_timeout_ms: int | None = None) -> apsw.Connection:
    """Every SQLite connection hermes-maint opens (stores, snapshots, copies): the busy handler is set before
    the first statement. Even a PRAGMA reads the schema, which needs a shared lock: a rollback-journal store's
    writer holds its exclusive lock for each commit, so a first statement without the handler fails at random
    with "database is locked" instead of waiting (*busy_timeout_ms*, default HERMES_MAINT_BUSY_MS)."""
    watched = _file_of(target)
    if watched is not None:
        fifowatch.watch(watched)  # a FIFO at one of its names never holds an open of ours
    conn = apsw.Connection(target, flags=flags)
    timeout = busy_timeout_from_env() if busy_timeout_ms is None else busy_timeout_ms
    conn.set_busy_handler(polling_busy_handler(timeout))
    # Python runs a signal's handler only between its own steps: a statement that runs on (a trigger the
    # store's owner added, fired by our deletes) would hold SIGTERM, Ctrl-C and the write lock until it ends.
    # Calling back into Python now and then lets the handler run there and interrupt the statement.
    conn.set_progress_handler(_let_signals_in, PROGRESS_STEPS)
    files.interruptible(conn)  # and one VM step that runs on is cut short once a stop outlives its grace
    return conn


def _file_of(target: str) -> str | None:
    """The file a connect target names (a path or a ``file:`` URI), None for an in-memory or temporary one."""
    if target in ("", ":memory:") or "mode=memory" in target:
        return None
    if target.startswith("file:"):
        return urllib.parse.unquote(urllib.parse.urlsplit(target).path) or None
    return target


PROGRESS_STEPS = 100_000  # SQLite VM steps between two calls: microseconds apart, a negligible cost


def _let_signals_in() -> bool:
    return False  # a pending signal's handler has run by now; raising there interrupts the statement


def schema_problem(version: Any) -> str | None:
    """Why a store (or snapshot) whose ``schema_version`` reads *version* must not be written: newer than we
    know, or not a whole number at all (text, bytes, 32.5: a layout nobody can know). None for a version we
    know, and for none at all (an older store without the table)."""
    if version is None:
        return None
    if version.__class__ is not int:
        shown = repr(version)
        return f"schema version {shown[:40]}{'...' if len(shown) > 40 else ''} is not a whole number"
    if version > NEWEST_KNOWN_SCHEMA:
        return f"schema version {version} is newer than this hermes-maint knows ({NEWEST_KNOWN_SCHEMA})"
    return None


def busy_timeout_from_env() -> int:
    """HERMES_MAINT_BUSY_MS overrides how long we wait for Hermes's write lock."""
    from maint import settings

    return int(settings.value("busy_ms"))


def flat_memory_pragmas(cache_kb: int) -> tuple[str, ...]:
    """What every connection we open to a store (or a snapshot of one) runs first: a capped page cache and
    temp cache, and no memory-mapped I/O. Mapped pages count in RSS and in a container's memory limit, and
    grow with the file up to the map's size; a SQLite built with a default map size would otherwise use it."""
    return ("PRAGMA mmap_size=0", f"PRAGMA cache_size=-{int(cache_kb)}", f"PRAGMA temp.cache_size=-{TEMP_CACHE_KB}")


def _flat_memory(conn: apsw.Connection, readonly: bool) -> None:
    # Before the first read: memory stays flat in the size of the store. Every cache is capped, and the
    # caps are reached on small stores already. Read-only work streams; bulk deletes ran no faster with
    # 64 MB of cache than with 16 MB (on the scale benchmark's 10k-session store), and the planners' temp
    # tables spill to a temp file past 1 MB.
    for pragma in flat_memory_pragmas(READ_CACHE_KB if readonly else WRITE_CACHE_KB):
        conn.execute(pragma).fetchall()


SHM_ERRORS = {apsw.SQLITE_IOERR_SHMOPEN, apsw.SQLITE_IOERR_SHMSIZE, apsw.SQLITE_IOERR_SHMMAP,
              apsw.SQLITE_IOERR_SHMLOCK}


def _connect(path: Path, readonly: bool, busy_timeout_ms: int) -> tuple[apsw.Connection, str | None]:
    """A connection, and a note when a read-only store had to be opened another way.

    In a folder we cannot write, a WAL store opens read-only as long as its ``-shm`` exists.
    Without one, SQLite cannot build the WAL index: when there is no ``-wal`` (or an empty one)
    nothing lives outside the main file and ``immutable=1`` reads it exactly; a ``-wal`` that holds
    commits cannot be read there, so that case is refused with what to do.
    """
    flags = (apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE) | apsw.SQLITE_OPEN_URI
    conn = None
    try:
        # The first statement waits like every later one (the handler comes with the connection): a
        # rollback-journal store's writer holds its lock for each commit, and refusing on the spot
        # ("database is locked") would fail at random.
        with journal_name_held(path):
            conn = connect(os.path.abspath(path), flags, busy_timeout_ms=busy_timeout_ms)  # never read as a URI
            _flat_memory(conn, readonly)
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return conn, None
    except apsw.IOError as exc:
        if conn is None or conn.system_errno != errno.ENOSPC:
            raise
        conn.close()
        # A WAL store's first read makes its -shm (32 KiB): on a full disk SQLite says only "disk I/O error"
        # (hostile try 12, P13), and doctor could not name the one condition that stops Hermes too.
        if exc.extendedresult in SHM_ERRORS:
            raise StoreError(f"{path}: the filesystem holding the store is full: SQLite cannot create {path}-shm "
                             "to read it; free some space") from None
        raise StoreError(f"{path}: the filesystem holding the store is full: SQLite cannot open it; free some "
                         "space") from None
    except (apsw.ReadOnlyError, apsw.CantOpenError):
        journal = Path(f"{path}-journal")
        if readonly and journal.exists() and journal.stat().st_size > 0:
            # a writer killed mid-transaction (Hermes's, or ours by SIGKILL) in rollback mode: SQLite rolls its
            # journal back at the next open that may write; a read-only one cannot (hostile try 13, Q9)
            raise StoreError(f"{path}: a write interrupted by a crash left {journal.name} (a hot journal) to be "
                             "rolled back, which a read-only command cannot do; start Hermes, or run a writing "
                             "command (e.g. `hermes-maint optimize`): either rolls it back first") from None
        if not readonly or os.access(path.parent, os.W_OK):
            raise
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StoreError(f"{path}: its -wal holds commits but the folder is read-only and has no -shm, so SQLite "
                         "cannot read them; copy the store with its -wal somewhere writable and point --db there")
    conn = connect("file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1", flags,
                   busy_timeout_ms=busy_timeout_ms)
    _flat_memory(conn, readonly)
    conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    return conn, "read-only folder without -shm: read as immutable (there is no WAL to miss)"


def open_store(path: Path | str, *, readonly: bool = False, busy_timeout_ms: int | None = None) -> Store:
    """Open an existing Hermes store or raise :class:`StoreError` with a one-line reason.

    Writable opens also take our own run lock (:mod:`maint.store.runlock`), so two hermes-maint
    processes never work on one store at once, and refuse a schema newer than we know.
    """
    from maint.store.runlock import run_lock

    busy_timeout_ms = busy_timeout_from_env() if busy_timeout_ms is None else busy_timeout_ms
    path = Path(path).expanduser()
    checked = _check_header(path)
    before = checked if readonly else check_writable(path)
    at_rest = readonly and not any(os.path.lexists(f"{path}{s}") for s in ("-wal", "-shm"))
    lock = None if readonly else run_lock(path)
    fds_before = _open_fds()
    try:
        conn, note = _connect(path, readonly, busy_timeout_ms)
    except (apsw.Error, StoreError) as exc:
        if lock is not None:
            lock.release()
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"{path}: cannot open store ({exc})") from None
    register_functions(conn)
    store = Store(path, conn)
    store.busy_timeout_ms = busy_timeout_ms
    store.note = note
    store.run_lock = lock
    try:
        _refuse_opened_elsewhere(path, (before.st_dev, before.st_ino), fds_before)
    except StoreError:
        close_untouched(conn)
        store.close()
        raise
    store.file_id = (before.st_dev, before.st_ino)
    store.dir_fd = _store_folder(path, store.file_id)
    store.tidy_on_close = at_rest and note is None and header_journal_mode(path) == "wal"
    try:
        _persist_wal(conn)
        # Real tables: a view in their place (a recursive one never ends) or a virtual table is not Hermes's.
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                             "AND sql NOT LIKE 'CREATE VIRTUAL%'")}
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            shapes = {r[0]: r[1] for r in conn.execute("SELECT name, type FROM sqlite_master")}
            named = ", ".join(f"{t} (a {shapes[t]} here)" if t in shapes else t for t in missing)
            raise StoreError(f"{path}: not a Hermes session store (missing table {named}); refusing")
        refuse_unreadable_store(conn, path)
        needed = {"id", "source", "started_at", "ended_at", "parent_session_id"}
        if not needed <= set(store.columns("sessions")):
            lacking = ", ".join(sorted(needed - set(store.columns("sessions"))))
            raise StoreError(f"{path}: not a Hermes session store (sessions table lacks {lacking}); refusing")
        problem = schema_problem(store.schema_version)
        if problem:
            if not readonly:
                raise StoreError(f"{path}: {problem}; refusing to write it (read-only commands still work; "
                                 "upgrade hermes-maint)")
            log.warning("%s: %s; reading only", path, problem)
        conn.execute("PRAGMA foreign_keys=ON")
    except StoreError:
        store.close()
        raise
    except apsw.BusyError:
        store.close()
        raise StoreError(f"{path}: store is locked by another process past the busy timeout") from None
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        store.close()
        raise CorruptStore(f"{path}: corrupt store ({exc}); refusing, nothing was written") from None
    except apsw.Error as exc:
        store.close()
        raise StoreError(f"{path}: cannot read store ({exc})") from None
    return store
