"""Giving space back: FTS optimize, WAL checkpoint and an in-place VACUUM, or a compacted copy.

VACUUM rewrites the file through SQLite's own pager, so the store keeps its
inode (Hermes halts its writers when the file is replaced) and its -wal/-shm.
It needs roughly a full copy of free space; we refuse up front rather than
fail half way.

A replicated store (Litestream) is never rewritten in place: the rewrite of
every page under a running replicator is how users lost replicated stores.
``VACUUM INTO`` writes a compacted copy instead, read from one snapshot while
Hermes keeps writing, for the operator to swap in their own way.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import apsw

from maint import files
from maint.crashpoints import crash_point
from maint.errors import MaintError, StoreError, UsageError
from maint.flow import target_config
from maint.store.connection import REQUIRED_TABLES, Store, connect, header_journal_mode, open_store
from maint.store.holders import Holder, HolderReport, find_holders

if TYPE_CHECKING:
    from maint.store.targets import StoreTarget

MIN_MARGIN_BYTES = 64 * 2**20
DiskUsage = Callable[[Path], Any]  # shutil.disk_usage, or a test's stand-in with .free


def with_margin(size: int) -> int:
    """Free space a full copy of *size* bytes needs: the copy plus a margin that keeps the disk usable."""
    return size + max(MIN_MARGIN_BYTES, size // 10)


def file_size_limit() -> int | None:
    """The largest file this process may write (``ulimit -f``, RLIMIT_FSIZE), in bytes; None when unlimited."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def room_problem(folder: Path, need_bytes: int, disk_usage: DiskUsage = shutil.disk_usage) -> str | None:
    """Why *folder* cannot take a new file of about *need_bytes*: a file size limit below it, or free space
    short of it plus the margin; None when it can. Asked before every full copy, so a copy never fails half way."""
    limit = file_size_limit()
    if limit is not None and need_bytes > limit:
        return (f"the copy needs about {need_bytes} bytes but this process may write files of at most {limit} "
                "bytes (the file size limit, ulimit -f)")
    free = disk_usage(folder).free
    need = with_margin(need_bytes)
    if free < need:
        return f"not enough free space: {free} bytes free, need about {need} ({need_bytes} bytes plus margin)"
    return None


# A file within this much of the size limit when a write failed reached the limit (SQLite writes a page at a time).
_LIMIT_SLACK = 1 << 17


def write_limit_reached(path: Path | None, exc: BaseException) -> str | None:
    """What a failed write of *path* ran into, when it was the disk or the file size limit, else None.

    ENOSPC/EDQUOT and SQLite's SQLITE_FULL are a full disk; EFBIG is the size limit. SQLite reports a write
    refused with EFBIG as a plain I/O error ("disk I/O error", or "not an error" from a backup step), so an
    I/O error on a file that stands at the limit, or on a disk with no room left, is named as such too.
    """
    import errno

    limit = file_size_limit()
    at_limit = "the file size limit (ulimit -f" + (f": {limit} bytes" if limit is not None else "") + ") was reached"
    if isinstance(exc, apsw.FullError) or isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return at_limit
    if isinstance(exc, apsw.IOError) and path is not None:
        try:
            size = os.stat(path).st_size
            free = shutil.disk_usage(Path(path).parent).free
        except OSError:
            return None
        if limit is not None and size + _LIMIT_SLACK >= limit:
            return at_limit
        if free < _LIMIT_SLACK:
            return "disk full"
    return None


def space_shortfall(store: Store, disk_usage: DiskUsage = shutil.disk_usage) -> tuple[int, int, int] | None:
    """(free, needed, store size) when the filesystem lacks room for a VACUUM copy, else None."""
    size = sum(store.file_sizes().values())
    free = disk_usage(store.path.parent).free
    need = with_margin(size)
    return (free, need, size) if free < need else None


LITESTREAM = "litestream"
REPLICATED_ADVICE = ("an in-place VACUUM rewrites every page under the replicator and has corrupted replicated "
                     "stores; `hermes-maint optimize --into PATH` writes a compacted copy to swap in your own way")


@dataclass
class Replication:
    replicator: str
    evidence: str

    def describe(self) -> str:
        return f"replicated by {self.replicator} ({self.evidence})"


class ReplicatedStore(MaintError):
    """An in-place rewrite refused because a replicator follows the store."""


def litestream_dir(db: Path) -> Path:
    """Litestream keeps its state for ``dir/state.db`` in ``dir/.state.db-litestream``."""
    return db.parent / f".{db.name}-litestream"


def is_litestream(holder: Holder) -> bool:
    """The process is Litestream: its name, its executable, or the script an interpreter runs."""
    names = {holder.name} | {Path(arg).name for arg in holder.argv[:2]}
    return LITESTREAM in names


def detect_replication(db: Path, *, configured: bool, holders: HolderReport | None) -> Replication | None:
    """A replicator of *db*: a Litestream process holding it, Litestream's folder beside it, or config."""
    for holder in (holders.holders if holders else []):
        if is_litestream(holder):
            return Replication("Litestream", f"pid {holder.pid} {holder.cmdline or holder.name}".rstrip())
    folder = litestream_dir(Path(db))
    if folder.is_dir():
        return Replication("Litestream", f"{folder} exists")
    if configured:
        return Replication("a replicator", "config.yaml sets hermes_maint.replicated: true")
    return None


def refuse_if_replicated(db: Path, *, configured: bool,
                         holders: Callable[[Path], HolderReport] = find_holders) -> None:
    found = detect_replication(db, configured=configured, holders=holders(db))
    if found:
        raise ReplicatedStore(f"{db}: refusing an in-place VACUUM: the store is {found.describe()}; "
                              f"{REPLICATED_ADVICE}")


def check_space(store: Store, disk_usage: DiskUsage = shutil.disk_usage) -> None:
    short = space_shortfall(store, disk_usage)
    if short:
        free, need, size = short
        raise MaintError(f"{store.path}: not enough free space for VACUUM: {free} bytes free, "
                         f"need about {need} (store {size} bytes plus margin); nothing was changed")


def optimize_fts(store: Store) -> list[str]:
    """Merge each FTS index into one segment, one short transaction per index."""
    done = []
    for table in store.fts_tables:
        with store.write() as conn:
            conn.execute(f"INSERT INTO {table}({table}) VALUES('optimize')")
        done.append(table)
    return done


def checkpoint(store: Store) -> tuple[int, int, int]:
    """PASSIVE: copies what it can without waiting on readers; never removes the WAL."""
    row = store.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return tuple(row) if row else (0, 0, 0)


def vacuum_in_place(store: Store) -> bool:
    """VACUUM, then the checkpoint that moves the rewritten store out of the -wal. True when that checkpoint
    finished; False when a process's open read transaction kept it from finishing (the rewritten pages
    wait in the -wal, the store reads the same, until that reader ends and a later checkpoint runs)."""
    crash_point("vacuum")
    try:
        store.conn.execute("VACUUM")
    except Exception as exc:  # apsw.BusyError and friends carry no common base we can name here
        name = type(exc).__name__
        if name == "BusyError":
            raise StoreError(f"{store.path}: another process holds the store past the busy timeout; "
                             "VACUUM not run, the store is unchanged") from None
        if name == "FullError":
            raise StoreError(f"{store.path}: disk full during VACUUM; it was rolled back, the store is intact") \
                from None
        raise
    try:  # shrink the WAL the rewrite filled; truncating keeps the file, never removes it
        row = store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except Exception:  # readers still on old frames: a later checkpoint finishes the job
        checkpoint(store)
        return False
    busy, log, done = tuple(row) if row else (0, -1, -1)
    return not busy and done == log  # (0, -1, -1): not a WAL store, nothing to move


def content_fingerprint(store: Store) -> dict:
    """Row counts and a checksum of every session and message row: proof that optimize changed no data."""
    out = {}
    for table, order in (("sessions", "id"), ("messages", "id")):
        h = hashlib.sha256()
        n = 0
        for row in store.conn.execute(f"SELECT * FROM {table} ORDER BY {order}"):
            h.update(repr(row).encode())
            n += 1
        out[table] = (n, h.hexdigest())
    return out


@dataclass
class OptimizeResult:
    fts_optimized: list[str]
    bytes_before: int
    bytes_after: int
    seconds: float
    checkpoint_blocked: str | None = None  # who may hold the read transaction that kept the WAL from emptying


def optimize(store: Store, disk_usage: DiskUsage = shutil.disk_usage, *, replicated: bool = False,
             holders: Callable[[Path], HolderReport] = find_holders) -> OptimizeResult:
    """In place: refused first when a replicator follows the store, then when space is short."""
    refuse_if_replicated(store.path, configured=replicated, holders=holders)
    before = sum(store.file_sizes().values())
    check_space(store, disk_usage)
    started = time.monotonic()
    tables = optimize_fts(store)
    checkpoint(store)
    blocked = None
    if not vacuum_in_place(store):
        report = holders(store.path)
        blocked = report.describe() if not report.quiet else "a process this scan cannot see"
    after = sum(store.file_sizes().values())
    return OptimizeResult(tables, before, after, time.monotonic() - started, blocked)


@dataclass
class CopyResult:
    path: str
    bytes_before: int
    bytes_after: int
    seconds: float
    journal_mode: str
    sessions: int
    messages: int


def check_into(dest: Path) -> Path:
    """--into must name a new file in an existing folder; anything else is bad input (nothing written)."""
    dest = Path(dest).expanduser()
    companion = files.store_companion(dest)
    if companion:
        raise UsageError(f"--into: {dest} {companion} (expected a new file under another name)")
    if os.path.lexists(dest):
        raise UsageError(f"--into: {dest} already exists (expected a new file path; nothing is ever overwritten)")
    if not dest.parent.is_dir():
        raise UsageError(f"--into: folder {dest.parent} does not exist (expected a new file in an existing folder)")
    return dest


def remove_stale_copies(folder: files.Folder, name: str) -> list[str]:
    """Temporary copies a killed ``--into`` run left for this same name (our temporary files no live run
    holds), and the journal files SQLite left beside them (:meth:`maint.files.Folder.clear_leftovers`)."""
    return folder.clear_leftovers(name)


def vacuum_into(store: Store, dest: Path, disk_usage: DiskUsage = shutil.disk_usage) -> CopyResult:
    """A compacted copy of the store at *dest*; the live store is only read.

    The copy is made under our temporary name (:mod:`maint.files`), checked to still be that same
    regular file after SQLite wrote it, given the store's journal mode, verified (quick_check, Hermes
    tables), fsynced, and linked to *dest* without ever replacing an existing file.
    """
    dest = check_into(dest)
    before = sum(store.file_sizes().values())
    problem = room_problem(dest.parent, before, disk_usage)
    if problem:
        raise MaintError(f"{dest.parent}: no room for the copy of the store ({before} bytes): {problem}; nothing was "
                         "written")
    with files.Folder.open(dest.parent, follow_links=True, what="folder", store=store.path,
                           databases=True) as folder:
        remove_stale_copies(folder, dest.name)
        temp, fd = folder.temporary(dest.name)
        tmp = folder.path / temp
        try:
            sessions, messages, started = _vacuum_verified(store, tmp, fd, dest)
            os.fsync(fd)
            # never replaces a file that appeared meanwhile
            folder.publish(temp, dest.name)
            folder.sync()
        except FileExistsError:
            raise MaintError(f"{dest}: appeared while the copy was written; not replaced, nothing was kept") from None
        finally:
            os.close(fd)
            for leftover in (temp, f"{temp}-wal", f"{temp}-shm", f"{temp}-journal"):
                folder.unlink(leftover)
    return CopyResult(str(dest), before, dest.stat().st_size, time.monotonic() - started,
                      header_journal_mode(dest), sessions, messages)


def _vacuum_verified(store: Store, tmp: Path, fd: int, dest: Path) -> tuple[int, int, float]:
    """VACUUM INTO our temporary file *tmp* (open as *fd*), given the store's journal mode and verified."""
    made = os.fstat(fd)
    started = time.monotonic()
    crash_point("vacuum_into")
    try:
        store.conn.execute("VACUUM INTO ?", (str(tmp),))
    except (apsw.FullError, apsw.IOError) as exc:
        reason = write_limit_reached(tmp, exc)
        if reason is None:
            raise
        raise MaintError(f"{dest.parent}: {reason} while writing the copy; nothing was kept") from None
    now = os.lstat(tmp)
    if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (made.st_dev, made.st_ino):
        raise MaintError(f"{tmp}: replaced by something else while the copy was written; nothing was kept")
    # The copy is read back exactly as written (immutable: no journal beside it is looked at) and given the
    # store's journal mode on our own descriptor: a read-write open by name would roll back a -journal another
    # user planted beside our temporary name, and the "verified" copy would be their database (hostile try 4, G8).
    copy = connect("file:" + urllib.parse.quote(str(tmp)) + "?mode=ro&immutable=1",
                   apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        check = copy.execute("PRAGMA quick_check").fetchall()
        tables = {r[0] for r in copy.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if check != [("ok",)] or not set(REQUIRED_TABLES) <= tables:
            raise MaintError(f"{tmp}: the copy did not verify ({check[0][0] if check else 'no answer'}); "
                             "nothing was kept")
        sessions = copy.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        messages = copy.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    finally:
        copy.close()
    if header_journal_mode(store.path) == "wal":
        os.pwrite(fd, b"\x02\x02", 18)  # header bytes 18-19: a WAL file (what PRAGMA journal_mode=WAL writes)
    return sessions, messages, started


@dataclass(frozen=True)
class OptimizeRequest:
    """``hermes-maint optimize``'s options: in place, or a compacted copy *into* a new file (checked when made)."""

    into: Path | None = None

    def __post_init__(self) -> None:
        if self.into is not None:
            object.__setattr__(self, "into", check_into(self.into))


def optimize_store(target: StoreTarget, req: OptimizeRequest) -> dict[str, Any]:
    """``hermes-maint optimize`` on one store: in place (refused for a replicated store), or the copy; the report."""
    if req.into is not None:
        with open_store(target.path, readonly=True) as store:
            c = vacuum_into(store, req.into)
        return {"into": c.path, "fts_optimized": [], "bytes_before": c.bytes_before, "bytes_after": c.bytes_after,
                "bytes_freed": max(0, c.bytes_before - c.bytes_after), "seconds": round(c.seconds, 2),
                "journal_mode": c.journal_mode, "sessions": c.sessions, "messages": c.messages}
    replicated = target_config(target).maint("replicated") is True
    with open_store(target.path) as store:
        r = optimize(store, replicated=replicated)
    return {"into": None, "fts_optimized": r.fts_optimized, "bytes_before": r.bytes_before,
            "bytes_after": r.bytes_after, "bytes_freed": max(0, r.bytes_before - r.bytes_after),
            "seconds": round(r.seconds, 2), "journal_mode": None, "sessions": None, "messages": None,
            "checkpoint_blocked": r.checkpoint_blocked}
