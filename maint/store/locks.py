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

That rule is :func:`lock_file`, the one way we take a lock another user may take:
the metrics file's lock (:mod:`maint.ops.metrics`) goes through it too.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from collections.abc import Callable, Iterator

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


def foreign(holders: list[LockHolder], owner: int | None) -> list[LockHolder]:
    """The *holders* of another user than *owner* (whose file it is), root or us."""
    trusted = {0, os.geteuid(), owner}
    return [h for h in holders if h.uid is not None and h.uid not in trusted]


@contextlib.contextmanager
def lock_file(folder: files.Folder, name: str, *, what: str, mode: int = 0o600,
              owner: tuple[int, int] | None = None, wait_s: float = 0.0,
              message: Callable[[Path, list[LockHolder] | None, list[LockHolder]], str]) -> Iterator[int]:
    """A lock another user may take: ``flock`` on *name* in *folder*, a file of ours.

    Opened (created *mode*, handed to *owner*, when missing) through :meth:`files.Folder.create`: never
    through a link, only a regular file with one name and of *owner*, root or us. Waited for *wait_s* at
    most (0: once); when still held, :class:`LockHeld` names the holders from ``/proc/locks`` and those of
    another user than *owner*, root or us (*foreign*), with *message* (path, holders, foreign) as its text.
    Yields the descriptor, locked; the lock goes with it."""
    path = folder.path / name
    try:
        fd = folder.create(name, mode, exclusive=False, owner=owner)
    except files.FileRefused as exc:
        raise MaintError(f"cannot use the {what}: {exc}") from None
    except OSError as exc:
        raise MaintError(f"{path}: cannot open the {what} ({exc.strerror})") from None
    try:
        if not files.lock(fd, wait_s):
            holders = flock_holders(os.fstat(fd))
            others = foreign(holders or [], owner[0] if owner else None)
            raise LockHeld(message(path, holders, others), holders, others)
        yield fd
    finally:
        os.close(fd)


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
    return path, foreign(flock_holders(st) or [], owner[0] if owner else None)


@contextlib.contextmanager
def maintenance_lock(db: Path) -> Iterator[Path]:
    path = lock_path(db)
    try:
        folder = files.Folder.open(path.parent, follow_links=True, what="store's folder")
    except files.FileRefused as exc:
        raise MaintError(f"cannot use the auto-maintenance lock: {exc}") from None
    # never through a link, and owned by the store's owner after a root run
    with folder, lock_file(folder, path.name, what="auto-maintenance lock", mode=_mode_for(db),
                           owner=files.owner_of(db), message=held_message) as fd:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        yield path
