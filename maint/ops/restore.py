"""restore: put a snapshot back into the live store, in place.

Hermes's writers halt when the store file's identity changes, so the snapshot is
never renamed over the store: it is copied *into* the existing file through
SQLite's backup API, one call that locks the store, writes every page and
commits. SQLite's own journal (the WAL, or the rollback journal) makes that
commit atomic: a process killed at any moment leaves the old store or the new
one, whole, in the same file (same inode, same -wal).

Before anything is written: the snapshot must be an intact Hermes store
(quick_check, Hermes's tables), no other process may hold the live store
(holders.refuse_if_held; our run lock keeps other hermes-maint runs out for
the duration), the filesystem must have room for the copy, and a
safety snapshot of the live store is taken (a ``.pre-restore`` snapshot,
never rotated). Afterwards the store is checked (quick_check, counts equal to
the snapshot's).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from maint import files
from maint.crashpoints import crash_point
from maint import json_text
from maint.errors import MaintError, StoreError, Terminated, UsageError
from maint.ops.backup import MADE_BY, Snapshot, check_file, counts, sha256_fd, take_snapshot
from maint.ops.vacuum import DiskUsage, with_margin
from maint.store.connection import (schema_problem, _check_header, _persist_wal, as_found,
                                    check_regular_file, check_writable, connect_checked, header_journal_mode)
from maint.store.holders import STOP_HERMES, HolderReport, refuse_if_held
from maint.store.runlock import run_lock
from maint.store import snapshots
from maint.store.targets import StoreTarget
from maint.flow import Operator


@dataclass
class SnapshotInfo:
    path: Path
    sessions: int
    messages: int
    page_size: int
    bytes: int
    sidecar: dict[str, Any] | None = None
    sidecar_stat: os.stat_result | None = None  # whose the sidecar is: only ours, root's or the owner's counts
    vouched: tuple[int, int] | None = None  # (st_dev, st_ino) of the file vouch_for judged: the one copied


def inspect_snapshot(path: Path) -> SnapshotInfo:
    """Refuse anything that is not an intact Hermes store; the file is only read."""
    path = Path(path).expanduser()
    if not path.exists():
        raise UsageError(f"SNAPSHOT: {path} does not exist (expected a snapshot file made by `hermes-maint backup`, "
                         "or another copy of a state.db)")
    if not stat.S_ISREG(path.stat().st_mode):
        raise UsageError(f"SNAPSHOT: {path} is not a regular file (expected a snapshot .db file)")
    _check_header(path)
    found = check_file(path)
    problem = schema_problem(found["schema_version"])
    if problem:
        raise UsageError(f"SNAPSHOT: {path}: {problem}; refusing to restore it (upgrade hermes-maint)")
    meta = side = None
    with contextlib.suppress(MaintError, OSError, ValueError), \
            files.Folder.open(path.parent, follow_links=True) as folder:
        data = json_text.loads(folder.read(path.name + ".json", limit=1 << 20, what="snapshot sidecar") or b"null")
        if isinstance(data, dict) and data.get("made_by") == MADE_BY:
            meta, side = data, folder.lstat(path.name + ".json")
    return SnapshotInfo(path=path, sessions=found["sessions"], messages=found["messages"],
                        page_size=found["page_size"], bytes=path.stat().st_size, sidecar=meta, sidecar_stat=side)


NOT_OURS = "copy it somewhere only you control once you have checked it, and restore the copy"


def vouch_for(snapshot: SnapshotInfo, store: Path) -> None:
    """Refuse a SNAPSHOT someone else could have chosen, or one that is not the file its sidecar describes
    (hostile try 5, H11: mallory replaced a snapshot in a folder she owned, and restore put her database into
    alice's store). The file must be ours, root's or the store's owner's and writable by no one else
    (:func:`maint.files.untrusted_by`), its folder and those above it trusted as a snapshot folder is
    (:func:`maint.files.untrusted_folder`), and, as root, no other user's link on the way. When its sidecar is
    hermes-maint's (and trusted too), what it recorded at backup time must match: counts and size (every
    sidecar), and the SHA-256 (sidecars since version 2)."""
    path = snapshot.path
    owner = files.owner_of(Path(store).expanduser())
    uid = owner[0] if owner else None
    try:
        files.refuse_foreign_links(path, uid, "snapshot", reading=True)
    except files.FileRefused as exc:
        raise files.FileRefused(f"SNAPSHOT: {exc}; nothing was changed") from None
    real = Path(os.path.realpath(path))
    judged = os.stat(real)
    snapshot.vouched = (judged.st_dev, judged.st_ino)  # copy_into copies this file, not what the name leads to later
    why = files.untrusted_by(judged, uid)
    if why:
        raise files.FileRefused(f"SNAPSHOT: {path}: {why}, not you, root nor the store's owner; refusing to restore "
                                f"it ({NOT_OURS}); nothing was changed")
    why = files.untrusted_folder(real.parent, also_trusted=uid)
    if why:
        raise files.FileRefused(f"SNAPSHOT: {path}: its folder {real.parent} {why}, so another user may have put "
                                f"any database under this name; refusing to restore it ({NOT_OURS}); nothing was "
                                "changed")
    meta = snapshot.sidecar
    if meta is None or snapshot.sidecar_stat is None or files.untrusted_by(snapshot.sidecar_stat, uid):
        return
    differs = [f"{key} {meta[key]} (the file: {found})" for key, found in (
        ("sessions", snapshot.sessions), ("messages", snapshot.messages), ("bytes", snapshot.bytes))
        if type(meta.get(key)) is int and meta[key] != found]
    if not differs and isinstance(meta.get("sha256"), str):
        with files.open_regular(real, what="snapshot") as fh:
            held = os.fstat(fh.fileno())
            if (held.st_dev, held.st_ino) != snapshot.vouched:
                raise MaintError(f"SNAPSHOT: {path}: changed while it was being checked; refusing to restore it, "
                                 "nothing was changed")
            digest = sha256_fd(fh.fileno())
        if digest != meta["sha256"]:
            differs.append(f"sha256 {meta['sha256'][:12]}… (the file: {digest[:12]}…)")
    if differs:
        raise MaintError(f"SNAPSHOT: {path}: this is not the snapshot hermes-maint made: its sidecar "
                         f"{path.name}.json records {', '.join(differs)}; refusing to restore it, nothing was "
                         "changed")


def open_live(path: Path) -> apsw.Connection:
    """The live store as a plain SQLite file: it may be damaged (that is why one restores), not missing."""
    path = Path(path).expanduser()
    if not os.path.lexists(path):
        raise StoreError(f"{path}: no such store (restore copies into an existing state.db; start Hermes once "
                         "to create it)")
    conn = connect_checked(path, check_writable(path), apsw.SQLITE_OPEN_READWRITE)
    _persist_wal(conn)
    try:
        conn.execute("PRAGMA schema_version").fetchall()
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        conn.close()
        raise StoreError(f"{path}: SQLite cannot open it ({exc}); with Hermes stopped, move it aside and copy the "
                         "snapshot to its place instead") from None
    return conn


def live_counts(conn: apsw.Connection) -> dict[str, int] | None:
    try:
        return counts(conn)
    except apsw.Error:
        return None  # damaged or not a Hermes store: nothing to count


@dataclass
class RestoreResult:
    store: Path
    snapshot: Path
    safety_snapshot: Snapshot | None
    before: dict[str, int] | None
    after: dict[str, int]
    inode_kept: bool
    seconds: float
    journal_mode: str
    warnings: list[str] = field(default_factory=list)


def check_room(live: Path, snapshot: SnapshotInfo, live_bytes: int, safety_folder: Path,
               disk_usage: DiskUsage) -> None:
    """The copy passes through the store's journal (about the snapshot's size); the safety snapshot needs the
    live store's size where it goes. Both on one filesystem: both at once."""
    need = snapshot.bytes
    same_fs = live.parent.stat().st_dev == safety_folder.stat().st_dev
    if same_fs:
        need += live_bytes
    free = disk_usage(live.parent).free
    if free < with_margin(need):
        raise MaintError(f"{live.parent}: not enough free space to restore: {free} bytes free, need about "
                         f"{with_margin(need)} (snapshot {snapshot.bytes} bytes"
                         f"{f', safety snapshot {live_bytes} bytes' if same_fs else ''}, plus margin); "
                         "nothing was changed")


def copy_into(conn: apsw.Connection, snapshot: Path, vouched: tuple[int, int] | None = None,
              unchanged_since: tuple[apsw.Connection, int] | None = None) -> None:
    """The backup API from *snapshot* into the open live store: one step, so one lock and one commit. The file
    copied is the one that was vouched for (*vouched*, else the one whose links are judged now), not whatever its
    name leads to by then (hostile try 6, I4: a folder swapped for a link to another user's home).

    *unchanged_since*: a second connection to the store and its ``data_version`` when the safety snapshot began
    (SQLite forbids using *conn* itself while it is a backup's destination). Once the copy holds
    the store's write lock, a commit by anyone else since then is refused, the store unchanged: it may be in
    neither the safety snapshot nor the restored store (hostile try 9, L6: a Hermes that opened, wrote and
    closed between the holder checks lost acknowledged writes)."""
    with as_found(snapshot):  # a snapshot at rest keeps no -wal and -shm of our read (hostile try 7, J6)
        _copy_from(conn, connect_checked(snapshot, vouched or check_regular_file(snapshot),
                                         apsw.SQLITE_OPEN_READONLY), unchanged_since)
    crash_point("restore_copied")


def _copy_from(conn: apsw.Connection, src: apsw.Connection,
               unchanged_since: tuple[apsw.Connection, int] | None = None) -> None:
    try:
        crash_point("restore_copy")
        with conn.backup("main", src, "main") as backup:
            backup.step(0)  # takes the store's write lock, held until the copy commits
            if unchanged_since is not None and _data_version(unchanged_since[0]) != unchanged_since[1]:
                raise StoreError("another process wrote to the store while its safety snapshot was being taken (a "
                                 "Hermes that started meanwhile?); the restore did not happen, the store is "
                                 "unchanged; stop Hermes and run it again")
            while not backup.done:
                # in steps, one write lock and one commit still (the destination's transaction spans them): a stop
                # between two ends the run with the store as it was (hostile try 14, R5: one step(-1) of a 2.8 GB
                # snapshot held SIGTERM 17 s, then left the store replaced)
                backup.step(snapshots.COPY_STEP_PAGES)  # a stop waits for one step at most
                _between_steps()
    except apsw.BusyError:
        raise StoreError("the store was locked by another process past the busy timeout; the restore did not "
                         "happen, the store is unchanged") from None
    except apsw.FullError:
        raise MaintError("disk full while restoring; SQLite rolled the copy back, the store is unchanged") from None
    except apsw.ReadOnlyError as exc:
        raise MaintError(f"SQLite refused to copy into the store ({exc}); the store is unchanged") from None
    finally:
        src.close()


def _between_steps() -> None:
    """Where a stop signal's handler runs during the copy (Python runs it between our own steps)."""


def _data_version(conn: apsw.Connection) -> int:
    """Moves when another connection has committed to the store since the last reading."""
    return conn.execute("PRAGMA data_version").fetchall()[0][0]


def restore(live: Path, snapshot: SnapshotInfo, *, label: str, safety_folder: Path, force: bool = False,
            disk_usage: DiskUsage = shutil.disk_usage,
            holders: Callable[[Path], HolderReport] | None = None) -> RestoreResult:
    """Safety snapshot, then the in-place copy, then the checks. The caller has asked for confirmation."""
    started = time.monotonic()
    live = Path(live).expanduser()
    warnings: list[str] = []
    refuse_if_held(live, force=force, doing="restore into it", advice=STOP_HERMES, holders=holders)
    lock = run_lock(live)  # no other hermes-maint changes the store meanwhile
    try:
        conn = open_live(live)
    except BaseException:
        lock.release()
        raise
    watch = None
    try:
        before = live_counts(conn)
        mode = header_journal_mode(live)
        inode = live.stat().st_ino
        live_bytes = sum(Path(str(live) + s).stat().st_size for s in ("", "-wal") if Path(str(live) + s).exists())
        page_size = conn.execute("PRAGMA page_size").fetchall()[0][0]
        if mode == "wal" and page_size != snapshot.page_size:
            raise MaintError(f"{snapshot.path}: page size {snapshot.page_size} differs from the store's {page_size}; "
                             "SQLite cannot copy it into a WAL store in place; nothing was changed")
        check_room(live, snapshot, live_bytes, safety_folder, disk_usage)
        watch = open_live(live)  # every commit by another process from here on is checked for at the copy
        unchanged_since = (watch, _data_version(watch))
        safety = take_snapshot(live, safety_folder, label=label, kind="pre-restore", disk_usage=disk_usage,
                               damaged_ok=True)
        if not safety.verified:
            warnings.append(f"the live store failed its check ({safety.problem}); its copy {safety.path} is kept "
                            "as it was")
        crash_point("restore_safety_taken")
        # A Hermes process may have started while the safety snapshot was taken.
        refuse_if_held(live, force=force, doing="restore into it", advice=STOP_HERMES, holders=holders)
        at_copy = _data_version(conn)  # our own copy does not move it; another process's commit does
        copy_into(conn, snapshot.path, snapshot.vouched, unchanged_since)
        try:
            if header_journal_mode(live) != mode and mode in ("wal", "delete"):
                conn.execute(f"PRAGMA journal_mode={mode}")  # a foreign snapshot may carry another mode
            # Read before our checkpoint: once it has read the WAL's header, a commit before it goes unseen.
            before_checkpoint = _data_version(conn)
            if mode == "wal":
                with contextlib.suppress(apsw.BusyError):
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            crash_point("restore_checkpointed")
            problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
            after = counts(conn)
            written_since = before_checkpoint != at_copy or _data_version(conn) != before_checkpoint
            expected = {"sessions": snapshot.sessions, "messages": snapshot.messages}
            if problems == ["ok"] and after != expected and written_since:
                # The copy went in whole (one commit); a process that started meanwhile (Hermes) has written since.
                # Restoring the previous store again would drop what it wrote: the restore is done, and said so.
                warnings.append(f"the snapshot is in place, and another process wrote to the store after the copy: "
                                f"it now reads {after['sessions']} sessions and {after['messages']} messages (the "
                                f"snapshot holds {snapshot.sessions} and {snapshot.messages}); its rows are kept, "
                                "quick_check ok")
            elif problems != ["ok"] or after != expected:
                raise MaintError(f"{live}: after the copy the store reads {after} (quick_check: {problems[0]}), "
                                 f"expected {snapshot.sessions} sessions and {snapshot.messages} messages; the "
                                 f"previous store is in {safety.path}")
        except Terminated as exc:  # a stop after the copy committed says so too (hostile try 14, R3)
            exc.done = f"the snapshot had been copied into the store; the previous store is in {safety.path}"
            raise
        except (apsw.Error, MaintError) as exc:
            if str(safety.path) in str(exc):
                raise
            # the copy is committed: whatever fails now, the operator must know the store was replaced
            # (hostile try 12, P3: an error after the copy read as if nothing had changed)
            raise MaintError(f"{live}: the snapshot was copied into the store, then: {exc}; the previous store is "
                             f"in {safety.path}") from None
    finally:
        if watch is not None:
            watch.close()
        conn.close()
        lock.release()
    return RestoreResult(store=live, snapshot=snapshot.path, safety_snapshot=safety, before=before, after=after,
                         inode_kept=live.stat().st_ino == inode, seconds=round(time.monotonic() - started, 3),
                         journal_mode=header_journal_mode(live), warnings=warnings)


@dataclass(frozen=True)
class RestoreRequest:
    """``hermes-maint restore``'s arguments: the snapshot, inspected (refused unless it is an intact Hermes
    store) before any store is opened."""

    snapshot: SnapshotInfo
    force: bool = False
    dry_run: bool = False

    @classmethod
    def of(cls, snapshot: Path, *, force: bool = False, dry_run: bool = False) -> RestoreRequest:
        return cls(inspect_snapshot(snapshot), force=force, dry_run=dry_run)


def restore_store(target: StoreTarget, req: RestoreRequest, op: Operator) -> dict[str, Any]:
    """``hermes-maint restore`` into one store: both sides counted, the operator asked, then :func:`restore`."""
    from maint.fmt import fmt_bytes
    from maint.ops.backup import remove_stale_partials, store_label
    from maint.store.snapshots import prepare_folder, refuse_untrusted_folder

    info = req.snapshot
    if info.path.resolve() == Path(target.path).expanduser().resolve():
        raise UsageError(f"SNAPSHOT: {info.path} is the store itself (expected a snapshot of it)")
    vouch_for(info, target.path)
    refuse_untrusted_folder(None, target.path, "nothing was changed")  # the safety copy: the old store's only one
    with as_found(Path(target.path).expanduser()):  # a dry run leaves the store's folder as found
        conn = open_live(target.path)
        try:
            before = live_counts(conn)
        finally:
            conn.close()
    report = {"store": str(target.path), "profile": target.profile, "snapshot": str(info.path),
              "dry_run": req.dry_run, "before": before,
              "snapshot_counts": {"sessions": info.sessions, "messages": info.messages},
              "warnings": [], "safety_snapshot": None, "after": None, "inode_kept": None, "seconds": None}
    made_for = (info.sidecar or {}).get("store")
    if made_for and made_for != str(Path(target.path).expanduser().resolve()):
        report["warnings"].append(f"the snapshot was taken of {made_for}, not of this store")
    if req.dry_run:
        return report
    op.confirm(f"Replace the contents of {target.path} with this snapshot?", [
        f"store:    {target.path} ({counts_text(before)})",
        f"snapshot: {info.path} ({counts_text(report['snapshot_counts'])}, {fmt_bytes(info.bytes)})",
        *[f"warning: {w}" for w in report["warnings"]],
        "a safety snapshot of the store is taken first",
    ])
    folder = prepare_folder(None, store=target.path)
    remove_stale_partials(folder)
    result = restore(target.path, info, label=store_label(target.path, target.profile), safety_folder=folder,
                     force=req.force)
    report.update(safety_snapshot=str(result.safety_snapshot.path), after=result.after, before=result.before,
                  inode_kept=result.inode_kept, seconds=result.seconds)
    report["warnings"] += result.warnings
    return report


def counts_text(c: dict[str, int] | None) -> str:
    return "unreadable" if c is None else f"{c['sessions']} sessions, {c['messages']} messages"
