"""Our own run lock: one hermes-maint process at a time may change a store.

Separate from Hermes's ``<db>.auto-maintenance.lock`` (that one only says who sweeps). Two
``prune --yes`` on one store would otherwise plan the same sessions, both report them deleted,
and take turns holding the write lock far past the budget. A non-blocking ``flock`` on
``<db>.hermes-maint.lock`` (0600, created through :mod:`maint.files`: no link followed, owned by the
store's owner) is held while a writable Store is open; a second process is refused, naming the
holder's pid. The kernel drops the lock when its process dies, so a killed run never leaves a stale
lock. Within one process the lock belongs to the thread that took it: nested opens by that thread
share it (counted), and another thread (another job of the job loop) waits up to
:data:`THREAD_WAIT_S` for it, then is refused as another process would be, so two runs never save
each other's held FTS5 settings or index notes as Hermes's.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from maint import files
from maint.errors import StoreError

class RunLockHeld(StoreError):
    """Another hermes-maint process is changing this store right now."""


_held: dict[str, RunLock] = {}
_guard = threading.Lock()
_released = threading.Condition(_guard)
# How long a job waits for another job of this process to let go of the store (a skipped sweep holds
# it for its notice and history row only) before it is refused.
THREAD_WAIT_S = 10.0


def lock_path(db: Path) -> Path:
    return Path(f"{db}.hermes-maint.lock")


@dataclass
class RunLock:
    key: str
    fd: int
    count: int = 1
    owner: int = 0  # the thread that holds it

    def release(self) -> None:
        with _guard:
            self.count -= 1
            if self.count > 0:
                return
            _held.pop(self.key, None)
            os.close(self.fd)  # closing the descriptor drops the flock
            _released.notify_all()


def run_lock(db: Path) -> RunLock:
    """Take the run lock for *db* or raise :class:`StoreError` naming the process that has it."""
    key = os.path.realpath(db)
    with _guard:
        if key in _held and _held[key].owner != threading.get_ident():
            _released.wait_for(lambda: key not in _held, THREAD_WAIT_S)
        if key in _held:
            if _held[key].owner != threading.get_ident():
                raise RunLockHeld(f"{db}: another job of this hermes-maint (pid {os.getpid()}) is working on this "
                                  "store; nothing was changed, run again when it has finished")
            _held[key].count += 1
            return _held[key]
        path = lock_path(Path(key))
        for _ in range(3):
            fd = _take(db, key, path)
            if _still_named(fd, path):
                break
            os.close(fd)  # removed (tidy_lock) between our open and our flock: take the file now there
        else:
            raise RunLockHeld(f"{db}: our run lock {path} kept changing while we took it; nothing was changed, run "
                              "again")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        lock = _held[key] = RunLock(key, fd, owner=threading.get_ident())
        return lock


def _take(db: Path, key: str, path: Path) -> int:
    """The lock file, created when missing, with our flock on it; refused when another process holds it."""
    try:
        # Beside the store and owned by the store's owner, even after a run as root.
        with files.Folder.open(path.parent, follow_links=True, what="store's folder") as folder:
            fd = folder.create(path.name, exclusive=False, owner=files.owner_of(key))
    except files.FileRefused as exc:
        raise StoreError(f"cannot create our run lock: {exc}") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot create our run lock ({exc.strerror}); it keeps two hermes-maint "
                         "runs apart, so nothing was changed") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        # What another process wrote there is shown only as the pid it should be, never raw.
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        holder = holder if holder.isascii() and holder.isdigit() else "unknown"
        os.close(fd)
        raise RunLockHeld(f"{db}: another hermes-maint (pid {holder}) is working on this store; nothing was "
                          "changed, run again when it has finished") from None
    return fd


def _still_named(fd: int, path: Path) -> bool:
    """Whether the file we locked is still the one at *path* (a lock on a removed file keeps no one out)."""
    try:
        held, named = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def tidy_lock(db: Path) -> None:
    """Remove the run lock file of *db* when no one holds it: for a report or dry run that had to open the store
    writable (FTS5's content check is a write) and leaves the store's folder as it found it (hostile try 9, L2).
    Taken first, so no run is between its open and its check; :func:`run_lock` checks that the file it locked is
    still the one named, so a run that opened it before the removal takes the new one."""
    path = lock_path(Path(os.path.realpath(db)))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _still_named(fd, path) and stat.S_ISREG(os.fstat(fd).st_mode):
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)
