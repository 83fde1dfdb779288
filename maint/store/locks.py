"""The auto-maintenance lock file Hermes takes beside the store for a whole sweep.

A non-blocking ``flock`` on ``<db>.auto-maintenance.lock``: whoever holds it
sweeps; everyone else skips and says why. The lock dies with its process, so
a killed sweep never leaves a stale lock behind.

A ``flock`` needs only a descriptor, and a read-only one will do: anyone who can
open the file can hold it and so skip every sweep. We create it 0600 (plus the
group's read and write when the store itself is group-writable, so a Hermes of
that group still opens it ``a+b`` as upstream does), handed to the store's owner;
Hermes's own file is usually 0644. So a skip also names who holds the lock
(``/proc/locks``), and a holder that is neither the store's owner, root nor us is
:attr:`LockHeld.foreign`: the sweep command exits 1 and doctor reports it, so a
sweep suppressed night after night shows up in monitoring.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path
from collections.abc import Iterator

from maint import files
from maint.errors import MaintError
from maint.store.holders import LockHolder, flock_holders


class LockHeld(MaintError):
    """Another process is sweeping this store right now (*holders*; *foreign*: those of another user)."""

    def __init__(self, message: str, holders: list[LockHolder] | None = None,
                 foreign: list[LockHolder] | None = None):
        super().__init__(message)
        self.holders, self.foreign = holders or [], foreign or []


def lock_path(db: Path) -> Path:
    return Path(str(db) + ".auto-maintenance.lock")


def _mode_for(db: Path) -> int:
    """0600, with the group's read and write when the store is group-writable (a Hermes of its group)."""
    try:
        return 0o600 | (0o060 if os.stat(db).st_mode & stat.S_IWGRP else 0)
    except OSError:
        return 0o600


def _foreign(holders: list[LockHolder], store_owner: int | None) -> list[LockHolder]:
    trusted = {0, os.geteuid(), store_owner}
    return [h for h in holders if h.uid is not None and h.uid not in trusted]


def held_message(path: Path, holders: list[LockHolder] | None, foreign: list[LockHolder]) -> str:
    if foreign:
        return (f"{path}: held by {'; '.join(h.describe() for h in foreign)}, not the store's owner, root or us: "
                "every sweep is skipped while it holds the lock (stop that process, or remove the lock file with "
                "Hermes stopped)")
    who = f" ({'; '.join(h.describe() for h in holders)})" if holders else ""
    return f"{path}: another process holds the auto-maintenance lock{who}"


def foreign_holders(db: Path) -> tuple[Path, list[LockHolder]]:
    """Read-only (doctor): the holders of the lock of another user than the store's owner, root or us; the
    lock file is never created nor opened (a missing one, or anything but a regular file, has none)."""
    path = lock_path(db)
    try:
        st = os.lstat(path)
    except OSError:
        return path, []
    if not stat.S_ISREG(st.st_mode):
        return path, []
    owner = files.owner_of(db)
    return path, _foreign(flock_holders(st) or [], owner[0] if owner else None)


@contextlib.contextmanager
def maintenance_lock(db: Path) -> Iterator[Path]:
    path = lock_path(db)
    owner = files.owner_of(db)
    try:  # never through a link, and owned by the store's owner after a root run
        with files.Folder.open(path.parent, follow_links=True, what="store's folder") as folder:
            fd = folder.create(path.name, _mode_for(db), exclusive=False, owner=owner)
    except files.FileRefused as exc:
        raise MaintError(f"cannot use the auto-maintenance lock: {exc}") from None
    except OSError as exc:
        raise MaintError(f"{path}: cannot open the auto-maintenance lock ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holders = flock_holders(os.fstat(fd))
            foreign = _foreign(holders or [], owner[0] if owner else None)
            raise LockHeld(held_message(path, holders, foreign), holders, foreign) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        yield path
    finally:
        os.close(fd)
