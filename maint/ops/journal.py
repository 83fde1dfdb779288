"""Switching a store between WAL and rollback (DELETE) journaling, without losing a commit.

Refused while any process holds the database or its side files (a switch
under a process with uncheckpointed WAL commits loses them), and refused
outright when the holder check could not complete unless the operator says
``force``. Leaving WAL checkpoints first, so commits left in the WAL by a
killed writer are kept. The result is verified from the file header
(bytes 18-19: 1 = rollback journal, 2 = WAL), not only from the PRAGMA.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from maint.crashpoints import crash_point
from maint.errors import MaintError, StoreError
from maint.flow import target_config
from maint.store.holders import HeldStore, find_holders, refuse_if_held
from maint.store.runlock import run_lock
from maint.store.connection import (schema_problem, WAL_RESET_FIXED, _check_header, check_writable,
                                    connect_checked, has_wal_reset_bug, header_bytes, header_journal_mode)

if TYPE_CHECKING:
    from maint.store.targets import StoreTarget

MODES = ("wal", "delete")
WAL_UNSAFE_FS = ("virtiofs", "9p")


def filesystem_type(path: Path, mounts: Path | None = None) -> str | None:
    """The filesystem type of the mount holding *path*, from /proc/mounts (longest mount point wins).

    ``HERMES_MAINT_MOUNTS`` points at another mounts table (tests inject one).
    """
    mounts = mounts or Path(os.environ.get("HERMES_MAINT_MOUNTS", "/proc/mounts"))
    try:
        lines = os.fsdecode(mounts.read_bytes()).splitlines()  # a mount point's name need not be UTF-8
    except OSError:
        return None
    target = str(Path(path).resolve())
    best, best_len = None, -1
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) > best_len:
            best, best_len = parts[2], len(point)
    return best


@dataclass
class SwitchResult:
    path: str
    before: str
    after: str
    header: tuple[int, int]
    warnings: list[str]
    schema_version: int | None = None


def stdlib_wal_warning() -> str | None:
    version = sqlite3.sqlite_version
    if has_wal_reset_bug(version):
        fixed = ", ".join(".".join(map(str, v)) for v in WAL_RESET_FIXED)
        return (f"Python's standard sqlite3 here links SQLite {version}, which has the WAL-reset corruption bug "
                f"(3.7.0-3.51.2; fixed in {fixed}); Hermes uses that library")
    return None


def _stored_schema_version(path: Path, checked: os.stat_result) -> object:
    """MAX(version) of the store's schema_version table as stored (None for another SQLite store), read from
    the file *checked* (a path swapped since is refused)."""
    conn = connect_checked(path, checked, apsw.SQLITE_OPEN_READONLY)
    try:
        has = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_version'").fetchone()
        return conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] if has else None
    finally:
        conn.close()


def _refuse_newer_schema(path: Path, checked: os.stat_result) -> int | None:
    """Any SQLite store may be switched, but not a Hermes store newer than we know (nor one whose version is
    not a whole number). The store's Hermes schema version (None for another SQLite store)."""
    version = _stored_schema_version(path, checked)
    problem = schema_problem(version)
    if problem:
        raise StoreError(f"{path}: {problem}; refusing to switch its journal mode")
    return version if isinstance(version, int) else None


def set_journal_mode(path: Path, mode: str, *, force: bool = False,
                     holders=find_holders) -> SwitchResult:
    path = Path(path).expanduser()
    if mode not in MODES:
        raise MaintError(f"journal mode {mode!r} (expected wal or delete)")
    if not path.exists():
        raise StoreError(f"{path}: no such store (expected an existing SQLite database)")
    _check_header(path)
    checked = check_writable(path)
    schema_version = _refuse_newer_schema(path, checked)
    warnings: list[str] = []
    if mode == "wal":
        fs = filesystem_type(path.parent)
        if fs in WAL_UNSAFE_FS:
            raise MaintError(f"{path}: refusing to enable WAL on {fs}: WAL shared memory silently corrupts "
                             f"there; keep journal_mode=delete")
        warning = stdlib_wal_warning()
        if warning:
            warnings.append(warning)
    refuse_if_held(path, force=force, doing="switch", advice="stop them first", holders=holders)
    before = header_journal_mode(path)
    lock = run_lock(path)  # no other hermes-maint works on the store meanwhile
    conn = connect_checked(path, checked, apsw.SQLITE_OPEN_READWRITE, busy_timeout_ms=2000)
    try:
        if mode == "delete" and before == "wal":
            # Keep every commit a killed writer left in the WAL: copy it all into the database first.
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                raise HeldStore(f"{path}: another process opened the store meanwhile (checkpoint blocked); "
                                "store untouched")
        crash_point("journal_switch")
        answer = conn.execute(f"PRAGMA journal_mode={mode}").fetchone()[0].lower()
    except apsw.BusyError:
        raise HeldStore(f"{path}: another process opened the store meanwhile; SQLite refused the switch, "
                        "store untouched") from None
    finally:
        conn.close()
        lock.release()
    header = header_bytes(path)
    after = header_journal_mode(path)
    if answer != mode or after != mode:
        raise MaintError(f"{path}: switch to {mode} did not take (PRAGMA says {answer}, header says {after}); "
                         "another process may have opened the store")
    return SwitchResult(path=str(path), before=before, after=after, header=header, warnings=warnings,
                        schema_version=schema_version)


# What Hermes applies on open when config.yaml has no database.journal_mode.
HERMES_DEFAULT_JOURNAL_MODE = "wal"
# The newest schema written by a Hermes release that has no database.journal_mode setting and sets WAL on
# every open (hermes-agent 0.19.x writes schema 22: ``apply_wal_with_fallback`` in its hermes_state.py).
# Upstream's current releases read the setting (the Sessions documentation, "set-journal-mode").
LAST_SCHEMA_WITHOUT_JOURNAL_SETTING = 22


def reverts_on_open(schema_version: int | None, mode: str) -> str | None:
    """Why a switch to *mode* lasts only until Hermes next opens the store, or None when it sticks (as far
    as the store tells): a store a release without ``database.journal_mode`` writes goes back to WAL."""
    if mode == "wal" or schema_version is None or schema_version > LAST_SCHEMA_WITHOUT_JOURNAL_SETTING:
        return None
    return (f"this store's schema ({schema_version}) is written by a Hermes release without a "
            "database.journal_mode setting (hermes-agent 0.19.x and older), which switches every store it "
            "opens back to WAL: delete mode lasts only until Hermes next opens the store. It sticks once the "
            "store is opened by a Hermes that reads database.journal_mode and config.yaml says delete")


def config_advice(cfg, mode: str) -> str | None:
    """The config.yaml change that makes *mode* stick, or None when the config already agrees.

    Hermes re-applies its configured journal mode (or its default, WAL) each time it opens the
    store, so a switch the config does not name is undone by the next Hermes start.
    """
    configured = cfg.journal_mode
    if (configured or HERMES_DEFAULT_JOURNAL_MODE) == mode:
        return None
    said = (f"{cfg.path} says database.journal_mode: {configured}" if configured else
            f"{cfg.path} has no database.journal_mode, so Hermes applies its default ({HERMES_DEFAULT_JOURNAL_MODE})")
    return f"{said} and will switch it back on its next start. Set:\n  database:\n    journal_mode: {mode}"


def switch_store(target: StoreTarget, mode: str, *, force: bool = False) -> dict[str, Any]:
    """``hermes-maint set-journal-mode`` on one store: the switch, its warnings, and what config.yaml should say."""
    cfg = target_config(target)
    result = set_journal_mode(target.path, mode, force=force)
    reverts = reverts_on_open(result.schema_version, mode)
    return {"store": result.path, "before": result.before, "after": result.after, "header": list(result.header),
            "warnings": result.warnings, "sticks": reverts is None, "reverts_on_open": reverts,
            "config_advice": config_advice(cfg, mode)}
