"""recover --salvage NEW_PATH: every readable row of a damaged store copied into a new file in Hermes's schema.

Upstream's ``hermes sessions recover --allow-partial`` (hermes_cli/session_recovery.py, #71629, #71770,
#71803) is the model, followed where it decides:

* The damaged store is never opened in place: its file, its ``-wal`` and a hot ``-journal`` (rolled back
  on the copy, so a writer's uncommitted transaction is undone there) are copied into a private working
  folder in $TMPDIR first (its room checked before; locked while the run lives, so the next salvage removes
  one a killed run left: :func:`maint.files.private_workdir`), fingerprinted (SHA-256) before and after the
  copy; a store that changed meanwhile (a Hermes process still writing) is refused. Nothing is ever written to it,
  and the result is never installed over it.
* The new file gets the damaged store's own schema (its tables, full-text tables, views, triggers and
  indexes, read from the copy's ``sqlite_master``), so it is exactly the layout the Hermes that wrote the
  store reads. The full-text indexes are not copied: the rows are inserted through Hermes's own
  triggers, which index each message as Hermes does, and each index is checked at the end.
* Each table is read by rowid range; a range that fails is split in two until every readable row on
  both sides of a damaged page is copied, within a query budget per table. What could not be read is
  reported as rowid ranges per table; a row that reads but breaks a constraint is reported too.
* Messages whose session row was lost keep their transcript: each such session id gets a placeholder
  session (source ``recovered``, as ``hermes-maint recover`` makes them). A session whose parent or
  prompt row was lost loses that link; any other row whose parent was lost is dropped and counted.
* The result must pass ``integrity_check``, ``foreign_key_check`` and each index's own check, or it is
  removed. It is built under a temporary name beside NEW_PATH (0600, owned like the store) and linked to
  NEW_PATH only then, never over an existing file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from maint import files
from maint.errors import MaintError, UsageError
from maint.ops import fts
from maint.ops.vacuum import room_problem, write_limit_reached
from maint.store.sqlutil import fts5_indexes, is_fts5_sql, is_virtual_sql
from maint.store.connection import (PROGRESS_STEPS, Store, check_regular_file, connect, held_file, quote_ident,
                                    scaled_write_limit_s)

ROWID_MIN, ROWID_MAX = -(2**63), 2**63 - 1
QUERY_BUDGET = 200_000  # range queries per table before the rest of a damaged span is reported unread
# Copied beside the private copy, under the copy's name. A -shm is rebuilt from the WAL. A hot -journal holds
# the original pages of a transaction that never committed (the main file holds its half-written ones):
# SQLite rolls it back on the private copy's first read, so the salvage reads the last committed state.
SIDE_FILES = ("-wal", "-journal")
DERIVED_META = ("fts_rebuild_high_water", "fts_rebuild_progress")
READ_ERRORS = (apsw.CorruptError, apsw.NotADBError, apsw.IOError, apsw.SQLError, apsw.FormatError,
               apsw.MismatchError, apsw.RangeError)


class _WriteFailed(MaintError):
    """Writing the new file failed (not reading the damaged one)."""


@dataclass
class TableResult:
    name: str
    copied: int = 0
    unread: list[list[int]] = field(default_factory=list)  # [first, last] rowid spans that failed to read
    rejected: list[int] = field(default_factory=list)  # rowids read but refused by the schema
    dropped: int = 0  # rows whose parent row was lost
    queries: int = 0
    budget_spent: bool = False
    unreadable: str | None = None  # the whole table failed (not even its first page)

    def as_dict(self) -> dict[str, Any]:
        return {"table": self.name, "copied": self.copied, "unread_rowid_ranges": self.unread,
                "rejected_rowids": self.rejected[:100], "rejected": len(self.rejected), "dropped": self.dropped,
                "queries": self.queries, "budget_spent": self.budget_spent, "error": self.unreadable}


def _sha256(path: Path, follow_links: bool = True) -> str | None:
    if not os.path.lexists(path):
        return None
    digest = hashlib.sha256()
    with files.open_regular(path, what="store", follow_links=follow_links) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fingerprint(path: Path) -> dict[str, str | None]:
    return {suffix or "db": _sha256(Path(f"{path}{suffix}"), follow_links=not suffix) for suffix in ("", *SIDE_FILES)}


def bundle_bytes(path: Path) -> int:
    """What the private copy of the store and its side files takes."""
    total = 0
    for suffix in ("", *SIDE_FILES):
        with contextlib.suppress(OSError):
            total += os.lstat(f"{path}{suffix}").st_size
    return total


def copy_bundle(path: Path, work: Path, checked: os.stat_result | None = None) -> tuple[Path, dict[str, str | None]]:
    """The store and its WAL copied into *work*; refused when either changed while copied. The store copied is
    the file *checked* (whose links were judged), and its side files the ones beside it, not whatever the name
    leads to by then (hostile try 6, I3: a folder swapped for a link to another user's home)."""
    checked = checked or check_regular_file(path)
    before = _fingerprint(path)
    copy = work / "damaged.db"
    store_folder = None
    with files.Folder.open(work) as folder:
        for suffix in ("", *SIDE_FILES):
            src = Path(f"{path}{suffix}")
            if not os.path.lexists(src):
                continue
            with files.open_regular(src, what="store", follow_links=not suffix) as fh, \
                    os.fdopen(folder.create(f"{copy.name}{suffix}"), "wb") as out:
                held = os.fstat(fh.fileno())
                where = os.path.dirname(info[1]) if (info := held_file(fh.fileno())) else None
                if not suffix:
                    store_folder = where
                if (not suffix and (held.st_dev, held.st_ino) != (checked.st_dev, checked.st_ino)) or \
                        (suffix and where != store_folder):
                    raise MaintError(f"{path}: changed while it was being opened (a folder on its path was swapped); "
                                     "refusing, nothing was written")
                shutil.copyfileobj(fh, out, 1 << 20)
    after = _fingerprint(path)
    if before != after:
        raise MaintError(f"{path}: changed while it was being copied (a Hermes process is still writing to it); "
                         "stop every Hermes process using this store and run the salvage again; nothing was "
                         "written")
    return copy, before


def _schema(src: apsw.Connection, path: Path) -> list[tuple[str, str, str, str]]:
    try:
        rows = src.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid").fetchall()
    except READ_ERRORS as exc:
        raise MaintError(f"{path}: its schema cannot be read ({exc}); no salvage is possible from this file "
                         "(restore a snapshot instead); nothing was written") from None
    names = {r[1] for r in rows if r[0] == "table"}
    if not {"sessions", "messages"} <= names:
        raise MaintError(f"{path}: not a Hermes session store (no sessions and messages tables in its schema); "
                         "nothing was written")
    return rows


def _shadow_tables(schema: list[tuple[str, str, str, str]]) -> set[str]:
    virtual = [name for kind, name, _, sql in schema if kind == "table" and is_fts5_sql(sql)]
    return {f"{v}_{s}" for v in virtual for s in ("data", "idx", "content", "docsize", "config")}


def _names(sql: str, names: list[str]) -> list[str]:
    """Which of *names* the statement mentions (as a word, quoted or not)."""
    return [n for n in names if re.search(rf"(?<![\w$]){re.escape(n)}(?![\w$])", sql, re.IGNORECASE)]


def _cannot_make(sql: str) -> str | None:
    """Why this SQLite cannot make the virtual table (no such module: vec0), tried on a scratch connection: a
    failed CREATE in the new file, written without a journal, would leave its schema row behind."""
    scratch = connect(":memory:")
    try:
        scratch.execute(sql)
    except apsw.Error as exc:
        return str(exc)
    finally:
        scratch.close()
    return None


def build_schema(dst: apsw.Connection, schema: list[tuple[str, str, str, str]],
                 skipped: list[dict[str, str]] | None = None) -> list[str]:
    """The damaged store's own schema in the new file; the ordinary tables to fill, in creation order.

    A virtual table whose module this SQLite lacks (sqlite-vec's ``vec0``) cannot be made here: it is left out
    and named in *skipped*, with the triggers and views that name it, and the rest of the store is salvaged
    (hostile try 12, P14: the first such table stopped the salvage). Its own tables' rows are copied as they are.
    """
    skipped = [] if skipped is None else skipped
    shadow = _shadow_tables(schema)
    tables = []
    for kind, name, _, sql in schema:
        if not sql or name.startswith("sqlite_") or name in shadow:
            continue
        if kind != "table":
            continue
        if is_virtual_sql(sql):
            if reason := _cannot_make(sql):
                skipped.append({"name": name, "kind": "virtual table", "reason": reason})
            else:
                dst.execute(sql)
            continue
        if dst.execute("SELECT 1 FROM sqlite_master WHERE name = ? COLLATE NOCASE", (name,)).fetchone():
            continue  # made by a virtual table above (its shadow table)
        dst.execute(sql)
        tables.append(name)
    gone = [s["name"] for s in skipped]
    for kind, name, _, sql in schema:  # views, triggers and indexes once every table exists
        if sql and kind in ("view", "trigger", "index"):
            if missing := _names(sql, gone):
                skipped.append({"name": name, "kind": kind, "reason": f"names {', '.join(missing)}, left out"})
                continue
            dst.execute(sql)
    return tables


def _alias_of_rowid(src: apsw.Connection, table: str) -> str | None:
    pk = [r for r in src.execute(f"PRAGMA table_info({quote_ident(table)})") if r[5]]
    if len(pk) == 1 and (pk[0][2] or "").upper() == "INTEGER":
        return pk[0][1]
    return None


def copy_table(src: apsw.Connection, dst: apsw.Connection, table: str, budget: int = QUERY_BUDGET) -> TableResult:
    """Every readable row of *table*, splitting a failing rowid range until both sides of the damage are read."""
    result = TableResult(table)
    try:
        cols = [r[1] for r in src.execute(f"PRAGMA table_info({quote_ident(table)})")]
        alias = _alias_of_rowid(src, table)
    except READ_ERRORS as exc:
        result.unreadable = str(exc)
        return result
    insert_cols = cols if alias else ["rowid", *cols]
    insert = (f"INSERT INTO {quote_ident(table)} ({', '.join(quote_ident(c) for c in insert_cols)}) "
              f"VALUES ({', '.join('?' * len(insert_cols))})")
    select = (f"SELECT rowid, {', '.join(quote_ident(c) for c in cols)} FROM {quote_ident(table)} "
              "WHERE rowid BETWEEN ? AND ? ORDER BY rowid")
    stack = [(ROWID_MIN, ROWID_MAX)]
    while stack:
        lo, hi = stack.pop()
        if lo > hi:
            continue
        if result.queries >= budget:
            result.budget_spent = True
            result.unread.append([lo, hi])
            continue
        result.queries += 1
        last = lo - 1
        try:
            for row in src.execute(select, (lo, hi)):
                rowid = row[0]
                try:
                    dst.execute(insert, row[1:] if alias else row)
                    result.copied += 1
                except (apsw.ConstraintError, apsw.MismatchError):
                    result.rejected.append(rowid)
                except apsw.Error as exc:  # the new file, not the damaged one: never taken for damage
                    raise _WriteFailed(f"{table} row {rowid}: {exc}") from None
                last = rowid
        except READ_ERRORS:
            start = last + 1
            if start >= hi:
                result.unread.append([start, hi])
                continue
            mid = start + (hi - start) // 2
            stack.append((mid + 1, hi))
            stack.append((start, mid))
    result.unread = _merged(result.unread)
    return result


def _merged(spans: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _repair_links(store: Store, results: dict[str, TableResult]) -> dict[str, int]:
    """Sessions for orphaned messages, then every row whose parent was lost: a session loses the link,
    any other row goes. Returns {placeholders, unlinked}."""
    from maint.ops.recover import find_stray, recover

    placeholders = 0
    if store.has_table("sessions") and store.has_table("messages"):
        done, _, _ = recover(store, find_stray(store))
        placeholders = len(done)
    unlinked = 0
    with store.write() as conn:
        for _ in range(3):  # a dropped row can orphan another
            violations = conn.execute("PRAGMA foreign_key_check").fetchall()
            if not violations:
                break
            for table, rowid, _parent, fkid in violations:
                fk = [r for r in conn.execute(f"PRAGMA foreign_key_list({quote_ident(table)})") if r[0] == fkid]
                if table == "sessions" and fk:
                    nulls = ", ".join(f"{quote_ident(r[3])} = NULL" for r in fk)
                    conn.execute(f"UPDATE sessions SET {nulls} WHERE rowid = ?", (rowid,))
                    unlinked += 1
                else:
                    conn.execute(f"DELETE FROM {quote_ident(table)} WHERE rowid = ?", (rowid,))
                    if table in results:
                        results[table].dropped += 1
                        results[table].copied -= 1
    return {"placeholders": placeholders, "unlinked": unlinked}


def _copy_sequence_and_meta(src: apsw.Connection, dst: apsw.Connection) -> None:
    with contextlib.suppress(*READ_ERRORS):
        for name, seq in src.execute("SELECT name, seq FROM sqlite_sequence").fetchall():
            if dst.execute("SELECT 1 FROM sqlite_sequence WHERE name = ?", (name,)).fetchone():
                dst.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (seq, name))
            else:
                dst.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, seq))
    with contextlib.suppress(*READ_ERRORS):
        dst.execute(f"PRAGMA user_version = {int(src.execute('PRAGMA user_version').fetchone()[0])}")
    if dst.execute("SELECT 1 FROM sqlite_master WHERE name = 'state_meta'").fetchone():
        dst.execute(f"DELETE FROM state_meta WHERE key IN ({', '.join('?' * len(DERIVED_META))})", DERIVED_META)


def verify(dst: apsw.Connection) -> list[str]:
    """What is wrong with the new file (empty when it is sound)."""
    problems = [r[0] for r in dst.execute("PRAGMA integrity_check") if r[0] != "ok"]
    if dst.execute("PRAGMA foreign_key_check").fetchall():
        problems.append("foreign key violations remain")
    for name in fts5_indexes(dst):
        if problem := fts.content_check(dst, name):
            problems.append(f"search index {problem}")
    return problems


def _check_new_path(new: Path, store: Path) -> Path:
    new = Path(os.path.abspath(new.expanduser()))
    if new.resolve() == store.resolve():
        raise UsageError(f"--salvage: {new} is the damaged store itself (expected a new file)")
    companion = files.store_companion(new)
    if companion:
        raise UsageError(f"--salvage: {new} {companion} (expected a new file under another name)")
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.lexists(f"{new}{suffix}"):
            raise UsageError(f"--salvage: {new}{suffix} already exists (expected a path where no file is; "
                             "the salvage never overwrites)")
    if not new.parent.is_dir():
        raise UsageError(f"--salvage: folder {new.parent} does not exist (expected a new file in an existing "
                         "folder)")
    return new


def salvage(store_path: Path, new_path: Path | None, *, dry_run: bool = False) -> dict[str, Any]:
    """Copy every readable row of the store at *store_path* into a new file at *new_path* (with *dry_run*,
    into memory only: the report of what would be salvaged, nothing created)."""
    started = time.monotonic()
    store_path = Path(store_path).expanduser()
    if not os.path.isfile(store_path):
        raise UsageError(f"{store_path}: no such store (expected the damaged state.db)")
    checked = check_regular_file(store_path)  # the preflight of every open: no special or foreign side files, no
    # foreign link; what is copied must be this file
    new = None if dry_run or new_path is None else _check_new_path(Path(new_path), store_path)
    temp_root, size = Path(tempfile.gettempdir()), bundle_bytes(store_path)
    with files.private_workdir("salvage") as work:  # first: the copies killed runs left there go
        problem = room_problem(temp_root, size)
        if problem:
            advice = "" if "ulimit" in problem else "; point TMPDIR at a folder with room"
            raise MaintError(f"{temp_root}: cannot hold the private copy of the damaged store ({size} bytes): "
                             f"{problem}{advice}; nothing was written")
        try:
            copy, fingerprint = copy_bundle(store_path, work, checked)
        except OSError as exc:
            reason = write_limit_reached(None, exc)
            if reason is None:
                raise
            raise MaintError(f"{work}: {reason} while copying the damaged store there (its private copy needs "
                             f"{size} bytes); point TMPDIR at a folder with room; nothing was written") from None
        try:
            src = connect(str(copy))
            try:
                src.execute("PRAGMA query_only = ON")
                schema = _schema(src, store_path)
                if new is None:
                    return _fill(src, connect(":memory:"), schema, store_path, None, fingerprint, started)
                with files.Folder.open(new.parent, follow_links=True, what="folder", store=store_path,
                                       databases=True) as folder:
                    folder.clear_leftovers(new.name)
                    temp, fd = folder.temporary(new.name, owner=(checked.st_uid, checked.st_gid))
                    try:
                        dst = connect(str(folder.path / temp))
                        report = _fill(src, dst, schema, store_path, new, fingerprint, started)
                        os.fsync(fd)
                        _refuse_changed(store_path, fingerprint)  # before the new file gets its name, not after
                        folder.publish(temp, new.name)
                        folder.sync()
                        return report
                    finally:
                        os.close(fd)
                        folder.unlink(temp)
            finally:
                src.close()
        finally:
            _refuse_changed(store_path, fingerprint)


def _refuse_changed(store_path: Path, fingerprint: dict[str, str | None]) -> None:
    if _fingerprint(store_path) != fingerprint:  # never expected: we only read a copy
        raise MaintError(f"{store_path}: changed during the salvage (a Hermes process is writing to it); no new "
                         "file was kept")


def _fill(src: apsw.Connection, dst: apsw.Connection, schema: list, store_path: Path, new: Path | None,
          fingerprint: dict[str, str | None], started: float) -> dict[str, Any]:
    # The damaged store's own triggers run for every row copied (they index each message as Hermes does): one
    # that never ends is stopped at a bound scaled by the store's size (hostile try 11, N3: it ran for good).
    limit = scaled_write_limit_s(store_path)
    deadline = time.monotonic() + limit
    dst.set_progress_handler(lambda: time.monotonic() > deadline, PROGRESS_STEPS)
    try:
        return _fill_bounded(src, dst, schema, store_path, new, fingerprint, started)
    except (apsw.Error, _WriteFailed) as exc:  # interrupted: a failed write, or the rollback of what SQLite rolled back
        if _disk_full(exc):
            # the rollback of the transaction SQLite had already ended hides the cause (hostile try 12, P1)
            raise MaintError(f"disk full while writing the salvaged copy{f' {new}' if new else ''} (it needs about "
                             f"the store's size, {store_path.stat().st_size} bytes); free some space or choose "
                             "another folder; nothing was kept") from None
        if time.monotonic() <= deadline:
            raise
        raise MaintError(f"{store_path}: the salvage was still running after {limit:g} s (a trigger in the damaged "
                         "store that never ends?); stopped, nothing was kept") from None
    finally:
        dst.close()


def _disk_full(exc: BaseException | None) -> bool:
    """Whether SQLite ran out of disk anywhere in *exc*'s chain (its context included)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, apsw.FullError) or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _fill_bounded(src: apsw.Connection, dst: apsw.Connection, schema: list, store_path: Path, new: Path | None,
                  fingerprint: dict[str, str | None], started: float) -> dict[str, Any]:
    # Our new, empty file, opened by name in a folder others may write: its first read would roll a -journal
    # planted beside it into it (hostile try 4, G8). The lock of that first read is held from then on
    # (exclusive locking: no later read looks for a journal), and a file that is no longer empty is refused.
    dst.execute("PRAGMA locking_mode = EXCLUSIVE")
    if dst.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]:
        raise MaintError(f"{new}: our new file was not empty when opened (a journal beside it was rolled into "
                         "it); nothing was kept")
    dst.execute("PRAGMA journal_mode = OFF")  # a new file: a failed build is removed, not rolled back
    dst.execute("PRAGMA synchronous = OFF")
    dst.execute("PRAGMA foreign_keys = OFF")
    skipped: list[dict[str, str]] = []
    with dst:
        tables = build_schema(dst, schema, skipped)
    results: dict[str, TableResult] = {}
    for table in tables:
        with dst:  # one transaction per table
            results[table] = copy_table(src, dst, table)
    with dst:
        _copy_sequence_and_meta(src, dst)
    links = _repair_links(Store(new or Path(":memory:"), dst), results)
    problems = verify(dst)
    if problems:
        raise MaintError(f"{store_path}: the salvaged copy failed its checks ({'; '.join(problems[:3])}); "
                         "nothing was kept")
    lost = {t: r for t, r in results.items() if r.unread or r.rejected or r.dropped or r.unreadable}
    counts = {t: dst.execute(f"SELECT COUNT(*) FROM {quote_ident(t)}").fetchone()[0] for t in ("sessions", "messages")}
    return {"store": str(store_path), "salvage": str(new) if new else None, "dry_run": new is None,
            "complete": not lost and not links["placeholders"] and not skipped, "skipped": skipped,
            "sessions": counts["sessions"],
            "messages": counts["messages"], "tables": [r.as_dict() for r in results.values()],
            "lost_tables": sorted(lost), "placeholder_sessions": links["placeholders"],
            "unlinked_sessions": links["unlinked"], "source_fingerprint": fingerprint,
            "seconds": round(time.monotonic() - started, 3)}
