"""The auto-maintenance lock file Hermes takes beside the store for a whole sweep.

A non-blocking ``flock`` on ``<db>.auto-maintenance.lock``: whoever holds it
sweeps; everyone else skips and says why. The lock dies with its process, so
a killed sweep never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from collections.abc import Iterator

from maint import files
from maint.errors import MaintError


class LockHeld(MaintError):
    """Another process is sweeping this store right now."""


def lock_path(db: Path) -> Path:
    return Path(str(db) + ".auto-maintenance.lock")


@contextlib.contextmanager
def maintenance_lock(db: Path) -> Iterator[Path]:
    path = lock_path(db)
    try:  # Hermes creates it 0644; never through a link, and owned by the store's owner after a root run
        with files.Folder.open(path.parent, follow_links=True, what="store's folder") as folder:
            fd = folder.create(path.name, 0o644, exclusive=False, owner=files.owner_of(db))
    except files.FileRefused as exc:
        raise MaintError(f"cannot use the auto-maintenance lock: {exc}") from None
    except OSError as exc:
        raise MaintError(f"{path}: cannot open the auto-maintenance lock ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockHeld(f"{path}: another process holds the auto-maintenance lock") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        yield path
    finally:
        os.close(fd)
