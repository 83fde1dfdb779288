"""backup: a consistent online snapshot of a store, verified before it counts, then rotated.

The copy goes through SQLite's online backup API from our own connection to the
live store, a bounded number of pages per step:

* **WAL store** (Hermes's default): the source connection holds one read
  transaction for the whole copy. A WAL reader never blocks a writer, so Hermes
  keeps appending; the read transaction pins one snapshot, so the copy never
  restarts (without it, every Hermes commit restarts the copy from page 1) and
  the session/message counts taken inside it are the snapshot's own.
* **rollback-journal store**: a reader does block commits, so each step is its
  own short read transaction (about ``HERMES_MAINT_BATCH_MS``), with a pause
  between steps that every waiting writer outlasts (see batching.Pacer). A
  commit between steps restarts the copy; after ``MAX_RESTARTS`` we refuse
  rather than hold the lock: such a store needs a quiet moment.

``--compact`` first makes that copy privately, then ``VACUUM INTO`` the
snapshot from the private copy. VACUUM INTO is one statement, hence one read
transaction for the whole rewrite: on the live store it would keep a WAL from
being checkpointed (or, in rollback mode, keep every writer waiting) for all
that time, and its moment could not be pinned for the count check.

The snapshot is one self-contained file (rollback-journal header, no -wal or
-shm), created exclusively (O_EXCL|O_NOFOLLOW, 0600) under a temporary name in
a 0700 folder, checked (``PRAGMA quick_check``, Hermes's tables, counts equal to
the source's at the snapshot's moment), fsynced, then linked to its final name
(never over an existing file). A sidecar ``<name>.json`` records the
verification, the counts and the file's inode, size and SHA-256 (restore compares
them: :func:`maint.ops.restore.vouch_for`); rotation removes only files with
such a sidecar that still describes them, so it never touches a file it did
not make.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import apsw

from maint import files
from maint.crashpoints import crash_point
from maint.errors import MaintError, StoreError, UsageError
from maint import json_text
from maint.export.files import safe_name
from maint.store.batching import Batcher, pacer_for
from maint.store.connection import (READ_CACHE_KB, REQUIRED_TABLES, Store, as_found, check_regular_file, connect,
                                    connect_checked, flat_memory_pragmas, open_store, refuse_unreadable_store)
from maint.store.snapshots import MAX_RESTARTS, default_folder, prepare_folder, refuse_untrusted_folder
from maint.store.targets import StoreTarget, hermes_home
from maint.ops.vacuum import DiskUsage, file_size_limit, with_margin, write_limit_reached

MADE_BY = "hermes-maint"
SIDECAR_VERSION = 2  # 2: the snapshot's sha256 (restore compares it; a version 1 sidecar has counts and size)
# state-<label>-<UTC time>[.pre-restore][-n].db
SNAPSHOT_RE = re.compile(r"^state-(?P<label>[A-Za-z0-9._-]+?)-(?P<stamp>\d{8}T\d{6}Z)"
                         r"(?P<kind>\.pre-restore)?(?:-(?P<n>\d+))?\.db$")
PARTIAL_RE = re.compile(r"^\.state-[A-Za-z0-9._-]+-\d{8}T\d{6}Z(\.pre-restore)?(-\d+)?\.db"
                        r"(\.copy|\.json\.[0-9a-f]{16})?\.partial$")
SIDECAR_LIMIT = 1 << 20
FIRST_STEP_PAGES = 64
MAX_STEP_PAGES = 1 << 20


def store_label(path: Path, profile: str | None) -> str:
    """What the file name says the snapshot is of: the profile, or the store's own name for other files."""
    if profile:
        return safe_name(profile, "")
    resolved = Path(path).expanduser().resolve()
    home = hermes_home().expanduser().resolve()
    if resolved == home / "state.db":
        return "default"
    if resolved.parent.parent == home / "profiles" and resolved.name == "state.db":
        return safe_name(resolved.parent.name, "")
    # another file: its own name, or its folder's when it is called state.db too
    return safe_name(resolved.parent.name if resolved.stem == "state" else resolved.stem, "")


def _folder(path: Path, store: Path | None = None) -> files.Folder:
    """The snapshot folder *path* (a real path from :func:`prepare_folder`, or one the operator named); with
    *store*, the folder a copy of that store is written to (see :meth:`maint.files.Folder.open`)."""
    return files.Folder.open(path, follow_links=True, what="snapshot folder", store=store, databases=store is not None)


def counts(conn: apsw.Connection) -> dict[str, int]:
    return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchall()[0][0] for t in ("sessions", "messages")}


# The verifying read of a snapshot (quick_check reads every page) keeps memory flat in the size of the
# file: no memory-mapped I/O (mapped pages count in RSS and in a container's memory limit: a 1 GiB
# map took a 9 GB store's backup to 1.3 GB) and a page cache of a few MB, as every store connection.
VERIFY_CACHE_KB = READ_CACHE_KB


def open_readonly(path: Path) -> apsw.Connection:
    conn = connect(f"file:{quote(str(path))}?mode=ro", apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        for pragma in flat_memory_pragmas(VERIFY_CACHE_KB):
            conn.execute(pragma).fetchall()
    except apsw.Error:
        conn.close()
        raise
    return conn


def check_file(path: Path) -> dict[str, Any]:
    """quick_check, Hermes's tables and the counts of a snapshot file; raises StoreError if it is not intact.
    A snapshot at rest is left as found (a copy of a WAL store would gain a -wal and a -shm)."""
    with as_found(path):
        return _check_file(path)


def _check_file(path: Path) -> dict[str, Any]:
    try:
        conn = open_readonly(path)
    except apsw.Error as exc:
        raise StoreError(f"{path}: cannot open as SQLite ({exc}); not a usable snapshot") from None
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            raise StoreError(f"{path}: not a Hermes store (missing table {', '.join(missing)}); refusing")
        refuse_unreadable_store(conn, path)
        problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise StoreError(f"{path}: failed PRAGMA quick_check ({'; '.join(map(str, problems[:3]))}); refusing")
        out = counts(conn)
        out["schema_version"] = conn.execute("SELECT MAX(version) FROM schema_version").fetchall()[0][0] \
            if "schema_version" in tables else None
        out["page_size"] = conn.execute("PRAGMA page_size").fetchall()[0][0]
        out["page_count"] = conn.execute("PRAGMA page_count").fetchall()[0][0]
        return out
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        raise StoreError(f"{path}: corrupt ({exc}); refusing") from None
    finally:
        conn.close()


HASH_CHUNK = 1 << 20


def sha256_fd(fd: int, size: int | None = None) -> str:
    """The SHA-256 of the file open at *fd* (its first *size* bytes), read in 1 MiB chunks: memory stays flat."""
    h = hashlib.sha256()
    offset = 0
    while size is None or offset < size:
        chunk = os.pread(fd, HASH_CHUNK if size is None else min(HASH_CHUNK, size - offset), offset)
        if not chunk:
            break
        h.update(chunk)
        offset += len(chunk)
    return h.hexdigest()


def set_rollback_header(fd: int) -> None:
    """Header bytes 18-19 = 1: a rollback-journal file that opens without -wal/-shm.

    The backup API copies page 1 as it is, so a copy of a WAL store says "WAL". The
    copy is closed, never was in WAL mode and has no -wal: only the marker changes.
    """
    os.pwrite(fd, b"\x01\x01", 18)


@dataclass
class CopyStats:
    counts: dict[str, int]
    steps: int = 0
    restarts: int = 0
    journal_mode: str = "wal"
    longest_step_ms: float = 0.0


def _step_target_s() -> float:
    return Batcher().target_s


def _counts_or_none(conn: apsw.Connection, tolerate: bool) -> dict[str, int]:
    try:
        return counts(conn)
    except apsw.Error:
        if not tolerate:
            raise
        return {}  # a damaged store is still copied as it is (restore's safety snapshot)


def copy_online(store: Store, dest: Path, *, on_step: Callable[[int, int], None] | None = None,
                damaged_ok: bool = False) -> CopyStats:
    """Backup API from *store* into the empty file *dest*, bounded steps; counts at the copy's moment."""
    mode = str(store.scalar("PRAGMA journal_mode")).lower()
    wal = mode == "wal"
    src = store.conn
    dst = connect(str(dest), apsw.SQLITE_OPEN_READWRITE)
    for pragma in flat_memory_pragmas(VERIFY_CACHE_KB):
        dst.execute(pragma).fetchall()
    stats = CopyStats(counts={}, journal_mode=mode)
    target = _step_target_s()
    pages = FIRST_STEP_PAGES
    pacer = None if wal else pacer_for(store)
    try:
        dst.execute("PRAGMA journal_mode=OFF")  # a private file: a crash discards it anyway
        dst.execute("PRAGMA synchronous=OFF")  # we fsync once, at the end
        if wal:
            src.execute("BEGIN")
            stats.counts = _counts_or_none(src, damaged_ok)  # the first read pins the copy's snapshot
            src.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        try:
            with dst.backup("main", src, "main") as backup:
                previous = None
                while True:
                    if not wal:
                        # A read first, so the step runs inside this transaction (a bare BEGIN opens none and
                        # the step would take and drop its own) and the counts below see the pages it copied.
                        src.execute("BEGIN")
                        src.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                    started = time.monotonic()
                    try:
                        done = backup.step(pages)
                        if done and not wal:
                            stats.counts = _counts_or_none(src, damaged_ok)  # the last step's transaction
                    finally:
                        if not wal:
                            src.execute("COMMIT")
                    took = time.monotonic() - started
                    stats.steps += 1
                    stats.longest_step_ms = max(stats.longest_step_ms, took * 1000)
                    if previous is not None and backup.remaining >= previous:  # no progress: restarted
                        stats.restarts += 1
                        if stats.restarts > MAX_RESTARTS:
                            raise MaintError(
                                f"{store.path}: the store changed {stats.restarts} times during the copy; a "
                                "rollback-journal store needs a moment without writes for a consistent online "
                                "copy (run backup at a quiet time, or keep the store in WAL mode); no snapshot "
                                "was made")
                    previous = backup.remaining
                    if on_step:
                        on_step(backup.pagecount - backup.remaining, backup.pagecount)
                    crash_point("backup_step")
                    if done:
                        break
                    if took > 0:
                        pages = int(min(MAX_STEP_PAGES, max(8, pages * min(4.0, target / took))))
                    if pacer:
                        pacer.pause()
        finally:
            if wal:
                src.execute("COMMIT")
    except apsw.BusyError:
        raise StoreError(f"{store.path}: another process holds the store past the busy timeout; "
                         "no snapshot was made") from None
    except apsw.FullError:
        raise MaintError(f"{dest.parent}: disk full while writing the snapshot; no snapshot was made") from None
    finally:
        dst.close()
    return stats


def vacuum_into(src_path: Path, dest: Path) -> None:
    """VACUUM INTO the empty file *dest* from a private copy nobody else writes."""
    conn = open_readonly(src_path)
    try:
        conn.execute("VACUUM INTO ?", (str(dest),))
    except apsw.FullError:
        raise MaintError(f"{dest.parent}: disk full while compacting the snapshot; no snapshot was made") from None
    finally:
        conn.close()


@dataclass
class Snapshot:
    path: Path
    store: Path
    label: str
    kind: str
    created_at: str
    method: str
    bytes: int
    sessions: int
    messages: int
    seconds: float = 0.0
    steps: int = 0
    restarts: int = 0
    source_journal_mode: str = ""
    longest_step_ms: float = 0.0
    verified: bool = True
    problem: str = ""
    copy_seconds: float = 0.0  # the backup API (and VACUUM INTO) part
    verify_seconds: float = 0.0  # quick_check and counts of the new file
    hash_seconds: float = 0.0  # the sidecar's sha256 of the new file

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["path"], out["store"] = str(self.path), str(self.store)
        return out


@dataclass
class Listed:
    """A file in the folder that looks like one of ours, and whether its sidecar vouches for it."""

    path: Path
    verified: bool
    reason: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


def sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _sidecar(folder: files.Folder, name: str) -> Any:
    """A sidecar's JSON (None when absent or unreadable); a FIFO or link there is never read."""
    try:
        data = folder.read(name, limit=SIDECAR_LIMIT, what="snapshot sidecar")
        return None if data is None else json_text.loads(data)
    except (MaintError, OSError, ValueError):
        return None


def list_snapshots(folder: Path, store_owner: int | None = None, *, opened: files.Folder | None = None
                   ) -> list[Listed]:
    """The files in *folder* named like snapshots; verified only where we (or root, or *store_owner*) wrote
    both the file and its sidecar: whoever else can write in a shared folder never decides which snapshots
    are this store's (and so which are rotated away). *opened*: the folder as the caller holds it open."""
    if opened is None:
        if not os.path.lexists(folder):
            return []
        with _folder(folder) as held:
            return list_snapshots(folder, store_owner, opened=held)
    out = []
    for name in opened.names():
        if not SNAPSHOT_RE.match(name):
            continue
        path = folder / name
        st = opened.lstat(name)
        if st is None:
            continue
        if not stat.S_ISREG(st.st_mode):
            out.append(Listed(path, False, "not a regular file"))
            continue
        meta = _sidecar(opened, name + ".json")
        side = opened.lstat(name + ".json")
        foreign = files.untrusted_by(st, store_owner) or (side and files.untrusted_by(side, store_owner))
        if meta is None:
            out.append(Listed(path, False, "no readable sidecar (not verified by hermes-maint)"))
        elif not isinstance(meta, dict) or meta.get("made_by") != MADE_BY or meta.get("file") != name:
            out.append(Listed(path, False, "sidecar not written by hermes-maint for this file"))
        elif foreign:
            out.append(Listed(path, False, f"not ours: the snapshot or its sidecar {foreign}"))
        elif meta.get("quick_check") != "ok":
            out.append(Listed(path, False, f"kept as found: {meta.get('quick_check')}", meta))
        elif not all(type(meta.get(k, 0)) is int for k in ("inode", "bytes", "created_ns")):
            out.append(Listed(path, False, "sidecar damaged (inode, bytes and created_ns must be whole numbers)"))
        elif meta.get("inode") != st.st_ino or meta.get("bytes") != st.st_size:
            out.append(Listed(path, False, "file differs from the one hermes-maint verified", meta))
        else:
            out.append(Listed(path, True, "", meta))
    return out


def remove_stale_partials(folder: Path) -> list[str]:
    """Temporary files of interrupted backups (their writer's lock is gone); a running backup's are kept."""
    with _folder(folder) as opened:
        removed = opened.clear_leftovers(pattern=PARTIAL_RE)
        # Sidecars whose snapshot never got its final name (killed between the two).
        for name in opened.names():
            if name.endswith(".db.json") and SNAPSHOT_RE.match(name[:-5]) and opened.lstat(name[:-5]) is None:
                meta = _sidecar(opened, name)
                if isinstance(meta, dict) and meta.get("made_by") == MADE_BY and opened.unlink(name):
                    removed.append(name)
    return removed


def estimate_bytes(store: Store, compact: bool) -> tuple[int, int]:
    """(snapshot size, peak extra disk use) from the page counts."""
    p = store.page_stats()
    full = p["page_count"] * p["page_size"]
    if not compact:
        return full, full
    small = (p["page_count"] - p["freelist_count"]) * p["page_size"]
    return small, full + small


def check_room(folder: Path, need_bytes: int, disk_usage: DiskUsage) -> None:
    limit = file_size_limit()
    if limit is not None and need_bytes > limit:
        raise MaintError(f"{folder}: the snapshot needs about {need_bytes} bytes but this process may write files of "
                         f"at most {limit} bytes (the file size limit, ulimit -f); nothing was written")
    free = disk_usage(folder).free
    need = with_margin(need_bytes)
    if free < need:
        raise MaintError(f"{folder}: not enough free space for the snapshot: {free} bytes free, need about {need} "
                         f"({need_bytes} bytes plus margin); nothing was written")


def _reserve(folder: files.Folder, label: str, kind: str, stamp: str) -> tuple[str, Path, int]:
    """A final name nobody uses and its partial file, created exclusively and locked while we write."""
    suffix = ".pre-restore" if kind == "pre-restore" else ""
    present = folder.names()
    for n in range(1, 1000):
        name = f"state-{label}-{stamp}{suffix}{'' if n == 1 else f'-{n}'}.db"
        if folder.lstat(name) is not None or folder.lstat(name + ".json") is not None or any(
                p.startswith(f".{name}") for p in present):  # a leftover of a killed run
            continue
        try:
            fd = folder.create(f".{name}.partial")
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return name, folder.path / f".{name}.partial", fd
    raise MaintError(f"{folder.path}: no free snapshot name for {label} at {stamp}")


def _write_sidecar(folder: files.Folder, name: str, meta: dict[str, Any]) -> None:
    """Written whole under a private name (locked, so a cleanup leaves it alone), then linked into place."""
    side = name + ".json"
    tmp = f".{side}.{secrets.token_hex(8)}.partial"
    fd = folder.create(tmp)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, (json.dumps(meta, indent=1) + "\n").encode())
        os.fsync(fd)
        crash_point("sidecar_partial")
        folder.publish(tmp, side)
    finally:
        folder.unlink(tmp)
        os.close(fd)


def _open_source(path: Path, damaged_ok: bool) -> Store:
    if not damaged_ok:
        return open_store(path, readonly=True)
    conn = connect_checked(Path(path), check_regular_file(Path(path)), apsw.SQLITE_OPEN_READONLY)
    for pragma in flat_memory_pragmas(VERIFY_CACHE_KB):
        conn.execute(pragma).fetchall()
    return Store(Path(path), conn)


def take_snapshot(store_path: Path, folder: Path, *, label: str, kind: str = "backup", compact: bool = False,
                  disk_usage: DiskUsage = shutil.disk_usage, damaged_ok: bool = False,
                  on_step: Callable[[int, int], None] | None = None) -> Snapshot:
    """Copy, verify, fsync, sidecar, link: returns the verified snapshot. Writes nothing to the store.

    *damaged_ok* (restore's safety copy of a store that may be why one restores): a store that is not
    an intact Hermes store is still copied as it is and kept, its sidecar saying what failed.
    """
    with _folder(folder, store=store_path) as opened:
        return _take(store_path, opened, label, kind, compact, disk_usage, damaged_ok, on_step)


def _take(store_path: Path, folder: files.Folder, label: str, kind: str, compact: bool, disk_usage: DiskUsage,
          damaged_ok: bool, on_step: Callable[[int, int], None] | None) -> Snapshot:
    started = time.monotonic()
    created_ns = time.time_ns()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(created_ns / 1e9))
    with _open_source(store_path, damaged_ok) as store:
        size, peak = estimate_bytes(store, compact)
        check_room(folder.path, peak, disk_usage)
        try:
            name, partial, fd = _reserve(folder, label, kind, stamp)
        except OSError as exc:
            raise _os_error(folder.path, exc) from None
        final = folder.path / name
        made: list[str] = [partial.name]
        try:
            if compact:
                copy = folder.path / f".{name}.copy.partial"
                copy_fd = folder.create(copy.name)
                made.append(copy.name)
                try:
                    stats = copy_online(store, copy, on_step=on_step)
                    set_rollback_header(copy_fd)  # VACUUM INTO then reads it without -wal/-shm
                finally:
                    os.close(copy_fd)
            else:
                stats = copy_online(store, partial, on_step=on_step, damaged_ok=damaged_ok)
        except OSError as exc:
            _discard(folder, made, fd)
            raise _os_error(folder.path, exc) from None
        except apsw.Error as exc:
            reason = write_limit_reached(folder.path / made[-1], exc)  # before the partial file goes
            _discard(folder, made, fd)
            if reason is None:
                raise
            raise MaintError(f"{folder.path}: {reason} while writing the snapshot; no snapshot was made") from None
        except BaseException:
            _discard(folder, made, fd)
            raise
    problem = ""
    try:
        if compact:
            vacuum_into(copy, partial)
            folder.unlink(copy.name)
            made.remove(copy.name)
        set_rollback_header(fd)
        crash_point("backup_written")
        copied = time.monotonic()
        try:
            found = check_file(partial)
            got = {"sessions": found["sessions"], "messages": found["messages"]}
            if got != stats.counts:
                raise StoreError(f"{partial}: the copy holds {got} but the store held {stats.counts} at the "
                                 "snapshot's moment; discarded, nothing kept")
        except StoreError as exc:
            if not damaged_ok:
                raise
            problem, found, got = str(exc), {"page_size": None}, {"sessions": None, "messages": None}
        checked = time.monotonic()
        os.fsync(fd)
        st = os.fstat(fd)
        digest = sha256_fd(fd, st.st_size)  # restore refuses a file under this name that is not this one
        meta = {"made_by": MADE_BY, "version": SIDECAR_VERSION, "file": name, "kind": kind,
                "store": str(Path(store_path).expanduser().resolve()), "label": label,
                "created_at": stamp, "created_ns": created_ns, "method": "vacuum-into" if compact else "backup-api",
                "quick_check": problem or "ok", "sessions": got["sessions"], "messages": got["messages"],
                "bytes": st.st_size, "inode": st.st_ino, "page_size": found["page_size"], "sha256": digest}
        hashed = time.monotonic()
        _write_sidecar(folder, name, meta)
        made.append(name + ".json")
        crash_point("backup_sidecar")
        # never replaces an existing file
        folder.publish(partial.name, name)
        made = []  # the snapshot is in place: from here on nothing is taken back
        folder.sync()
    except OSError as exc:
        _discard(folder, made, fd)
        raise _os_error(folder.path, exc) from None
    except BaseException:
        _discard(folder, made, fd)
        raise
    os.close(fd)
    return Snapshot(path=final, store=Path(store_path), label=label, kind=kind, created_at=stamp,
                    method=meta["method"], bytes=st.st_size, sessions=got["sessions"], messages=got["messages"],
                    seconds=round(time.monotonic() - started, 3), steps=stats.steps, restarts=stats.restarts,
                    source_journal_mode=stats.journal_mode, longest_step_ms=round(stats.longest_step_ms, 1),
                    verified=not problem, problem=problem, copy_seconds=round(copied - started, 3),
                    verify_seconds=round(checked - copied, 3), hash_seconds=round(hashed - checked, 3))


def _discard(folder: files.Folder, names: list[str], fd: int) -> None:
    for name in names:
        folder.unlink(name)
    with contextlib.suppress(OSError):
        os.close(fd)


def _os_error(folder: Path, exc: OSError) -> MaintError:
    import errno

    reason = write_limit_reached(None, exc)
    if reason is not None:
        return MaintError(f"{folder}: {reason} while writing the snapshot; no snapshot was made")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return MaintError(f"{folder}: cannot write there ({exc.strerror}); no snapshot was made")
    return MaintError(f"{exc.filename or folder}: {exc.strerror or exc}; no snapshot was made")


def _owner_uid(store_path: Path) -> int | None:
    owner = files.owner_of(store_path)
    return owner[0] if owner else None


def _rotatable(folder: Path, store_path: Path, opened: files.Folder | None = None) -> list[Listed]:
    """This store's verified regular backups, oldest first (safety snapshots of restore are never rotated)."""
    store = str(Path(store_path).expanduser().resolve())
    mine = [s for s in list_snapshots(folder, _owner_uid(store_path), opened=opened)
            if s.verified and s.meta.get("kind") == "backup" and s.meta.get("store") == store]
    return sorted(mine, key=lambda s: s.meta.get("created_ns", 0))


def rotate(folder: Path, store_path: Path, keep: int, just_made: Path) -> list[str]:
    """Remove the oldest verified backups of this store beyond *keep*; never *just_made*, never another's file.

    Listed and removed through one descriptor of the folder, each file removed only while its name still holds
    the file listed: the folder's owner could otherwise move it away after the listing and put a link to another
    user's snapshot folder at its name (hostile try 10, M3: root's rotation removed that user's snapshot)."""
    removed = []
    with _folder(folder) as opened:
        mine = _rotatable(folder, store_path, opened)
        for s in mine[:max(0, len(mine) - keep)]:
            if s.path == just_made:
                continue
            st = opened.lstat(s.path.name)
            if st is None or st.st_ino != s.meta.get("inode"):
                continue  # not the file listed any more
            opened.unlink(s.path.name)
            opened.unlink(s.path.name + ".json")
            removed.append(str(s.path))
    return removed


def would_rotate(folder: Path, store_path: Path, keep: int) -> list[str]:
    """What rotate would remove once one more snapshot exists (for --dry-run)."""
    mine = _rotatable(folder, store_path)
    return [str(s.path) for s in mine[:max(0, len(mine) + 1 - keep)]]


@dataclass(frozen=True)
class BackupRequest:
    """``hermes-maint backup``'s options; --keep is checked when it is made."""

    folder: Path | None = None  # None: $HERMES_HOME/state-snapshots/
    keep: int | None = None  # then remove this store's oldest verified snapshots beyond this many
    compact: bool = False
    dry_run: bool = False

    def __post_init__(self) -> None:
        if self.keep is not None and self.keep < 1:
            raise UsageError(f"--keep: bad value {self.keep} (expected a whole number >= 1; the new snapshot "
                             "always stays)")


def backup_store(target: StoreTarget, req: BackupRequest) -> dict[str, Any]:
    """``hermes-maint backup`` on one store: a verified snapshot, then the rotation; or what that would do."""
    label = store_label(target.path, target.profile)
    with open_store(target.path, readonly=True) as store:  # a bad store is refused before any folder is made
        size, peak = estimate_bytes(store, req.compact)
    report = {"dry_run": req.dry_run, "snapshot": None, "label": label, "estimated_bytes": size,
              "peak_extra_bytes": peak, "would_remove": [], "removed": [], "removed_partials": [],
              "unverified_kept": []}
    if req.dry_run:
        refuse_untrusted_folder(req.folder, target.path)  # as the run would
        base = req.folder if req.folder is not None else default_folder()
        report["folder"] = str(base)
        report["would_remove"] = would_rotate(base, target.path, req.keep) if req.keep and base.is_dir() else []
        return report
    where = prepare_folder(req.folder, store=target.path)
    report["folder"] = str(where)
    report["removed_partials"] = remove_stale_partials(where)
    snap = take_snapshot(target.path, where, label=label, compact=req.compact)
    report["snapshot"] = snap.as_dict()
    report["removed"] = rotate(where, target.path, req.keep, snap.path) if req.keep else []
    report["unverified_kept"] = [str(s.path) for s in list_snapshots(where, _owner_uid(target.path))
                                 if not s.verified and s.path.name.startswith(f"state-{label}-")]
    return report
