"""Every file hermes-maint creates or reads beside a store goes through this module.

The rules live here once, so a new command gets them by using it:

* **No link followed where we create.** A folder is opened with ``O_DIRECTORY|O_NOFOLLOW`` and every
  name inside it is resolved against that descriptor (``dir_fd``), so a symlink planted at the folder
  or at any name we create is refused, never written through.
* **No special file read.** A file we read is opened ``O_NONBLOCK`` and must be a regular file: a FIFO
  or a device named like one of our files never hangs a run.
* **Private by default.** What we create is 0600 (folders 0700) unless the caller says otherwise.
* **Owned like its folder.** A run as root hands every file and folder it creates to the owner of the
  folder it creates it in (or of the store, for files beside it), so one root run never leaves files
  the store's owner can no longer use. What is made from a store's content (a snapshot, an export, a
  copy: ``Folder.open(..., store=...)``) goes to root or the store's owner, never to a third user
  because they own the folder it lands in.
* **A link only as far as its owner reaches.** A folder the operator named may be a symbolic link, but
  a run as root follows it for a store's content only when root or the store's owner owns every link on
  the way (:func:`refuse_foreign_links`, the rule stores themselves have): another user's link planted
  at a backup or export path never receives a store's content.
* **No half-written file under a final name.** A file is written under our temporary name
  (``.NAME.<hex>.partial``), locked while written, synced, then renamed (or linked) into place. It is
  removed when the run fails, is interrupted, or is terminated (SIGTERM and SIGHUP are raised as
  :class:`~maint.errors.Terminated`, see :func:`raise_on_termination`); what a killed run left is
  removed by the next run that writes the same name (:meth:`Folder.clear_leftovers`).
* **Bounded waits.** A lock another user could hold is only ever waited for with a deadline
  (:func:`lock`; the locks themselves: :func:`maint.store.locks.lock_file`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import re
import secrets
import select
import shutil
import signal
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from maint.errors import MaintError, Terminated

PARTIAL = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{16}\.partial$")
READ_LIMIT = 64 << 20  # the largest sidecar, config or job file we read whole
SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_SIDES = ("-journal", "-wal", "-shm")  # what SQLite keeps beside a database, by the suffix on its name


class FileRefused(MaintError):
    """A path we were asked to use is a link, a special file, or otherwise not what we may touch."""


def kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def as_root() -> bool:
    """Whether this run is root's (the rules that guard other users' files apply)."""
    return _as_root()


def _give(fd: int, owner: tuple[int, int] | None) -> None:
    """Hand what a root run created to *owner* (uid, gid); nothing to do for anyone else."""
    if owner is not None and _as_root() and owner != (0, 0):
        os.fchown(fd, owner[0], owner[1])


def raise_on_termination() -> None:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread, as Ctrl-C raises KeyboardInterrupt:
    ``finally`` blocks run (temporary files go, transactions roll back) and the command exits 128 + signal."""

    def handler(signum, frame):  # noqa: ARG001
        raise Terminated(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):  # not the main thread, or no such signal here
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, handler)
    _watch_stop_signals()


# Python runs a signal's handler between its own steps, and SQLite's progress handler calls back into Python
# every so many VM steps; one step that computes an expression of the store's own (an index's, a trigger's, a
# CHECK's) may take seconds, so a stop would wait for it (hostile try 13, Q4: doctor --full ended 246 s after
# SIGTERM). A stop signal still running after a grace interrupts every connection we opened (sqlite3_interrupt):
# the statement ends, its transaction rolls back, and the handler's exception ends the command.
_INTERRUPTIBLE: weakref.WeakSet = weakref.WeakSet()
_STOPS = {int(signal.SIGTERM), int(signal.SIGHUP), int(signal.SIGINT)}
_stop_grace_s = [3.0]


def interruptible(conn: Any) -> None:
    """Interrupt *conn*'s statement when a stop signal outlives the grace (see :func:`_watch_stop_signals`)."""
    _INTERRUPTIBLE.add(conn)


def set_stop_grace(seconds: float) -> None:
    """How long a statement may run on after a stop signal (the job loop gives its jobs its own stop grace)."""
    _stop_grace_s[0] = seconds


def _watch_stop_signals() -> None:
    """A thread woken by every signal (Python's wake-up descriptor, written by the C handler even while the main
    thread is inside SQLite) that interrupts our connections once a stop has outlived its grace."""
    if threading.current_thread() is not threading.main_thread():
        return
    r, w = os.pipe()
    for fd in (r, w):
        os.set_blocking(fd, False)
        os.set_inheritable(fd, False)
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(r)
        os.close(w)
        return

    def watch() -> None:
        while True:
            try:
                select.select([r], [], [])
                got = os.read(r, 64)
            except BlockingIOError:
                continue
            except OSError:
                return
            if _STOPS & set(got):
                time.sleep(_stop_grace_s[0])
                for conn in list(_INTERRUPTIBLE):
                    with contextlib.suppress(Exception):
                        conn.interrupt()

    threading.Thread(target=watch, name="hermes-maint-stop-watch", daemon=True).start()


def lock(fd: int, timeout_s: float, *, shared: bool = False) -> bool:
    """``flock`` *fd*, waiting at most *timeout_s*; False when it was not had in time."""
    mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, mode)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def read_regular(path: Path | str, *, follow_links: bool = True, limit: int = READ_LIMIT,
                 what: str = "file") -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file and its status, never blocking on a FIFO or device; at most *limit* bytes."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileRefused(f"{path}: is a symbolic link; refusing to read the {what} through it") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{path}: is {kind_of(st.st_mode)}, not a regular file; refusing to read it as the "
                              f"{what}")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileRefused(f"{path}: larger than {limit >> 20} MiB; refusing to read it as the {what}")
    return data, st


def open_regular(path: Path | str, *, what: str = "file", follow_links: bool = True,
                 store: Path | str | None = None) -> IO[bytes]:
    """A regular file opened for reading, never a FIFO or device (links followed unless *follow_links* is
    false: a name the operator gave is theirs to point, a side file we derive from it is not).

    *store*: the file is read into that store. A run as root then follows links only where root or the store's
    owner owns them (:func:`refuse_foreign_links`, ``reading``), judged after the open on the file the path
    names now, which must be the file opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileRefused(f"{path}: is a symbolic link; refusing to read the {what} through it") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{path}: is {kind_of(st.st_mode)}, not a regular file; refusing to read it as the "
                              f"{what}")
        if store is not None and follow_links and _as_root():
            owner = owner_of(store)
            refuse_foreign_links(path, owner[0] if owner else None, what, reading=True)
            named = os.stat(path)
            if (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino):
                raise FileRefused(f"{path}: changed while it was being opened; refusing to read it as the {what}")
    except BaseException:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def untrusted_by(st: os.stat_result, also_trusted: int | None = None) -> str | None:
    """Why a file with status *st* may not steer us (owned by another user, writable by others), or None.

    As OpenSSH and sudo do: only a file owned by us, by root or by *also_trusted* (the store's owner,
    whose store it configures) and writable by its owner alone is obeyed.
    """
    me = os.geteuid() if hasattr(os, "geteuid") else st.st_uid
    if st.st_uid not in (me, 0, also_trusted):
        return f"is owned by another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        who = "every user" if st.st_mode & 0o002 else "its group"
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def foreign_second_name(st: os.stat_result, vouches: int | None) -> str | None:
    """Why a file that steers us (config.yaml, a job file) and has more than one name is not *vouches*' (the
    store's owner, or the owner of its folder) to give us, or None.

    A hard link has no owner of its own: one planted in a user's folder names any file on the disk (with
    ``fs.protected_hardlinks`` off, even one that user cannot read), and a root run would obey it and echo its
    values (hostile try 4, G5). So a file with a second name is read only when it belongs to *vouches*, or to
    us when we are not root (our own file, which we could read anyway).
    """
    me = os.geteuid() if hasattr(os, "geteuid") else st.st_uid
    if st.st_nlink <= 1 or st.st_uid == vouches or (st.st_uid == me and me != 0):
        return None
    whose = "nobody known" if vouches is None else f"uid {vouches}"
    return (f"has {st.st_nlink} names (a hard link to a file elsewhere) and belongs to uid {st.st_uid}, not to "
            f"{whose}")


def foreign_file(st: os.stat_result, owner_uid: int) -> str | None:
    """Why an existing file beside a store that we would use (a lock, a -wal) is not the store's, or None.

    A second name (a hard link planted beside the store) may be any file on the disk, or another store's
    WAL, and a file of another user is theirs: we would rewrite it, or SQLite would replay it into the store.
    """
    if st.st_nlink != 1:
        return f"has {st.st_nlink} names (a hard link to a file elsewhere)"
    if st.st_uid not in (os.geteuid(), 0, owner_uid):
        return f"is owned by another user (uid {st.st_uid})"
    return None


def links_on(path: Path | str) -> list[tuple[Path, os.stat_result, Path]]:
    """Every symbolic link met resolving *path* as the kernel does (each link's target resolved in turn),
    with the link's status and the real folder holding it, in order; the walk ends at the first missing
    name (what follows is ours to create) or after 40 links (the open then fails with ELOOP)."""
    raw = Path(path).expanduser()
    pending = list((raw if raw.is_absolute() else Path(os.getcwd()) / raw).parts[1:])
    current, met = Path("/"), []
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        step = current / part
        try:
            st = os.lstat(step)
        except OSError:
            break
        if not stat.S_ISLNK(st.st_mode):
            current = step
            continue
        met.append((step, st, current))
        if len(met) > 40:
            break
        try:
            target = Path(os.readlink(step))
        except OSError:
            break
        if target.is_absolute():
            current = Path("/")
        pending = [*target.parts[1 if target.is_absolute() else 0:], *pending]
    return met


def refuse_foreign_links(path: Path | str, store_owner: int | None, what: str = "folder", *,
                         reading: bool = False) -> None:
    """As root, refuse *path* when a symbolic link on the way to it is owned by anyone but root or the store's
    owner (``connection._refuse_foreign_links``' rule for stores, for the folders and files a store's content
    is written to): a user's link planted at a backup or export path would hand the content to them.

    *reading*: *path* is a file read INTO the store (``import FILE``): another user's link would make root
    copy a file only root may read (another store's export) into this one; the store's owner's own link is
    followed only to a file that user could read."""
    if not _as_root():
        return
    done = "read a file into a store" if reading else "write a store's content"
    theirs = None
    for link, st, _ in links_on(path):
        if st.st_uid not in (0, store_owner):
            raise FileRefused(f"{path}: reached through {link}, a symbolic link owned by uid {st.st_uid} (not root "
                              f"nor the store's owner); a run as root does not {done} through it "
                              f"(name the real {what})")
        if st.st_uid != 0:
            theirs = link
    if theirs is None or store_owner is None:
        return
    if reading and not user_may(store_owner, path, os.R_OK):
        raise FileRefused(f"{path}: reached through {theirs}, a symbolic link of the store's owner (uid "
                          f"{store_owner}) to a file that user may not read; a run as root reads into a store "
                          f"only what its owner could (name the real {what})")
    # The store's owner's own link chooses where root writes: only where that user could write themselves
    # (hostile try 4, G14: her link to /etc/... made root create files there, their lines hers).
    if not reading and not user_may_create(store_owner, path):
        raise FileRefused(f"{path}: reached through {theirs}, a symbolic link of the store's owner (uid "
                          f"{store_owner}) to a folder that user may not write; a run as root writes a store's "
                          f"content only where its owner could (name the real {what})")


def _groups_of(uid: int) -> set[int]:
    try:
        import pwd

        entry = pwd.getpwuid(uid)
        return set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except (ImportError, KeyError, OSError):
        return set()


def _allows(st: os.stat_result, uid: int, groups: set[int], bits: int) -> bool:
    """Whether the permission bits of *st* give *uid* (in *groups*) all of *bits* (4 read, 2 write, 1 search)."""
    if uid == 0:
        return True
    shift = 6 if st.st_uid == uid else 3 if st.st_gid in groups else 0
    return (st.st_mode >> shift) & bits == bits


def user_may(uid: int, path: Path | str, want: int) -> bool:
    """Whether user *uid* could itself read (``os.R_OK``) or replace (``os.W_OK``: write the file and rename
    over it in its folder) the file at *path*, judged by the permission bits along its real path (ACLs are not
    read: a user they alone let in is refused, never the other way round)."""
    if uid == 0:
        return True
    groups = _groups_of(uid)
    real = Path(os.path.realpath(path))
    try:
        for folder in reversed(real.parents):
            if not _allows(os.stat(folder), uid, groups, 1):
                return False
        folder_st = os.stat(real.parent)
        st = os.stat(real)
    except OSError:
        return False
    if want & os.R_OK and not _allows(st, uid, groups, 4):
        return False
    if want & os.W_OK:
        if not (_allows(st, uid, groups, 2) and _allows(folder_st, uid, groups, 3)):
            return False
        if folder_st.st_mode & stat.S_ISVTX and uid not in (st.st_uid, folder_st.st_uid):
            return False
    return True


def _private_group(st: os.stat_result) -> bool:
    """The file's group is its owner's own (their primary group, no other member): group-writable is harmless,
    as Debian's OpenSSH accepts it (a umask of 002 with user-private groups makes every folder so)."""
    try:
        import grp
        import pwd

        owner = pwd.getpwuid(st.st_uid)
        members = set(grp.getgrgid(st.st_gid).gr_mem)
        # the users whose primary group it is are members too, and not listed in it (hostile try 9, L9)
        members |= {u.pw_name for u in pwd.getpwall() if u.pw_gid == st.st_gid}
    except (ImportError, KeyError):
        return False
    return owner.pw_gid == st.st_gid and members <= {owner.pw_name}


def user_may_create(uid: int, folder: Path | str) -> bool:
    """Whether user *uid* could make a new file in *folder* (search along its real path, write and search on it)."""
    if uid == 0:
        return True
    groups = _groups_of(uid)
    real = Path(os.path.realpath(folder))
    try:
        return all(_allows(os.stat(f), uid, groups, 1) for f in real.parents) and \
            _allows(os.stat(real), uid, groups, 3)
    except OSError:
        return False


def loose_folder(st: os.stat_result, folder: Path | str | None = None) -> str | None:
    """Why a folder whose names steer us is open to others (writable by group, the users of its access list or
    every user, no sticky bit: anyone there can rename or replace what it holds), or None. *folder*: its path,
    for its access list (hostile try 10, M2: a user an ACL let write a keeper folder passed)."""
    if st.st_mode & stat.S_ISVTX:
        return None
    who = others_may_create(st, folder)
    if who:
        return f"is writable by {who} without the sticky bit (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def others_may_create(st: os.stat_result, folder: Path | str | None = None) -> str | None:
    """Who besides a folder's owner (and root) may make names in it ("every user", "its group", the users and
    groups of its access list), or None. The sticky bit keeps them from replacing what is there, not from adding
    what is not. With an access list (POSIX ACL) the group bits are its mask: any write they allow may be a named
    user's, so a group-writable folder with one is taken as open to others."""
    if st.st_mode & 0o002:
        return "every user"
    if st.st_mode & 0o020 and folder is not None and _has_access_list(folder):
        return "the users and groups of its access list"
    if st.st_mode & 0o020 and not _private_group(st):
        return "its group"
    return None


def others_in_folder(st: os.stat_result, folder: Path | str, owner_uid: int | None) -> str | None:
    """Who besides *owner_uid* (a store's owner), root and we may make names in *folder* (its stat *st*): by its
    mode, an access list, or because it is theirs; None when no one. Where SQLite keeps a database, anyone who
    may add a name beside it may add the ``-journal`` or ``-wal`` that SQLite then replays into it."""
    who = others_may_create(st, folder)
    if who is None and st.st_uid not in (0, os.geteuid(), owner_uid):
        who = f"its owner (uid {st.st_uid}{'' if owner_uid is None else ', not the store' + chr(39) + 's'})"
    return who


def refuse_database_folder(path: Path | str, owner_uid: int | None, what: str = "folder",
                           opened: str | None = None) -> None:
    """Refuse *path* (the nearest folder that exists; *opened*: the same folder as we hold it open) as a place where
    SQLite will keep a database we make (a snapshot, a compacted copy): SQLite opens its ``-journal`` and ``-wal``
    by name, so anyone but *owner_uid* (a store's owner), root and we who may add names there could have one of
    theirs used (:func:`others_in_folder`)."""
    folder = Path(os.path.abspath(Path(path).expanduser()))
    while opened is None and not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        st = os.stat(opened or folder)
    except OSError as exc:
        raise FileRefused(f"{folder}: cannot check the {what} ({exc.strerror})") from None
    who = others_in_folder(st, opened or folder, owner_uid)
    if who:
        raise FileRefused(f"{folder}: lets {who} create files in it (mode {stat.S_IMODE(st.st_mode):o}): SQLite opens "
                          f"the -journal and -wal of a database in the {what} by name and would use one of theirs "
                          "(choose a folder only you, root or the store's owner can write)")


def _has_access_list(path: Path | str) -> bool:
    """Whether *path* carries a POSIX access ACL beyond its mode bits (only an extended one is stored)."""
    try:
        return bool(os.getxattr(path, "system.posix_acl_access"))
    except OSError as exc:
        return exc.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOENT, errno.ENOSYS)


def untrusted_folder(path: Path | str, also_trusted: int | None = None) -> str | None:
    """Why the folder *path* may not steer a run, as OpenSSH's StrictModes judges the folders of its keys, or
    None: it and every folder above it (its real path) must be owned by us, root or *also_trusted* (the store's
    owner) and be writable by no one else (a sticky folder, such as /tmp, may be writable by all)."""
    me = os.geteuid() if hasattr(os, "geteuid") else None
    real = Path(os.path.realpath(path))
    for folder in (real, *real.parents):
        try:
            st = os.stat(folder)
        except OSError as exc:
            return f"cannot be checked ({folder}: {exc.strerror})"
        where = "" if folder == real else f"lies in {folder}, which "
        if me is not None and st.st_uid not in (me, 0, also_trusted):
            return f"{where}is owned by another user (uid {st.st_uid})"
        why = loose_folder(st, folder)
        if why:
            return f"{where}{why}"
    return None


KEEPS_ONLY_COPY = "would hold the only copy once the sessions are deleted, and another user could remove it"


def refuse_untrusted_keeper(path: Path | str, store_owner: int | None, what: str = "folder",
                            stake: str = KEEPS_ONLY_COPY) -> None:
    """Refuse *path* (a folder, made when missing) as the place a copy of a store's content is kept in and
    later relied on (``export --delete-after-verified``'s only copy, ``backup``'s snapshots that ``restore``
    puts back): another user who owns it or a folder above it, or anyone when one is writable by others
    without the sticky bit, could remove or replace that copy the moment after it was verified. The rule is
    :func:`untrusted_folder`'s (config and job folders), judged on the nearest folder that exists (a missing
    one is made inside it), with the store's owner trusted as we and root are. *stake* says what is at risk."""
    folder = Path(os.path.abspath(Path(path).expanduser()))
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    why = untrusted_folder(folder, also_trusted=store_owner)
    if why:
        raise FileRefused(f"{folder}: {why}; the {what} {stake} (choose a folder only you, root or the "
                          "store's owner can write)")


class Folder:
    """An open folder: every name is resolved against its descriptor, never through a link.

    *owner* is who a root run hands new files and folders to (by default the folder's own owner; for a store's
    content, *store_owner*, when the folder is neither root's nor the store's owner's).
    """

    def __init__(self, path: Path, fd: int, owner: tuple[int, int] | None = None,
                 store_owner: tuple[int, int] | None = None):
        self.path, self.fd, self.store_owner = path, fd, store_owner
        st = os.fstat(fd)
        if owner is None:
            owner = (st.st_uid, st.st_gid)
            if store_owner is not None and st.st_uid not in (0, store_owner[0]):
                owner = store_owner  # never a third user's because they own the folder
        self.owner = owner

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path | str, *, create: bool = False, parents: bool = False, mode: int = 0o700,
             owner: tuple[int, int] | None = None, what: str = "folder", follow_links: bool = False,
             store: Path | str | None = None, databases: bool = False) -> Folder:
        """*path* as a folder; a symlink or anything but a folder there is refused (*follow_links*: a link the
        operator named is followed; the folder found is then used through its descriptor). With *create*, a
        missing folder is made (*mode*, handed to *owner*, else to its parent's owner), with *parents* its
        missing parents too.

        *store*: the folder receives that store's content. A run as root then follows links only where root or
        the store's owner owns them (:func:`refuse_foreign_links`), and hands what it creates to the store's
        owner when the folder belongs to anyone else.

        *databases*: SQLite will open databases we make there (a snapshot, a compacted copy), and their
        ``-journal`` and ``-wal`` by name: a folder anyone but the store's owner, root and we may add names to is
        refused, as a store's own folder is (hostile try 9, L4: a FIFO planted at a snapshot's ``-journal`` in a
        sticky DEST hung backup past SIGTERM)."""
        path = Path(os.path.abspath(Path(path).expanduser()))
        store_owner = owner_of(store) if store is not None else None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW))
        except FileNotFoundError:
            if not create:
                raise FileRefused(f"{path}: no such {what}") from None
            parent = cls.open(path.parent, create=parents, parents=parents, mode=mode, owner=owner, what=what,
                              follow_links=True, store=store)  # an existing parent is a path the operator gave
            try:
                return parent.subfolder(path.name, create=True, mode=mode, owner=owner)
            finally:
                parent.close()
        except OSError as exc:
            raise cls._refusal(path, exc, what) from None
        try:
            if store is not None and follow_links:
                cls._same_as_walked(path, fd, store_owner, what)
            if databases:
                refuse_database_folder(path, store_owner[0] if store_owner else None, what,
                                       opened=f"/proc/self/fd/{fd}")
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, owner, store_owner)

    @staticmethod
    def _same_as_walked(path: Path, fd: int, store_owner: tuple[int, int] | None, what: str) -> None:
        """The links to the folder opened are checked after the open, and the folder opened must be the one
        the path names now: a link swapped in between cannot slip past the check."""
        refuse_foreign_links(path, store_owner[0] if store_owner else None, what)
        if _as_root():
            opened, named = os.fstat(fd), os.stat(path)
            if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
                raise FileRefused(f"{path}: changed while it was being opened; refusing to use it as the {what}")

    @staticmethod
    def _refusal(path: Path, exc: OSError, what: str) -> MaintError:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                kind = kind_of(os.lstat(path).st_mode)
            except OSError:
                kind = "not a folder"
            return FileRefused(f"{path}: is {kind}, not a folder; refusing to use it as the {what}")
        return MaintError(f"{path}: cannot open the {what} ({exc.strerror})")

    def subfolder(self, name: str, *, create: bool = False, mode: int = 0o700,
                  owner: tuple[int, int] | None = None) -> Folder:
        self._plain(name)
        if create:
            try:
                os.mkdir(name, mode, dir_fd=self.fd)
            except FileExistsError:
                pass
            else:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
                os.fchmod(fd, mode)  # mkdir's mode passed through the umask
                _give(fd, owner or self.owner)
                return Folder(self.path / name, fd, owner or self.owner, self.store_owner)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as exc:
            raise self._refusal(self.path / name, exc, "folder") from None
        return Folder(self.path / name, fd, owner, self.store_owner)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- names ---------------------------------------------------------------------------------
    def _plain(self, name: str) -> str:
        if not name or "/" in name or os.sep in name or name in (".", ".."):
            raise FileRefused(f"refusing to use {name!r} inside {self.path}: not a plain file name")
        return name

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(self._plain(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def unlink(self, name: str) -> bool:
        try:
            os.unlink(self._plain(name), dir_fd=self.fd)
            return True
        except FileNotFoundError:
            return False

    def publish(self, temp: str, name: str) -> None:
        """Give our file *temp* the name *name*, never over an existing file (:class:`FileExistsError`): a hard link,
        then the temporary name goes; where the filesystem has no hard links (vfat, exFAT, CIFS without unix
        extensions: EPERM / EOPNOTSUPP), a rename that refuses an existing name (hostile try 12, P10: a backup
        onto a USB stick always failed "cannot write there")."""
        try:
            os.link(self._plain(temp), self._plain(name), src_dir_fd=self.fd, dst_dir_fd=self.fd,
                    follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP):
                raise
            _rename_noreplace(self.fd, self._plain(temp), self._plain(name), self.path)
            return
        self.unlink(temp)

    def sync(self) -> None:
        """Make a rename or link in this folder durable (best effort: some filesystems refuse)."""
        with contextlib.suppress(OSError):
            os.fsync(self.fd)

    def chmod(self, mode: int) -> None:
        os.fchmod(self.fd, mode)

    # -- reading -------------------------------------------------------------------------------
    def read(self, name: str, *, limit: int = READ_LIMIT, what: str = "file") -> bytes | None:
        """A regular file's bytes (None when absent); a link, FIFO or device is refused, never followed or waited on."""
        try:
            fd = os.open(self._plain(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FileRefused(f"{self.path / name}: is a symbolic link; refusing to read the {what}") from None
            raise
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise FileRefused(f"{self.path / name}: is {kind_of(st.st_mode)}, not a regular file; refusing to "
                                  f"read the {what}")
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise FileRefused(f"{self.path / name}: larger than {limit >> 20} MiB; refusing to read the {what}")
        return data

    def head(self, name: str, n: int) -> bytes:
        """The first *n* bytes of the regular file at *name* (empty when absent, special or unreadable)."""
        try:
            fd = os.open(self._plain(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=self.fd)
        except OSError:
            return b""
        try:
            return os.pread(fd, n, 0) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)

    # -- creating ------------------------------------------------------------------------------
    def create(self, name: str, mode: int = 0o600, *, owner: tuple[int, int] | None = None,
               exclusive: bool = True) -> int:
        """A file descriptor (read-write) on a new file (*exclusive*) or on the regular file there."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_NONBLOCK)
        try:
            fd = os.open(self._plain(name), flags, mode, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FileRefused(f"{self.path / name}: is a symbolic link; refusing to write through it") from None
            raise
        st = os.fstat(fd)
        refusal = None if stat.S_ISREG(st.st_mode) else f"is {kind_of(st.st_mode)}, not a regular file"
        if refusal is None and not exclusive:
            refusal = foreign_file(st, (owner or self.owner)[0])
        if refusal:
            os.close(fd)
            raise FileRefused(f"{self.path / name}: {refusal}; refusing to use it")
        os.set_blocking(fd, True)
        if exclusive or st.st_size == 0:
            with contextlib.suppress(OSError):
                os.fchmod(fd, mode)
            _give(fd, owner or self.owner)
        return fd

    def temporary(self, name: str, owner: tuple[int, int] | None = None) -> tuple[str, int]:
        """Our temporary name for *name* and a locked descriptor on it (0600, exclusive)."""
        self._plain(name)
        for _ in range(8):
            temp = f".{name[:160]}.{secrets.token_hex(8)}.partial"
            try:
                fd = self.create(temp, owner=owner)
            except FileExistsError:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a cleaner leaves it alone while we write
            return temp, fd
        raise MaintError(f"{self.path}: no free temporary name for {name}")

    def clear_leftovers(self, name: str | None = None, pattern: re.Pattern[str] = PARTIAL) -> list[str]:
        """Our temporary files (of *name*, or any matching *pattern*) that no live run holds: what killed
        runs left, with the ``-journal``, ``-wal`` and ``-shm`` SQLite left beside them under the same name
        (hostile try 4, G7: a killed ``backup --compact`` left ``.NAME.partial-journal`` for ever); such a
        journal whose temporary file is already gone goes too. A FIFO or link with such a name is left alone,
        never opened for good. A file of another user's is left too (hostile try 9, L15: in a shared folder her
        files under our names stopped every run, and a root run removed them): ours are owned by us or by the
        user we hand what we create to."""
        owners = {os.geteuid(), self.owner[0], *((self.store_owner[0],) if self.store_owner else ())}

        def ours(entry: str) -> bool:
            m = pattern.match(entry)
            return m is not None and (name is None or m.groupdict().get("name") == name[:160])

        def journals_of(entry: str) -> list[str]:
            gone = []
            for side in SQLITE_SIDES:
                st = self.lstat(entry + side)
                if st is not None and stat.S_ISREG(st.st_mode) and st.st_uid in owners and self.unlink(entry + side):
                    gone.append(entry + side)
            return gone

        removed = []
        entries = self.names()
        for entry in entries:
            if not ours(entry):
                continue
            try:
                fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
            except OSError:
                continue
            try:
                held = os.fstat(fd)
                if not stat.S_ISREG(held.st_mode) or held.st_uid not in owners:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live run is writing it (and its journal)
                removed.extend(journals_of(entry))  # while the lock is ours: no run can be using them
                if self.unlink(entry):
                    removed.append(entry)
            finally:
                os.close(fd)
        for entry in entries:  # a journal whose temporary file is gone: its run ended, or was killed between
            base = next((entry[:-len(side)] for side in SQLITE_SIDES if entry.endswith(side)), None)
            if base is not None and ours(base) and self.lstat(base) is None:
                removed.extend(journals_of(base))
        return removed

    def check_target(self, name: str) -> os.stat_result | None:
        """The status of the regular file at *name* we may replace (None when absent); anything else refused."""
        st = self.lstat(name)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{self.path / name}: is {kind_of(st.st_mode)}, not a regular file; refusing to write "
                              "there (nothing was written)")
        return st

    @contextlib.contextmanager
    def atomic(self, name: str, *, mode: int | None = None, replace: bool = True,
               owner: tuple[int, int] | None = None, expect: os.stat_result | None = None) -> Iterator[IO[bytes]]:
        """Write *name* whole or not at all: our temporary file, synced, then renamed over it (*replace*) or
        linked to it (never over an existing file). A file replaced keeps its mode (narrowed to *mode* when
        given) and its owner; a new one gets *mode* (0600 by default). The file there must not change while
        we write (nor since *expect*, the status the caller read it with)."""
        before = self.check_target(name)
        if expect is not None and (before is None or _identity(before) != _identity(expect)):
            raise MaintError(f"{self.path / name}: changed while it was being edited; not replaced "
                             "(run the command again)")
        if before is not None and not replace:
            raise FileExistsError(errno.EEXIST, "exists", str(self.path / name))
        if before is not None:
            if self.store_owner is not None and before.st_uid not in (0, self.store_owner[0], os.geteuid()):
                # A replaced file keeps its owner: a store's content must not go to a third user who made
                # the name first (hostile try 4, G1), as a new file never does (see __init__).
                raise FileRefused(f"{self.path / name}: belongs to uid {before.st_uid}, neither root nor the "
                                  "store's owner; refusing to replace it with the store's content (nothing was "
                                  "written)")
            keep = stat.S_IMODE(before.st_mode)
            final_mode = keep & mode if mode is not None else keep
            final_owner = owner or (before.st_uid, before.st_gid)
        else:
            final_mode, final_owner = (0o600 if mode is None else mode), owner or self.owner
        self.clear_leftovers(name)
        temp, fd = self.temporary(name, owner=final_owner)
        try:
            with os.fdopen(fd, "wb", closefd=False) as fh:
                yield fh
                fh.flush()
            made = os.fstat(fd)
            if before is not None and (made.st_uid, made.st_gid) != (before.st_uid, before.st_gid):
                try:
                    os.fchown(fd, before.st_uid, before.st_gid)
                except PermissionError:
                    raise MaintError(f"{self.path / name}: cannot keep its owner ({before.st_uid}:{before.st_gid}) "
                                     "when replacing it; not replaced") from None
            os.fchmod(fd, final_mode)  # after chown, which may clear set-id bits
            os.fsync(fd)
            now = self.check_target(name)
            if (now is None) != (before is None) or now is not None and _identity(now) != _identity(before):
                raise MaintError(f"{self.path / name}: changed while it was being written; not replaced "
                                 "(run the command again)")
            if replace:
                os.rename(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            else:
                self.publish(temp, name)
            self.sync()
        except BaseException:
            self.unlink(temp)
            raise
        finally:
            os.close(fd)


RENAME_NOREPLACE = 1  # linux/fs.h


def _rename_noreplace(dir_fd: int, old: str, new: str, where: Path) -> None:
    """``renameat2(RENAME_NOREPLACE)`` in one folder (glibc >= 2.28; Python has no wrapper)."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    failed = errno.ENOSYS if fn is None else 0
    if fn is not None and fn(dir_fd, os.fsencode(old), dir_fd, os.fsencode(new), RENAME_NOREPLACE) != 0:
        failed = ctypes.get_errno()
    if failed == errno.EEXIST:
        raise FileExistsError(failed, os.strerror(failed), str(where / new))
    if failed in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        raise OSError(errno.EOPNOTSUPP, "this filesystem has no hard links nor a rename that keeps an existing "
                      "file; write to another filesystem", str(where))
    if failed:
        raise OSError(failed, os.strerror(failed), str(where / new))


WORK_PREFIX = "hermes-maint-"


@contextlib.contextmanager
def private_workdir(kind: str) -> Iterator[Path]:
    """A private folder (0700, ours) in $TMPDIR named ``hermes-maint-KIND-*`` for a run's working copy, locked
    (``flock``) while the run holds it and removed when it ends. The folders of that kind a killed run left
    (SIGKILL, OOM, power loss: ours, and no live run's lock on them) are removed first: each held a whole copy
    of a store, in a $TMPDIR often small (hostile try 4, G6)."""
    prefix = f"{WORK_PREFIX}{kind}-"
    root = Path(tempfile.gettempdir())
    clear_workdirs(root, prefix)
    for _ in range(8):
        try:
            path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        except OSError as exc:
            raise MaintError(f"{root}: cannot make a private working folder there ({exc.strerror or exc}); point "
                             "TMPDIR at a folder with room; nothing was written") from None
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another run's clean-up took it between our mkdtemp and our lock
            os.close(fd)
            continue
        if os.fstat(fd).st_nlink == 0:  # ... and already removed it
            os.close(fd)
            continue
        break
    else:
        raise MaintError(f"{root}: no private working folder could be kept there")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def clear_workdirs(root: Path, prefix: str) -> list[str]:
    """Our working folders named *prefix*... in *root* that no live run holds (see :func:`private_workdir`);
    another user's, a link, or a file with such a name is left alone."""
    removed: list[str] = []
    me = os.geteuid() if hasattr(os, "geteuid") else None
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return removed
    try:
        for name in os.listdir(root_fd):
            if not name.startswith(prefix):
                continue
            try:
                st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode) or (me is not None and st.st_uid != me):
                    continue
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
            except OSError:
                continue
            try:
                opened = os.fstat(fd)
                if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live run works in it
                shutil.rmtree(name, ignore_errors=True, dir_fd=root_fd)  # never follows a link inside
                removed.append(name)
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    return removed


def _identity(st: os.stat_result | None) -> tuple[int, int, int] | None:
    return None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def name_held(path: Path | str) -> Iterator[str]:
    """An empty file of ours at *path* while the block runs, so nobody else can make one there (in a sticky
    folder nobody can take a name that exists): yields ``"held"``, ``"exists"`` (someone's file is there; judge
    it) or ``"failed"`` (a folder we cannot write). Mode 0644, whoever runs: another user's process that opens
    the name meanwhile (SQLite's hot-journal probe) reads an empty file. Removed after, if still ours and empty."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        yield "exists"
        return
    except OSError:
        yield "failed"
        return
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o644)  # whatever the umask
        yield "held"
    finally:
        with contextlib.suppress(OSError):
            mine, now = os.fstat(fd), os.lstat(path)
            if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino) and now.st_size == 0:
                os.unlink(path)
        os.close(fd)


def owner_of(path: Path | str) -> tuple[int, int] | None:
    """(uid, gid) of *path*, or None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_uid, st.st_gid


@contextlib.contextmanager
def atomic_file(path: Path | str, *, mode: int | None = None, replace: bool = True,
                owner: tuple[int, int] | None = None, what: str = "folder",
                store: Path | str | None = None) -> Iterator[IO[bytes]]:
    """:meth:`Folder.atomic` for *path* in its existing folder (a folder the operator named: links followed;
    with *store*, as :meth:`Folder.open` says for a store's content)."""
    path = Path(os.path.abspath(Path(path).expanduser()))
    with Folder.open(path.parent, what=what, follow_links=True, store=store) as folder, \
            folder.atomic(path.name, mode=mode, replace=replace, owner=owner) as fh:
        yield fh


def is_database_file(folder: Folder, name: str) -> bool:
    """A SQLite database or a journal beside one: never replaced by an export."""
    for suffix in ("-wal", "-shm", "-journal"):
        if name.endswith(suffix) and folder.lstat(name[:-len(suffix)]) is not None:
            return True
    return folder.head(name, 16) == SQLITE_HEADER


# Files SQLite, Hermes and we keep beside a store, by the suffix on the store's name.
STORE_COMPANIONS = ("-wal", "-shm", "-journal", ".hermes-maint.lock", ".auto-maintenance.lock")


def store_companion(path: Path | str) -> str | None:
    """Why *path* names a file kept beside a store (whether or not it exists yet), or None.

    A new file we write there (an export, a compacted or salvaged copy) would be replayed into the store,
    removed by its next open, or truncated by the next run's lock: every "new file" argument is checked here.
    """
    path = Path(os.path.abspath(Path(path).expanduser()))
    for suffix in STORE_COMPANIONS:
        base = path.name[:-len(suffix)]
        if not path.name.endswith(suffix) or not base:
            continue
        try:
            with Folder.open(path.parent, follow_links=True) as folder:
                if folder.head(base, 16) == SQLITE_HEADER:
                    return f"is the {suffix.lstrip('-.')} file SQLite or a lock keeps beside the store {base}"
        except (OSError, MaintError):
            return None
    if path.name == "config.yaml":
        return "is Hermes's config.yaml"
    return None
