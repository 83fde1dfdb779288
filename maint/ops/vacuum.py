"""Giving space back: FTS optimize, WAL checkpoint and an in-place VACUUM.

VACUUM rewrites the file through SQLite's own pager, so the store keeps its
inode (Hermes halts its writers when the file is replaced) and its -wal/-shm.
It needs roughly a full copy of free space; we refuse up front rather than
fail half way.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from maint.crashpoints import crash_point
from maint.errors import MaintError, StoreError
from maint.store.connection import Store

MIN_MARGIN_BYTES = 64 * 2**20
DiskUsage = Callable[[Path], Any]  # shutil.disk_usage, or a test's stand-in with .free


def space_shortfall(store: Store, disk_usage: DiskUsage = shutil.disk_usage) -> tuple[int, int, int] | None:
    """(free, needed, store size) when the filesystem lacks room for a VACUUM copy, else None."""
    size = sum(store.file_sizes().values())
    free = disk_usage(store.path.parent).free
    need = size + max(MIN_MARGIN_BYTES, size // 10)
    return (free, need, size) if free < need else None


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


def vacuum_in_place(store: Store) -> float:
    started = time.monotonic()
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
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except Exception:  # readers still on old frames: a later checkpoint finishes the job
        checkpoint(store)
    return time.monotonic() - started


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


def optimize(store: Store, disk_usage: DiskUsage = shutil.disk_usage) -> OptimizeResult:
    before = sum(store.file_sizes().values())
    check_space(store, disk_usage)
    started = time.monotonic()
    tables = optimize_fts(store)
    checkpoint(store)
    vacuum_in_place(store)
    after = sum(store.file_sizes().values())
    return OptimizeResult(tables, before, after, time.monotonic() - started)
