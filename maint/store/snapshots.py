"""The snapshot folder, and copies of stores made in it before a repair changes them.

backup and restore keep their snapshots in this folder; repair-profiles and repair-routing copy every
store they are about to change into a timestamped folder inside it. Living below ``ops/``, it spares
one command's module from importing another's.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path

import apsw

from maint import files
from maint.errors import MaintError, UsageError
from maint.store.connection import check_regular_file, connect, connect_checked
from maint.store.targets import hermes_home


def default_folder() -> Path:
    return hermes_home() / "state-snapshots"


SNAPSHOTS_AT_STAKE = ("would hold the store's snapshots, and another user could remove one or put their own "
                      "database under its name for a later restore")


def refuse_untrusted_folder(folder: Path | None, store: Path, nothing: str = "no snapshot was made") -> None:
    """The snapshot folder (None: the default) must be one only we, root or *store*'s owner control
    (:func:`maint.files.refuse_untrusted_keeper`, the rule of export --delete-after-verified's OUTPUT folder):
    one line, before anything is written (hostile try 5, H11: backup wrote into mallory's folder, and restore
    then put back whatever she left under the snapshot's name)."""
    owner = files.owner_of(store)
    where = default_folder() if folder is None else Path(folder)
    try:
        files.refuse_untrusted_keeper(where, owner[0] if owner else None, what="snapshot folder",
                                      stake=SNAPSHOTS_AT_STAKE)
        files.refuse_database_folder(where, owner[0] if owner else None, what="snapshot folder")
    except files.FileRefused as exc:
        raise MaintError(f"{exc}; {nothing}") from None


def prepare_folder(folder: Path | None, store: Path) -> Path:
    """The snapshot folder (its real path), created 0700 when missing; ours (the default) is kept 0700.

    The default folder is ours by name, so a symlink or anything but a folder at
    ``$HERMES_HOME/state-snapshots`` is refused, never followed (a root run would otherwise write, and
    tighten modes, wherever it points); a DEST the operator names may be a link to a folder (for a root run
    backing up *store*: a link root or the store's owner owns). A root run hands a folder it creates to the
    owner of the folder it is created in (to the store's owner when that is a third user).
    """
    default = folder is None
    path = default_folder() if default else Path(folder).expanduser()
    if not default and not os.path.lexists(path) and not path.parent.is_dir():
        raise UsageError(f"DEST: folder {path.parent} does not exist (expected an existing folder, "
                         "or a new folder inside one)")
    if not default and os.path.lexists(path) and not path.is_dir():
        raise UsageError(f"DEST: {path} is not a folder (expected a folder for the snapshots)")
    refuse_untrusted_folder(path, store)  # every snapshot folder, whoever asks (backup, restore, the repairs)
    try:
        with files.Folder.open(path, create=True, parents=default, follow_links=not default,
                               what="snapshot folder", store=store) as opened:
            if default and stat.S_IMODE(os.fstat(opened.fd).st_mode) & 0o077:
                with contextlib.suppress(PermissionError):
                    opened.chmod(0o700)
            return Path(os.path.realpath(opened.path))
    except files.FileRefused as exc:
        raise MaintError(f"{exc}; no snapshot was made") from None


COPY_STEP_PAGES = 4096  # 16 MB of 4 KB pages a step (restore's copy too): a stop waits for one step at most


MAX_RESTARTS = 50  # a rollback-journal store written this often during a copy needs a quieter moment (backup too)


def _copy(src: apsw.Connection, dst: apsw.Connection, path: Path) -> None:
    """The backup API in steps (a stop is honoured between two: hostile try 14, R7), from one read snapshot of a WAL
    store, so Hermes's commits meanwhile do not restart it (try 15, S5: a writer committing every 0.45 s kept the
    copy of a 1.2 GB store going past 180 s); a rollback-journal store's readers would block Hermes's writers, so
    there the restarts are counted and capped instead, as backup's are."""
    wal = str(src.execute("PRAGMA journal_mode").fetchall()[0][0]).lower() == "wal"
    if wal:
        src.execute("BEGIN")
        src.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # the first read pins the snapshot
    try:
        with dst.backup("main", src, "main") as backup:
            previous, restarts = None, 0
            while not backup.done:
                backup.step(COPY_STEP_PAGES)
                _after_step()
                if previous is not None and backup.remaining >= previous:  # no progress: restarted
                    restarts += 1
                    if restarts > MAX_RESTARTS:
                        raise MaintError(f"{path}: the store changed {restarts} times during its snapshot copy; a "
                                         "rollback-journal store needs a moment without writes (run again at a "
                                         "quiet time, or keep the store in WAL mode); nothing was changed")
                previous = backup.remaining
    finally:
        if wal:
            with contextlib.suppress(apsw.Error):
                src.execute("COMMIT")


def _after_step() -> None:
    """Between two steps of a copy (where tests write to the store as Hermes would)."""


def copy_stores(stores: dict[str, Path], label: str) -> Path:
    """Copies of every store through SQLite's backup API, in a timestamped folder named for *label*
    inside the snapshot folder (made and opened as backup does: no link followed, 0700, owned as its home)."""
    parent = prepare_folder(None, store=next(iter(stores.values())))
    base = time.strftime(f"{label}-%Y%m%d-%H%M%S")
    with files.Folder.open(parent) as snapshots:
        name, n = base, 1
        while snapshots.lstat(name) is not None:  # two runs within one second get two folders
            n += 1
            name = f"{base}-{n}"
        with snapshots.subfolder(name, create=True) as folder:
            made: list[str] = []
            try:
                for profile, path in stores.items():
                    made.append(f"{profile}.state.db")
                    os.close(folder.create(made[-1]))
                    # the store whose links were judged, not whatever its name leads to by now (hostile try 5, H1)
                    src = connect_checked(path, check_regular_file(path), apsw.SQLITE_OPEN_READONLY)
                    dst = connect(str(folder.path / made[-1]))
                    try:
                        _copy(src, dst, path)
                    except apsw.Error as exc:  # a planted -journal refused, ... (hostile try 15, S6)
                        raise MaintError(f"{folder.path / made[-1]}: the snapshot copy of {path} could not be "
                                         f"written ({type(exc).__name__}); the incomplete snapshot was removed, "
                                         "nothing was changed") from None
                    finally:
                        dst.close()
                        src.close()
            except BaseException:
                # an incomplete set is no snapshot: nothing of it stays to be taken for one (try 14, R7)
                for made_name in made:
                    for suffix in ("", "-journal", "-wal", "-shm"):
                        with contextlib.suppress(OSError):  # a name too long to make is too long to remove (S8)
                            folder.unlink(made_name + suffix)
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=snapshots.fd)
                raise
            return folder.path
